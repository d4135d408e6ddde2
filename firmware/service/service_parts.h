// The running service's parts beside the engine host (engine_host.h): the alarms, the forwarder
// and health clients, the health report and config reloads.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "adapters/config/config.h"
#include "core/clock.h"
#include "core/result.h"
#include "firmware/service/engine_host.h"

namespace tidemark::mqtt {
class Ingest;
}  // namespace tidemark::mqtt

namespace tidemark::firmware {

class Alarms;
class LogAppender;
class Notifier;

/// Operation: what the run loop (runtime.cpp) needs beside the engine host (host(), which it
/// recovers, steps, backfills and checkpoints directly): the alarms (Alarms: they pause ingest
/// while the outbox, the map or the disk is full, and the host raises them), the forwarder and
/// the health publisher, the health report gathered from all of them (service_health.cpp),
/// and config reloads (service_reload.cpp).
/// Concurrency: the engine thread, but for alarms() (any thread: the ingest callback raises
/// and clears the append alarm) and health_json() (the health publisher's thread).
class ServiceParts {
  public:
    /// `clock` must outlive the parts; it is what every part reads time through.
    static Result<std::unique_ptr<ServiceParts>> open(const config::Config& config,
                                                      const core::Clock& clock);
    ~ServiceParts();

    EngineHost& host();
    Alarms& alarms();
    /// Reads the host clock's state (for health) and returns whether to trust it now.
    bool refresh_clock();

    Result<void> start_forwarder();
    Result<void> start_health();
    /// Builds the health report (README, "Health") from what the parts, `ingest` (null while
    /// it is not started) and `appender` (null before ingest starts) say now; the publisher
    /// sends the latest one. With health.prometheus_textfile, the same figures go to that file
    /// every health interval and when an alarm changes (a failure to write it is logged, never
    /// fatal).
    void refresh_health(const mqtt::Ingest* ingest, const LogAppender* appender);
    /// The latest report, as published ("{}" before the first refresh_health).
    std::string health_json() const;
    std::string status_line() const;
    /// Reads the config file again and applies it (see service_reload.cpp); true when it was
    /// applied. The outcome is on health (last_reload).
    bool reload(const std::string& config_path, Notifier& notifier);
    /// The running config (as last applied).
    const config::Config& config() const;
    void stop_clients();

  private:
    void write_prometheus_textfile(const std::string& health_json, bool alarms_changed);
    struct Impl;
    explicit ServiceParts(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace tidemark::firmware
