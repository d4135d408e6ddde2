#include "firmware/service/service_parts.h"

#include <spdlog/spdlog.h>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>

#include "adapters/lmdb/store.h"
#include "adapters/log/log_writer.h"
#include "adapters/mqtt/forwarder.h"
#include "adapters/mqtt/health.h"
#include "adapters/mqtt/ingest.h"
#include "firmware/adapter_options.h"
#include "firmware/build_info.h"
#include "firmware/clock.h"
#include "firmware/notify.h"
#include "firmware/service/alarms.h"
#include "firmware/service/health_report.h"
#include "firmware/service/prometheus_text.h"
#include "firmware/service/result_sinks.h"
#include "firmware/service/too_late_alarm.h"
#include "firmware/service/upstream_health.h"

namespace tidemark::firmware {

namespace {

// How long stop_clients() gives the forwarder and the health publisher each to say goodbye
// (the health publisher's retained "offline"); within systemd's stop timeout with room to spare.
constexpr auto client_stop_timeout = std::chrono::seconds(2);

// Rows in flight on a link that is up and no acknowledgement for this long: the alarm
// upstream_stalled (a proxy or broker that takes TCP and never answers). Well before the
// forwarder's ack timeout (30 s) gives the link up, and held while the next link stalls too.
constexpr int64_t upstream_stall_alarm_ms = 10'000;

}  // namespace

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
    std::atomic<uint64_t> redeliveries_skipped{0};
    // The forwarder's acks at the last health refresh, and since when (steady) they have not
    // moved with rows in flight: for upstream_stalled. Engine thread only.
    std::optional<ReloadFigures> last_reload;
    uint64_t upstream_acks_seen = 0;
    std::vector<std::string> alarms_published;  // the alarms of the last refresh
    int64_t upstream_acks_since_ms = 0;
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

ServiceParts::ServiceParts(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ServiceParts::~ServiceParts() {
    stop_clients();
}

Result<std::unique_ptr<ServiceParts>> ServiceParts::open(const config::Config& config,
                                                         const core::Clock& clock) {
    auto impl = std::make_unique<Impl>(config, clock);
    auto host = EngineHost::open(impl->config, clock, impl->alarms);
    if (!host) return std::unexpected(host.error());
    impl->host = std::move(*host);
    return std::unique_ptr<ServiceParts>(new ServiceParts(std::move(impl)));
}

Result<uint64_t> ServiceParts::recover(const std::function<bool()>& wait_for_room) {
    return impl_->host->recover(wait_for_room);
}
uint64_t ServiceParts::checkpoint_offset() const {
    return impl_->host->checkpoint_stats().log_offset;
}
Result<size_t> ServiceParts::step(size_t records_max, bool drain) {
    return impl_->host->step(records_max, drain);
}
bool ServiceParts::can_checkpoint() const {
    return impl_->host->can_checkpoint();
}
Result<void> ServiceParts::checkpoint() {
    return impl_->host->checkpoint();
}
log::LogWriter& ServiceParts::log() {
    return impl_->host->log();
}
lmdb::Store& ServiceParts::store() {
    return impl_->host->store();
}
mqtt::RedeliveryFilter& ServiceParts::redelivery_filter() {
    return impl_->host->redelivery_filter();
}
bool ServiceParts::ingest_paused() const {
    return impl_->alarms.ingest_paused();
}
void ServiceParts::count_redelivery_skipped() {
    ++impl_->redeliveries_skipped;
}
void ServiceParts::append_failed(const std::string& message) {
    impl_->alarms.append_failed(message);
}
void ServiceParts::append_succeeded() {
    impl_->alarms.append_succeeded();
}
bool ServiceParts::append_failing() const {
    return impl_->alarms.append_failing();
}
uint64_t ServiceParts::append_errors() const {
    return impl_->alarms.append_errors();
}
bool ServiceParts::disk_full() const {
    return impl_->alarms.disk_full();
}
uint64_t ServiceParts::trim_for_disk_full() {
    return impl_->host->trim_for_disk_full();
}

std::optional<std::string> ServiceParts::log_failure() const {
    const log::LogWriter& writer = impl_->host->log();
    if (!writer.poisoned()) return std::nullopt;
    return writer.poison_error();
}

bool ServiceParts::engine_clock_trusted() {
    return impl_->host->processor().engine().clock_trusted();
}

bool ServiceParts::refresh_clock() {
    const ClockStatus status = read_clock_status(impl_->config.source.clock_trust);
    impl_->alarms.set_clock(status);
    return status.trusted;
}

Result<void> ServiceParts::start_forwarder() {
    Impl& m = *impl_;
    if (!m.config.upstream) return {};
    m.outbox_source = make_outbox_source(m.host->store(), m.config);
    m.side_source = make_side_source(m.host->store(), m.config);
    auto fwd = mqtt::Forwarder::create(
        forwarder_options(m.config, m.clock),
        std::vector<mqtt::OutboxSource*>{m.outbox_source.get(), m.side_source.get()});
    if (!fwd) return std::unexpected(fwd.error());
    m.forwarder = std::move(*fwd);
    m.host->set_forwarder(m.forwarder.get());
    return m.forwarder->start();
}

Result<void> ServiceParts::start_health() {
    Impl& m = *impl_;
    auto hp = mqtt::HealthPublisher::create(health_options(m.config, m.clock), [this] {
        std::lock_guard<std::mutex> lk(impl_->health_mutex);
        return impl_->health_json;
    });
    if (!hp) return std::unexpected(hp.error());
    m.health = std::move(*hp);
    return m.health->start();
}

void ServiceParts::refresh_health(const mqtt::Ingest* ingest) {
    Impl& m = *impl_;
    EngineHost& host = *m.host;
    Alarms::Snapshot alarms = m.alarms.snapshot();
    HealthFigures f;
    f.node = m.config.node_id;
    f.time_ms = m.clock.wall_ms();
    f.uptime_s = (m.clock.steady_ms() - m.started_steady_ms) / 1000;
    f.build = build_info();
    f.clock = alarms.clock;
    const std::vector<BackfillFigures> backfills = host.backfill_figures();
    std::vector<std::string> versions;  // pf.version views them
    versions.reserve(m.config.pipelines.size());
    std::map<std::string, TooLateWatch, std::less<>> watches;  // the configured pipelines' only
    for (const config::PipelineConfig& p : m.config.pipelines) {
        PipelineFigures pf;
        pf.name = p.spec.name;
        const int live = host.processor().engine().find_pipeline(p.spec.name);
        TooLateWatch& watch = watches[p.spec.name];
        if (auto old = m.too_late_watches.find(p.spec.name); old != m.too_late_watches.end())
            watch = std::move(old->second);
        if (live >= 0) {
            const auto i = static_cast<uint32_t>(live);
            pf.stats = &host.processor().engine().stats(i);
            pf.decode = &host.processor().decode_counters()[i];
            if (watch.update(m.clock.steady_ms(), pf.stats->events_in, pf.stats->too_late,
                             p.too_late_alarm))
                alarms.alarms.push_back("too_late: " + p.spec.name);
        }
        pf.version = versions.emplace_back(host.live_version(p.spec.name));
        for (const BackfillFigures& b : backfills)
            if (b.pipeline == p.spec.name) pf.backfill = &b;
        for (const SwitchFigures& s : host.switches())
            if (s.pipeline == p.spec.name) pf.switched = &s;
        f.pipelines.push_back(pf);
    }
    m.too_late_watches = std::move(watches);
    f.last_reload = m.last_reload;
    f.ingest = ingest;
    f.ingest_counters = {m.redeliveries_skipped.load(), m.alarms.append_errors(),
                         m.alarms.ingest_paused() || m.alarms.append_failing(),
                         host.processor().malformed_records()};
    f.log = host.log().stats();
    f.reader = host.reader().stats();
    f.engine_offset = host.consumed_offset();
    if (log_damaged(f.log, f.reader)) alarms.alarms.push_back("log_damaged");
    if (m.forwarder) {
        const mqtt::ForwarderStats fs = m.forwarder->stats();
        const int64_t now = m.clock.steady_ms();
        if (fs.acks != m.upstream_acks_seen || fs.inflight == 0 || !fs.link_up) {
            m.upstream_acks_seen = fs.acks;
            m.upstream_acks_since_ms = now;
        } else if (now - m.upstream_acks_since_ms >= upstream_stall_alarm_ms) {
            alarms.alarms.push_back("upstream_stalled");
        }
    }
    f.checkpoint = host.checkpoint_stats();
    if (auto os = host.store().outbox_stats()) f.outbox = *os;
    f.forwarder = m.forwarder.get();
    if (auto ss = host.store().side_stats()) f.side = *ss;
    if (auto used = host.store().map_used_bytes())
        f.map = MapFigures{*used, host.store().map_size_bytes(), host.side_rows_dropped()};
    f.rss_kib = rss_kib();
    f.alarms = alarms.alarms;
    if (m.config.health.upstream)
        f.health_upstream = {m.upstream_health.queued(), m.upstream_health.skipped()};
    std::string text = health_record_json(f);
    std::string status = firmware::status_line(alarms.alarms, m.forwarder.get());
    const bool alarms_changed = alarms.alarms != m.alarms_published;
    write_prometheus_textfile(text, alarms_changed);
    if (m.upstream_health.offer(host.store(), text, alarms_changed) && m.forwarder)
        m.forwarder->notify();
    {
        std::lock_guard<std::mutex> lk(m.health_mutex);
        m.health_json = std::move(text);
        m.status = std::move(status);
    }
    // A raised or cleared alarm goes out now, not at the next health interval (DESIGN.md
    // section 5: on the health topic within one interval, and refresh comes every second).
    if (alarms_changed) {
        m.alarms_published = alarms.alarms;
        if (m.health) m.health->publish_now();
    }
}

// Every health interval, and at once when an alarm is raised or cleared, as the health topic.
void ServiceParts::write_prometheus_textfile(const std::string& health_json, bool alarms_changed) {
    Impl& m = *impl_;
    const std::string& path = m.config.health.prometheus_textfile;
    if (path.empty()) return;
    const int64_t now = m.clock.steady_ms();
    if (!alarms_changed && m.textfile_written_ms &&
        now - *m.textfile_written_ms < m.config.health.interval_ms)
        return;
    m.textfile_written_ms = now;
    auto text = prometheus_text(health_json);
    TM_ASSERT(text);  // the record was just rendered
    if (auto written = write_textfile(path, *text); !written) {
        if (!m.textfile_failing)
            spdlog::warn("{} (retried every health interval)", written.error().message);
        m.textfile_failing = true;
    } else {
        if (m.textfile_failing) spdlog::info("health.prometheus_textfile: {} written again", path);
        m.textfile_failing = false;
    }
}

std::string ServiceParts::health_json() const {
    std::lock_guard<std::mutex> lk(impl_->health_mutex);
    return impl_->health_json;
}

std::string ServiceParts::status_line() const {
    std::lock_guard<std::mutex> lk(impl_->health_mutex);
    return impl_->status;
}

// A config that fails check-config changes nothing; one that changes what only a restart can
// change (where data lives, which brokers) neither. Everything else applies now: log_level,
// backfill settings, and pipelines through versions (EngineHost::reconfigure).
bool ServiceParts::reload(const std::string& config_path, Notifier& notifier) {
    notifier.reloading();
    Impl& m = *impl_;
    ReloadFigures outcome;
    outcome.time_ms = m.clock.wall_ms();
    const auto refuse = [&](const std::string& status) {
        for (const std::string& e : outcome.errors)
            spdlog::error("reload refused, the running config stays: {}", e);
        notifier.status(status);
        notifier.ready();
        m.last_reload = std::move(outcome);
        return false;
    };
    auto loaded = config::load_config_file(config_path);
    if (!loaded) {
        for (const config::ConfigError& e : loaded.error())
            outcome.errors.push_back((e.pointer.empty() ? "(config)" : e.pointer) + ": " +
                                     e.message);
        return refuse("reload refused: the new config has errors (see the journal)");
    }
    const config::Config& now = m.config;
    std::vector<std::string> needs_restart;
    if (loaded->node_id != now.node_id) needs_restart.push_back("/node_id");
    if (loaded->data_dir != now.data_dir) needs_restart.push_back("/data_dir");
    if (loaded->source.uri != now.source.uri || loaded->source.client_id != now.source.client_id)
        needs_restart.push_back("/source");
    if (loaded->upstream.has_value() != now.upstream.has_value() ||
        (loaded->upstream && (loaded->upstream->uri != now.upstream->uri ||
                              loaded->upstream->client_id != now.upstream->client_id ||
                              loaded->upstream->topic != now.upstream->topic)))
        needs_restart.push_back("/upstream");
    for (const std::string& p : needs_restart)
        outcome.errors.push_back(p +
                                 ": changed; this needs a restart (systemctl restart "
                                 "tidemark)");
    if (!needs_restart.empty()) return refuse("reload refused: a restart is needed");
    if (auto ok = m.host->reconfigure(*loaded); !ok) {
        outcome.errors.push_back("(config): " + ok.error().message);
        return refuse("reload refused: " + ok.error().message);
    }
    spdlog::set_level(spdlog::level::from_str(loaded->log_level));
    m.config.log_level = loaded->log_level;
    m.config.backfill = loaded->backfill;
    m.config.pipelines = loaded->pipelines;
    spdlog::info("reload: applied ({} pipelines)", m.config.pipelines.size());
    outcome.ok = true;
    m.last_reload = std::move(outcome);
    notifier.status("reloaded");
    notifier.ready();
    return true;
}

const config::Config& ServiceParts::config() const {
    return impl_->config;
}

bool ServiceParts::backfilling() const {
    return impl_->host->backfilling();
}

Result<size_t> ServiceParts::backfill_step(size_t records_max) {
    return impl_->host->backfill_step(records_max);
}

void ServiceParts::stop_clients() {
    if (impl_->forwarder) impl_->forwarder->stop(client_stop_timeout);
    if (impl_->health) impl_->health->stop(client_stop_timeout);
    impl_->host->set_forwarder(nullptr);
    impl_->forwarder.reset();
    impl_->health.reset();
}

}  // namespace tidemark::firmware
