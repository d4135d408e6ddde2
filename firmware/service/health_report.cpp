#include "firmware/service/health_report.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "adapters/mqtt/forwarder.h"
#include "adapters/mqtt/ingest.h"

namespace tidemark::firmware {

using nlohmann::json;

bool log_damaged(const log::LogStats& log, const log::ReaderStats& reader) {
    return reader.damaged_regions > 0 || log.damaged_regions > 0;
}

namespace {

// Health is published and inspect is printed whatever a topic or an error message holds: bytes
// that are not UTF-8 are replaced rather than thrown about.
std::string dump(const json& j) {
    return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

json pipeline_report(const core::PipelineStats& s, const DecodeCounters& d) {
    json p;
    p["watermark_ms"] = s.watermark_ms;
    const auto lag_ms = core::watermark_lag_ms(s);
    p["watermark_lag_ms"] = lag_ms ? json(*lag_ms) : json(nullptr);
    p["events_in"] = s.events_in;
    p["late_updated"] = s.late_updated;
    p["too_late"] = s.too_late;
    p["too_late_partial"] = s.too_late_partial;
    // The windows with the most too-late events (the engine's order: most first, then the
    // earlier window), so an operator sees which spans of time lost data without a replay.
    json windows = json::array();
    for (uint32_t i = 0; i < s.too_late_top_size; ++i) {
        const core::TooLateWindow& w = s.too_late_top[i];
        windows.push_back(
            {{"start_ms", w.start_ms}, {"end_ms", w.end_ms}, {"too_late", w.too_late}});
    }
    p["too_late_windows"] = std::move(windows);
    p["too_late_windows_tracked"] = s.too_late_windows_tracked;
    p["too_late_windows_dropped"] = s.too_late_windows_dropped;
    p["late_reports"] = s.late_reports;
    p["late_tallies"] = s.late_tallies;
    p["too_late_unreported"] = s.too_late_unreported;
    p["partitions_forgotten"] = s.partitions_forgotten;
    p["partitions_remembered"] = s.partitions_remembered;
    p["forgotten_evicted"] = s.forgotten_evicted;
    p["side_outputs"] = s.side_outputs;
    p["clamped"] = s.clamped;
    p["malformed"] = d.malformed;
    p["fields_missing"] = d.fields_missing;
    p["keys_refused"] = s.keys_refused;
    p["windows_refused"] = s.windows_refused;
    p["partitions_active"] = s.partitions_active;
    p["partitions_idle"] = s.partitions_idle;
    p["keys"] = s.keys;
    p["open_windows"] = s.open_windows;
    p["state_bytes"] = s.state_bytes;
    p["emitted"] = {
        {"final", s.emitted_final}, {"update", s.emitted_update}, {"retract", s.emitted_retract}};
    p["lag_ms"] = {{"p50", s.lag_ms.quantile(0.5)},
                   {"p99", s.lag_ms.quantile(0.99)},
                   {"p999", s.lag_ms.quantile(0.999)}};
    return p;
}

// A pipeline's live figures with its version, and its backfill while one runs (or the switch
// that ended it in this process).
json pipeline_version_report(const PipelineFigures& p) {
    json out = p.stats ? pipeline_report(*p.stats, *p.decode) : json::object();
    out["version"] = p.version.empty() ? json(nullptr) : json(p.version);
    if (const BackfillFigures* b = p.backfill) {
        out["backfill"] = {{"state", "running"},
                           {"version", b->version},
                           {"offset", b->offset},
                           {"end_offset", b->end_offset},
                           {"records", b->records},
                           {"records_per_s", b->records_per_s},
                           {"eta_s", b->eta_s >= 0 ? json(b->eta_s) : json(nullptr)}};
    } else if (const SwitchFigures* s = p.switched) {
        out["backfill"] = {
            {"state", "switched"}, {"version", s->version}, {"since_ms", s->since_ms}};
    }
    return out;
}

json outbox_report(const lmdb::OutboxStats& s, int64_t now_wall_ms) {
    // A clock stepped back behind the oldest row's stamp shows 0, not a negative age.
    const json oldest_age_ms = s.oldest_enqueued_ms > 0
                                   ? json(std::max<int64_t>(now_wall_ms - s.oldest_enqueued_ms, 0))
                                   : json(nullptr);
    return {{"rows", s.rows},
            {"bytes", s.bytes},
            {"oldest_seq", s.oldest_seq},
            {"oldest_age_ms", oldest_age_ms},
            {"dropped", s.dropped},
            {"compacted", s.compacted},
            {"duplicates_skipped", s.duplicates_skipped},
            {"health_rows", s.health_rows}};
}

json side_report(const lmdb::SideStats& s) {
    return {{"rows", s.rows}, {"bytes", s.bytes}, {"dropped", s.dropped}};
}

json log_report(const log::LogStats& ls, const log::ReaderStats& rs, uint64_t engine_offset) {
    json l = {
        {"bytes", ls.total_bytes},
        {"segments", ls.segments},
        {"first_offset", ls.first_offset},
        {"end_offset", ls.end_offset},
        {"durable_offset", ls.durable_offset},
        {"engine_offset", engine_offset},
        {"oldest_ingest_ms",
         ls.oldest_ingest_ms == log::ingest_ms_unknown ? json(nullptr) : json(ls.oldest_ingest_ms)},
        {"records_appended", ls.records_appended},
        {"disk_bytes", ls.disk_bytes},
        {"seals_deferred", ls.seals_deferred},
        {"tail_truncations", ls.tail_truncations},
        {"poisoned", ls.poisoned}};
    // Damage (a bad sector mid-log): the records after it were kept, the bytes in between lost.
    l["damaged_regions"] = std::max(rs.damaged_regions, ls.damaged_regions);
    l["damaged_bytes"] = std::max(rs.damaged_bytes, ls.damaged_bytes);
    if (log_damaged(ls, rs)) l["last_damage"] = rs.last_damage;
    return l;
}

json checkpoint_report(const CheckpointStats& s, int64_t now_wall_ms) {
    return {{"count", s.count},
            {"age_ms", s.wall_ms ? now_wall_ms - s.wall_ms : -1},
            {"duration_ms", s.duration_ms},
            {"log_offset", s.log_offset}};
}

json ingest_report(const mqtt::Ingest* ingest) {
    json in;
    if (!ingest) {
        in["connected"] = false;
        return in;
    }
    const mqtt::IngestStats is = ingest->stats();
    in["connected"] = is.connected;
    in["messages"] = is.messages;
    in["bytes"] = is.bytes;
    in["duplicates_flagged"] = is.duplicates;
    in["reconnects"] = is.reconnects;
    in["retries"] = is.handler_retries;
    in["connections_cut"] = is.connections_cut;
    in["retained_skipped"] = is.retained_skipped;
    in["last_error"] = is.last_error;
    return in;
}

json upstream_report(const mqtt::Forwarder* forwarder) {
    if (!forwarder) return {{"configured", false}};
    const mqtt::ForwarderStats fs = forwarder->stats();
    return {
        {"link_up", fs.link_up},
        {"sends", fs.sends},
        {"acks", fs.acks},
        {"reconnects", fs.reconnects},
        {"node", fs.node},
        {"failovers", fs.failovers},
        {"last_outage_ms", fs.last_outage_ms ? json(*fs.last_outage_ms) : json(nullptr)},
        {"inflight", fs.inflight},
        {"rejected", fs.rejected},
        {"first_row_after_reconnect_ms",
         fs.first_row_after_reconnect_ms ? json(*fs.first_row_after_reconnect_ms) : json(nullptr)},
        {"offline_since_ms", fs.offline_since_ms},
        {"last_error", fs.last_error}};
}

json clock_report(const ClockStatus& clock) {
    return {{"synchronised", clock.kernel_synchronised},
            {"trusted", clock.trusted},
            {"sync_service", clock.sync_service}};
}

json build_report(const BuildInfo& build) {
    json b = {{"crc32c", build.crc32c}};
    if (!build.json_kernel.empty()) b["json_kernel"] = build.json_kernel;
    return b;
}

}  // namespace

uint64_t rss_kib() {
    std::ifstream in("/proc/self/status");
    std::string line;
    while (std::getline(in, line))
        if (line.rfind("VmRSS:", 0) == 0) return std::strtoull(line.c_str() + 6, nullptr, 10);
    return 0;
}

std::string pipeline_report_json(const core::PipelineStats& stats, const DecodeCounters& decode) {
    return dump(pipeline_report(stats, decode));
}

std::string outbox_report_json(const lmdb::OutboxStats& stats, int64_t now_wall_ms) {
    return dump(outbox_report(stats, now_wall_ms));
}

std::string side_report_json(const lmdb::SideStats& stats) {
    return dump(side_report(stats));
}

std::string health_record_json(const HealthFigures& f) {
    json h;
    h["node"] = f.node;
    h["time_ms"] = f.time_ms;
    h["uptime_s"] = f.uptime_s;
    h["build"] = build_report(f.build);
    h["clock"] = clock_report(f.clock);
    json pipelines = json::object();
    for (const PipelineFigures& p : f.pipelines)
        pipelines[std::string(p.name)] = pipeline_version_report(p);
    h["pipelines"] = std::move(pipelines);
    if (f.last_reload)
        h["last_reload"] = {{"time_ms", f.last_reload->time_ms},
                            {"ok", f.last_reload->ok},
                            {"errors", f.last_reload->errors}};
    json in = ingest_report(f.ingest);
    in["redeliveries_skipped"] = f.ingest_counters.redeliveries_skipped;
    in["append_errors"] = f.ingest_counters.append_errors;
    in["paused"] = f.ingest_counters.paused;
    in["malformed_records"] = f.ingest_counters.malformed_records;
    h["ingest"] = std::move(in);
    h["log"] = log_report(f.log, f.reader, f.engine_offset);
    h["checkpoint"] = checkpoint_report(f.checkpoint, f.time_ms);
    if (f.outbox) h["outbox"] = outbox_report(*f.outbox, f.time_ms);
    h["upstream"] = upstream_report(f.forwarder);
    if (f.side) h["side"] = side_report(*f.side);
    if (f.map)
        h["map"] = {{"used_bytes", f.map->used_bytes},
                    {"size_bytes", f.map->size_bytes},
                    {"side_rows_dropped", f.map->side_rows_dropped}};
    h["rss_kib"] = f.rss_kib;
    h["alarms"] = f.alarms;
    if (f.health_upstream)
        h["health_upstream"] = {{"queued", f.health_upstream->queued},
                                {"skipped", f.health_upstream->skipped}};
    return dump(h);
}

std::string status_line(const std::vector<std::string>& alarms, const mqtt::Forwarder* forwarder) {
    if (!alarms.empty()) return "alarm: " + alarms[0];
    if (forwarder && !forwarder->stats().link_up) return "running, upstream offline";
    return "running";
}

}  // namespace tidemark::firmware
