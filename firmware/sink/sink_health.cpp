#include "firmware/sink/sink_health.h"

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <fstream>

namespace tidemark::firmware::sink {

namespace {

using json = nlohmann::ordered_json;

json quantiles(const core::LagHistogram& h) {
    if (h.count() == 0) return {{"p50", nullptr}, {"p99", nullptr}, {"count", 0}};
    return {{"p50", h.quantile(0.5)}, {"p99", h.quantile(0.99)}, {"count", h.count()}};
}

json text_or_null(const std::string& s) {
    return s.empty() ? json(nullptr) : json(s);
}

}  // namespace

uint64_t rss_anon_kib() {
    std::ifstream in("/proc/self/status");
    std::string line;
    while (std::getline(in, line))
        if (line.rfind("RssAnon:", 0) == 0) return std::strtoull(line.c_str() + 8, nullptr, 10);
    return 0;
}

std::vector<std::string> sink_alarms(const SinkFigures& f) {
    std::vector<std::string> alarms;
    if (f.writer.fatal) alarms.push_back("spool_poisoned: " + f.writer.fatal_error);
    if (!f.writer.postgres_up)
        alarms.push_back("postgres_down" + (f.writer.postgres_error.empty()
                                                ? std::string()
                                                : ": " + f.writer.postgres_error));
    if (!f.ingest.connected && !f.ingest_paused)
        alarms.push_back("broker_down" + (f.ingest.last_error.empty()
                                              ? std::string()
                                              : ": " + f.ingest.last_error));
    if (f.ingest_paused) alarms.push_back("spool_full");
    if (f.spool.append_failing) alarms.push_back("spool_append_failed: " + f.spool.last_error);
    if (!f.writer.resume_problem.empty())
        alarms.push_back("spool_mismatch: " + f.writer.resume_problem);
    return alarms;
}

std::string sink_health_json(const SinkFigures& f) {
    const WriterStats& w = f.writer;
    json h;
    h["time_ms"] = f.time_ms;
    h["uptime_s"] = f.uptime_s;
    h["client_id"] = f.client_id;
    h["alarms"] = sink_alarms(f);
    h["rows_written"] = w.rows_written;
    h["rows_older"] = w.rows_older;
    h["rejected"] = w.rejected;
    h["side_rows"] = w.side_rows;
    h["health_rows"] = {{"written", w.health_rows}, {"older", w.health_older}};
    h["late_rows"] = w.late_rows;
    h["late_older"] = w.late_older;
    h["versions"] = {{"changed", w.versions_changed},
                     {"older", w.versions_older},
                     {"removed", w.versions_removed},
                     {"views_updated", w.views_updated}};
    // Receive is when the spool stamped the message (the sink's own delay); the watermark
    // measures from the gateway's event time, so it also holds the watermark delay and the link.
    h["commit_lag_ms"] = quantiles(w.commit_lag);
    h["commit_lag_ms"]["from"] = "receive";
    h["watermark_lag_ms"] = quantiles(w.watermark_lag);
    h["commits"] = {{"count", w.commits},
                    {"records", w.records_committed},
                    {"isolated", w.isolated_commits},
                    {"last_records", w.last_batch_records},
                    {"last_duration_ms", w.last_commit_duration_ms},
                    {"last_ms", w.last_commit_ms == 0 ? json(nullptr) : json(w.last_commit_ms)}};
    h["broker"] = {{"uri", f.broker_uri},
                   {"link_up", f.ingest.connected},
                   {"paused", f.ingest_paused},
                   {"pauses", f.pauses},
                   {"messages", f.ingest.messages},
                   {"duplicates_flagged", f.ingest.duplicates},
                   {"reconnects", f.ingest.reconnects},
                   {"node", f.ingest.node},
                   {"failovers", f.ingest.failovers},
                   {"last_error", text_or_null(f.ingest.last_error)}};
    h["postgres"] = {{"up", w.postgres_up},
                     {"connects", w.postgres_connects},
                     {"failures", w.postgres_failures},
                     {"schema_version", w.schema_version},
                     {"server_version", w.server_version},
                     {"last_error", text_or_null(w.last_postgres_error)},
                     {"view_problems", w.view_problems}};
    h["spool"] = {{"backlog_bytes", f.spool.backlog_bytes},
                  {"max_bytes", f.spool_max_bytes},
                  {"disk_bytes", f.spool.disk_bytes},
                  {"segments", f.spool.segments},
                  {"end_offset", f.spool.end_offset},
                  {"committed_offset", f.spool.committed_offset},
                  {"appended", f.spool.appended},
                  {"oversized", f.spool.oversized},
                  {"redeliveries_skipped", f.spool.redeliveries_skipped},
                  {"held", f.spool.held},
                  {"last_error", text_or_null(f.spool.last_error)}};
    h["rss_kib"] = f.rss_kib;
    h["rss_anon_kib"] = f.rss_anon_kib;
    return h.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace tidemark::firmware::sink
