// What the files of ServiceParts share (service_parts.cpp, service_health.cpp,
// service_reload.cpp); nothing outside them includes it.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "adapters/mqtt/forwarder.h"
#include "adapters/mqtt/health.h"
#include "firmware/service/alarms.h"
#include "firmware/service/engine_host.h"
#include "firmware/service/health_report.h"
#include "firmware/service/service_parts.h"
#include "firmware/service/too_late_alarm.h"
#include "firmware/service/upstream_health.h"

namespace tidemark::firmware {

// Members in construction order: the host refers to config, clock and alarms; the sources and
// the clients to the host's store.
struct ServiceParts::Impl {
    explicit Impl(const config::Config& c, const core::Clock& clk)
        : config(c), clock(clk), started_steady_ms(clk.steady_ms()), upstream_health(config, clk) {}

    config::Config config;
    const core::Clock& clock;
    const int64_t started_steady_ms;
    Alarms alarms;
    std::unique_ptr<EngineHost> host;
    std::unique_ptr<mqtt::OutboxSource> outbox_source;
    std::unique_ptr<mqtt::OutboxSource> side_source;
    std::unique_ptr<mqtt::Forwarder> forwarder;
    std::unique_ptr<mqtt::HealthPublisher> health;
    // The forwarder's acks at the last health refresh, and since when (steady) they have not
    // moved with rows in flight: for upstream_stalled. Engine thread only.
    uint64_t upstream_acks_seen = 0;
    int64_t upstream_acks_since_ms = 0;
    std::optional<ReloadFigures> last_reload;   // health's last_reload; engine thread
    std::vector<std::string> alarms_published;  // the alarms of the last refresh
    // health.prometheus_textfile: when it was last written (steady), and whether that failed
    // (logged once per failing spell). Engine thread only.
    std::optional<int64_t> textfile_written_ms;
    // late.alarm, per configured pipeline (bounded by the config's pipelines). Engine thread.
    std::map<std::string, TooLateWatch, std::less<>> too_late_watches;
    bool textfile_failing = false;
    UpstreamHealth upstream_health;  // health.upstream; engine thread

    mutable std::mutex health_mutex;
    std::string health_json = "{}";  // under health_mutex
    std::string status;              // under health_mutex
};

}  // namespace tidemark::firmware
