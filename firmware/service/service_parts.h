// The running service's parts, behind one facade for the run loop (runtime.cpp): the engine
// host (engine_host.h), the alarms, the forwarder and health clients, the health report and
// config reloads.
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

class Notifier;

/// Operation: see EngineHost for open, recover, step and checkpoint; the alarms (Alarms) pause
/// ingest while the outbox, the map or the disk is full (retry_later: the broker keeps the
/// messages), and nothing is checkpointed past emissions that are not in the outbox.
/// Concurrency: everything but log(), redelivery_filter(), ingest_paused(),
/// count_redelivery_skipped(), append_failed(), append_succeeded(), append_failing(),
/// append_errors() and health_json() runs on the engine thread. The ingest callback uses those.
class ServiceParts {
  public:
    /// `clock` must outlive the parts; it is what every part reads time through.
    static Result<std::unique_ptr<ServiceParts>> open(const config::Config& config,
                                                      const core::Clock& clock);
    ~ServiceParts();

    /// Loads the checkpoint and replays the log to its end. Returns records replayed. While the
    /// outbox, map or disk is full it calls `wait_for_room` (which waits a little, keeps the
    /// watchdog fed, and returns false to give up because the service is stopping) and tries
    /// again: a restart never turns a condition that draining fixes into a crash loop.
    /// State of pipelines no longer in the config is dropped; state of a changed pipeline is
    /// refused with Error::code exit_config_conflict.
    Result<uint64_t> recover(const std::function<bool()>& wait_for_room);
    /// The log offset of the last committed (or recovered) checkpoint.
    uint64_t checkpoint_offset() const;
    /// Processes at most `records_max` records (up to the durable end, or the written end when
    /// draining on shutdown) and commits their emissions. Returns records processed.
    Result<size_t> step(size_t records_max, bool drain);
    /// False while emissions wait for room in the outbox.
    bool can_checkpoint() const;
    /// On failure the engine's changes stay marked for the next checkpoint, an alarm stays
    /// raised until one commits, and room is made (ids before the last good checkpoint, side
    /// output) when the map was full.
    Result<void> checkpoint();

    log::LogWriter& log();
    /// The open store, for tests and tools that act as the forwarder (engine thread only).
    lmdb::Store& store();
    mqtt::RedeliveryFilter& redelivery_filter();
    bool ingest_paused() const;
    void count_redelivery_skipped();
    void append_failed(const std::string& message);
    /// Clears the append alarm after a failure; cheap when there was none.
    void append_succeeded();
    /// A log append failed and none has succeeded since (Alarms::append_failing).
    bool append_failing() const;
    /// Failed log appends so far.
    uint64_t append_errors() const;

    /// The disk is full (a log append or an LMDB write said so): log segments before the last
    /// checkpoint go now, whatever their age (they are needed only by replay and backfill).
    /// Returns the bytes freed.
    uint64_t trim_for_disk_full();
    /// Whether a log append or the outbox reports a full disk.
    bool disk_full() const;
    /// Why the log can no longer be written (a failed fdatasync poisoned it), or none.
    std::optional<std::string> log_failure() const;
    /// Whether the engine, at the end of what it has read, takes the clock as trusted.
    bool engine_clock_trusted();
    /// Reads the host clock's state (for health) and returns whether to trust it now.
    bool refresh_clock();

    Result<void> start_forwarder();
    Result<void> start_health();
    /// Builds the health report (README, "Health") from what the parts and `ingest` (null while
    /// it is not started) say now; the publisher sends the latest one. With
    /// health.prometheus_textfile, the same figures go to that file every health interval and
    /// when an alarm changes (a failure to write it is logged, never fatal).
    void refresh_health(const mqtt::Ingest* ingest);
    /// The latest report, as published ("{}" before the first refresh_health).
    std::string health_json() const;
    std::string status_line() const;
    /// Reads the config file again and applies it (see the .cpp); true when it was applied.
    /// The outcome is on health (last_reload).
    bool reload(const std::string& config_path, Notifier& notifier);
    /// The running config (as last applied).
    const config::Config& config() const;
    /// See EngineHost::backfill_step.
    Result<size_t> backfill_step(size_t records_max);
    bool backfilling() const;
    void stop_clients();

  private:
    void write_prometheus_textfile(const std::string& health_json, bool alarms_changed);
    struct Impl;
    explicit ServiceParts(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace tidemark::firmware
