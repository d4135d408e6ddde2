// ServiceParts: the health report gathered from every part, and its Prometheus textfile.
#include <spdlog/spdlog.h>

#include "adapters/lmdb/store.h"
#include "adapters/log/log_writer.h"
#include "adapters/mqtt/forwarder.h"
#include "adapters/mqtt/health.h"
#include "adapters/mqtt/ingest.h"
#include "firmware/build_info.h"
#include "firmware/service/log_appender.h"
#include "firmware/service/prometheus_text.h"
#include "firmware/service/service_parts_impl.h"

namespace tidemark::firmware {

namespace {

// Rows in flight on a link that is up and no acknowledgement for this long: the alarm
// upstream_stalled (a proxy or broker that takes TCP and never answers). Well before the
// forwarder's ack timeout (30 s) gives the link up, and held while the next link stalls too.
constexpr int64_t upstream_stall_alarm_ms = 10'000;

}  // namespace

void ServiceParts::refresh_health(const mqtt::Ingest* ingest, const LogAppender* appender) {
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
    f.ingest_counters = {appender ? appender->redeliveries_skipped() : 0, m.alarms.append_errors(),
                         m.alarms.ingest_paused() || m.alarms.append_failing(),
                         host.processor().malformed_records()};
    f.log = host.log().stats();
    f.reader = host.reader().stats();
    f.engine_offset = host.consumed_offset();
    if (log_damaged(f.log, f.reader)) alarms.alarms.push_back("log_damaged");
    // A compressed log that cannot write its blocks (a full disk) keeps its frames plain and
    // durable in the stage until a seal succeeds: nothing is lost, but the disk and the flash
    // take the plain bytes meanwhile.
    if (f.log.seal_deferred) alarms.alarms.push_back("log_seal_deferred");
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

}  // namespace tidemark::firmware
