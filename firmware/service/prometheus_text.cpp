// The health record as Prometheus text: a table from the record's fields to metric names.
#include "firmware/service/prometheus_text.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>
#include <vector>

namespace tidemark::firmware {
namespace {

using nlohmann::json;

// One metric: where its value is in the record (a JSON pointer, relative to the record or to a
// pipeline's object), its name, type and help, and the factor to its base unit.
struct Metric {
    const char* pointer;
    const char* name;
    const char* type;  // "counter" or "gauge"
    const char* help;
    double scale = 1;
};

constexpr double ms = 1e-3;

const Metric node_metrics[] = {
    {"/uptime_s", "tidemark_uptime_seconds", "gauge", "Time since the process started."},
    {"/time_ms", "tidemark_health_time_seconds", "gauge",
     "Wall-clock time of the health record (Unix time).", ms},
    {"/clock/synchronised", "tidemark_clock_synchronised", "gauge",
     "1 while the kernel says the clock is synchronised."},
    {"/rss_kib", "tidemark_resident_memory_bytes", "gauge", "Resident memory.", 1024},
    {"/ingest/connected", "tidemark_ingest_connected", "gauge",
     "1 while ingest is connected to the gateway broker."},
    {"/ingest/paused", "tidemark_ingest_paused", "gauge",
     "1 while ingest is stopped (a full outbox, map or disk, or a failed append)."},
    {"/ingest/messages", "tidemark_ingest_messages_total", "counter", "Messages received."},
    {"/ingest/bytes", "tidemark_ingest_bytes_total", "counter", "Payload bytes received."},
    {"/ingest/duplicates_flagged", "tidemark_ingest_duplicates_flagged_total", "counter",
     "Messages the broker flagged as redelivered."},
    {"/ingest/redeliveries_skipped", "tidemark_ingest_redeliveries_skipped_total", "counter",
     "Redelivered messages already in the log, not logged again."},
    {"/ingest/reconnects", "tidemark_ingest_reconnects_total", "counter",
     "Connections to the gateway broker made again."},
    {"/ingest/retries", "tidemark_ingest_retries_total", "counter",
     "Messages the log could not take (each cut the connection unacknowledged)."},
    {"/ingest/retained_skipped", "tidemark_ingest_retained_skipped_total", "counter",
     "Retained messages not logged."},
    {"/ingest/append_errors", "tidemark_ingest_append_errors_total", "counter",
     "Failed log appends."},
    {"/ingest/malformed_records", "tidemark_ingest_malformed_records_total", "counter",
     "Messages kept as malformed records (too large for a record)."},
    {"/log/bytes", "tidemark_log_bytes", "gauge",
     "Bytes of the retained log's records, uncompressed (tidemark_log_disk_bytes: on disk)."},
    {"/log/segments", "tidemark_log_segments", "gauge", "Log segments on disk."},
    {"/log/disk_bytes", "tidemark_log_disk_bytes", "gauge",
     "What the log's segments take on disk (compressed blocks and staged frames)."},
    {"/log/seals_deferred", "tidemark_log_seals_deferred_total", "counter",
     "Seals of compressed log blocks deferred for want of disk space."},
    {"/log/records_appended", "tidemark_log_records_appended_total", "counter",
     "Records appended to the log by this process."},
    {"/log/damaged_regions", "tidemark_log_damaged_regions_total", "counter",
     "Damaged regions of the log skipped."},
    {"/log/damaged_bytes", "tidemark_log_damaged_bytes_total", "counter",
     "Bytes of damaged log skipped."},
    {"/log/poisoned", "tidemark_log_poisoned", "gauge", "1 after a failed fdatasync of the log."},
    {"/checkpoint/count", "tidemark_checkpoints_total", "counter", "Checkpoints committed."},
    {"/checkpoint/age_ms", "tidemark_checkpoint_age_seconds", "gauge",
     "Time since the last checkpoint.", ms},
    {"/checkpoint/duration_ms", "tidemark_checkpoint_duration_seconds", "gauge",
     "How long the last checkpoint took.", ms},
    {"/outbox/rows", "tidemark_outbox_rows", "gauge", "Results waiting to go upstream."},
    {"/outbox/bytes", "tidemark_outbox_bytes", "gauge", "Bytes of results waiting to go upstream."},
    {"/outbox/oldest_age_ms", "tidemark_outbox_oldest_age_seconds", "gauge",
     "How long the oldest unsent result has waited.", ms},
    {"/outbox/dropped", "tidemark_outbox_dropped_total", "counter",
     "Results dropped by when_full: drop_oldest."},
    {"/outbox/compacted", "tidemark_outbox_compacted_total", "counter",
     "Unsent revisions replaced by a newer one."},
    {"/outbox/health_rows", "tidemark_outbox_health_rows", "gauge",
     "Health records waiting to go upstream (health.upstream): 0 or 1."},
    {"/health_upstream/skipped", "tidemark_health_upstream_skipped_total", "counter",
     "Health records not queued upstream: the outbox was at its bound."},
    {"/outbox/duplicates_skipped", "tidemark_outbox_duplicates_skipped_total", "counter",
     "Results regenerated after a crash and not queued twice."},
    {"/upstream/link_up", "tidemark_upstream_link_up", "gauge",
     "1 while the link to the upstream broker is up."},
    {"/upstream/sends", "tidemark_upstream_sends_total", "counter",
     "Results sent upstream (re-sends included)."},
    {"/upstream/acks", "tidemark_upstream_acks_total", "counter",
     "Results the upstream broker acknowledged."},
    {"/upstream/reconnects", "tidemark_upstream_reconnects_total", "counter",
     "Connections to the upstream broker made again."},
    {"/upstream/failovers", "tidemark_upstream_failovers_total", "counter",
     "Links made on another upstream address than the previous one."},
    {"/upstream/inflight", "tidemark_upstream_inflight", "gauge",
     "Results sent and not yet acknowledged."},
    {"/upstream/rejected", "tidemark_upstream_rejected_total", "counter",
     "Rows no broker can take, deleted and logged."},
    {"/side/rows", "tidemark_side_rows", "gauge", "Side output waiting to go upstream."},
    {"/side/bytes", "tidemark_side_bytes", "gauge", "Bytes of side output waiting."},
    {"/side/dropped", "tidemark_side_dropped_total", "counter",
     "Side output dropped beyond its bound."},
    {"/map/used_bytes", "tidemark_map_used_bytes", "gauge", "LMDB map in use."},
    {"/map/size_bytes", "tidemark_map_size_bytes", "gauge", "LMDB map size."},
    {"/map/side_rows_dropped", "tidemark_map_side_rows_dropped_total", "counter",
     "Side output rows dropped to make room in a full map."},
};

const Metric pipeline_metrics[] = {
    {"/watermark_lag_ms", "tidemark_watermark_lag_seconds", "gauge",
     "Newest ingest time minus the pipeline's watermark.", ms},
    {"/events_in", "tidemark_events_total", "counter", "Events decoded and fed to the engine."},
    {"/late_updated", "tidemark_late_updated_total", "counter",
     "Late events that re-fired a window."},
    {"/too_late", "tidemark_too_late_total", "counter", "Events past the allowed lateness."},
    {"/too_late_partial", "tidemark_too_late_partial_total", "counter",
     "Hopping events too late for some of their windows."},
    {"/too_late_windows_dropped", "tidemark_too_late_windows_dropped_total", "counter",
     "Too-late events not counted against their window: the per-window table was full."},
    {"/too_late_windows_tracked", "tidemark_too_late_windows_tracked", "gauge",
     "Windows in the per-window too-late table."},
    {"/late_reports", "tidemark_late_reports_total", "counter",
     "Too-late tallies sent upstream (late.report)."},
    {"/too_late_unreported", "tidemark_too_late_unreported_total", "counter",
     "Too-late events no tally could hold for the consumer."},
    {"/side_outputs", "tidemark_side_outputs_total", "counter",
     "Events kept as side output (too late or refused)."},
    {"/clamped", "tidemark_clamped_total", "counter", "Events stamped beyond max_future."},
    {"/malformed", "tidemark_malformed_total", "counter", "Payloads that could not be decoded."},
    {"/fields_missing", "tidemark_fields_missing_total", "counter",
     "Events with a configured field absent."},
    {"/keys_refused", "tidemark_keys_refused_total", "counter",
     "Events refused by max_keys or a key over its length bound."},
    {"/windows_refused", "tidemark_windows_refused_total", "counter",
     "Events refused by max_open_windows."},
    {"/partitions_forgotten", "tidemark_partitions_forgotten_total", "counter",
     "Idle partitions without keys dropped from state."},
    {"/forgotten_evicted", "tidemark_forgotten_evicted_total", "counter",
     "Forgotten partitions whose restart point was given up past its bound."},
    {"/partitions_active", "tidemark_partitions_active", "gauge", "Partitions not idle."},
    {"/partitions_idle", "tidemark_partitions_idle", "gauge", "Idle partitions."},
    {"/partitions_remembered", "tidemark_partitions_remembered", "gauge",
     "Forgotten partitions whose restart point is kept."},
    {"/keys", "tidemark_keys", "gauge", "Keys in state."},
    {"/open_windows", "tidemark_open_windows", "gauge", "Windows open in state."},
    {"/state_bytes", "tidemark_state_bytes", "gauge", "Bytes of the pipeline's state."},
};

// Prometheus label values escape backslash, double quote and newline.
std::string label_value(std::string_view v) {
    std::string out;
    out.reserve(v.size());
    for (char c : v) {
        if (c == '\\' || c == '"') out += '\\';
        if (c == '\n') {
            out += "\\n";
            continue;
        }
        out += c;
    }
    return out;
}

// A number as Prometheus reads it; booleans are 0 or 1; anything else has no value.
bool sample_value(const json& v, double scale, std::string& out) {
    double x = 0;
    if (v.is_boolean())
        x = v.get<bool>() ? 1 : 0;
    else if (v.is_number_unsigned() && scale == 1)
        return out = std::to_string(v.get<uint64_t>()), true;
    else if (v.is_number_integer() && scale == 1)
        return out = std::to_string(v.get<int64_t>()), true;
    else if (v.is_number())
        x = v.get<double>() * scale;
    else
        return false;
    if (!std::isfinite(x)) return false;
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.15g", x);  // 15 digits: no 29.696000000000002
    out = buf;
    return true;
}

const json* at(const json& j, const char* pointer) {
    const json::json_pointer p(pointer);
    return j.contains(p) ? &j.at(p) : nullptr;
}

void header(std::string& out, const char* name, const char* type, const char* help) {
    out += "# HELP ";
    out += name;
    out += ' ';
    out += help;
    out += "\n# TYPE ";
    out += name;
    out += ' ';
    out += type;
    out += '\n';
}

}  // namespace

Result<std::string> prometheus_text(std::string_view health_json) {
    const json h = json::parse(health_json, nullptr, /*allow_exceptions=*/false);
    if (!h.is_object()) return fail("not a health record: not a JSON object");
    const std::string node =
        "node=\"" +
        label_value(h.contains("node") && h["node"].is_string() ? h["node"].get<std::string>()
                                                                : std::string()) +
        "\"";
    std::string out;
    std::string value;
    for (const Metric& m : node_metrics) {
        // The checkpoint's age is -1 before the first one: no value.
        const json* v = at(h, m.pointer);
        if (!v || !sample_value(*v, m.scale, value)) continue;
        if (value.starts_with('-') && std::strstr(m.name, "_age_")) continue;
        header(out, m.name, m.type, m.help);
        out += m.name;
        out += '{' + node + "} " + value + '\n';
    }
    header(out, "tidemark_alarm", "gauge",
           "1 for each alarm raised now (the text before any ':' of its health entry; "
           "too_late with its pipeline).");
    std::set<std::string> alarm_samples;  // a series once, however many entries name it
    if (const json* alarms = at(h, "/alarms"); alarms && alarms->is_array())
        for (const json& a : *alarms) {
            if (!a.is_string()) continue;
            const std::string text = a.get<std::string>();
            const size_t colon = text.find(':');
            const std::string name = text.substr(0, colon);
            std::string labels = node + ",alarm=\"" + label_value(name) + "\"";
            if (name == "too_late" && colon != std::string::npos && colon + 2 <= text.size())
                labels += ",pipeline=\"" + label_value(text.substr(colon + 2)) + "\"";
            if (alarm_samples.insert(labels).second) out += "tidemark_alarm{" + labels + "} 1\n";
        }

    std::vector<std::pair<std::string, const json*>> pipelines;
    if (const json* ps = at(h, "/pipelines"); ps && ps->is_object())
        for (auto it = ps->begin(); it != ps->end(); ++it)
            if (it.value().is_object())
                pipelines.emplace_back(node + ",pipeline=\"" + label_value(it.key()) + "\"",
                                       &it.value());
    for (const Metric& m : pipeline_metrics) {
        bool any = false;
        for (const auto& [labels, p] : pipelines) {
            const json* v = at(*p, m.pointer);
            if (!v || !sample_value(*v, m.scale, value)) continue;
            if (!any) header(out, m.name, m.type, m.help);
            any = true;
            out += m.name;
            out += '{' + labels + "} " + value + '\n';
        }
    }
    bool any = false;
    for (const auto& [labels, p] : pipelines)
        for (const char* kind : {"final", "update", "retract"}) {
            const json* v = at(*p, (std::string("/emitted/") + kind).c_str());
            if (!v || !sample_value(*v, 1, value)) continue;
            if (!any) header(out, "tidemark_emitted_total", "counter", "Results emitted, by kind.");
            any = true;
            out += "tidemark_emitted_total{" + labels + ",kind=\"" + kind + "\"} " + value + '\n';
        }
    // Quantiles as gauges of their own: a "quantile" label belongs to a summary, which would
    // need a sum and a count the sketch does not keep.
    for (const auto& [key, name, help] :
         {std::tuple{"p50", "tidemark_event_lag_p50_seconds", "median"},
          {"p99", "tidemark_event_lag_p99_seconds", "99th percentile"},
          {"p999", "tidemark_event_lag_p999_seconds", "99.9th percentile"}}) {
        const std::string help_text =
            std::string("Ingest time minus event time over all events, ") + help + ".";
        any = false;
        for (const auto& [labels, p] : pipelines) {
            const json* v = at(*p, (std::string("/lag_ms/") + key).c_str());
            if (!v || !sample_value(*v, ms, value)) continue;
            if (!any) header(out, name, "gauge", help_text.c_str());
            any = true;
            out += name;
            out += '{' + labels + "} " + value + '\n';
        }
    }
    // The windows with the most too-late events by rank (1 = most), not by window: a label per
    // window start would make a new series for every window that ever ranked; with the rank
    // the series are at most too_late_windows_shown per pipeline, and the window is a value.
    for (const auto& [key, name, help, scale] :
         {std::tuple{"start_ms", "tidemark_too_late_window_start_seconds",
                     "Start of the window at this rank of too-late events (1: the most).", ms},
          {"end_ms", "tidemark_too_late_window_end_seconds",
           "End of the window at this rank of too-late events (1: the most).", ms},
          {"too_late", "tidemark_too_late_window_events",
           "Too-late events of the window at this rank (1: the most).", 1.0}}) {
        any = false;
        for (const auto& [labels, p] : pipelines) {
            const json* windows = at(*p, "/too_late_windows");
            if (!windows || !windows->is_array()) continue;
            for (size_t i = 0; i < windows->size(); ++i) {
                const json& w = (*windows)[i];
                if (!w.is_object() || !w.contains(key) || !sample_value(w[key], scale, value))
                    continue;
                if (!any) header(out, name, "gauge", help);
                any = true;
                out += name;
                out += '{' + labels + ",rank=\"" + std::to_string(i + 1) + "\"} " + value + '\n';
            }
        }
    }
    return out;
}

Result<void> write_textfile(const std::string& path, std::string_view text) {
    const std::string tmp = path + ".tmp";
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return fail("health.prometheus_textfile: cannot write " + tmp + ": " +
                    std::strerror(errno));
    size_t done = 0;
    while (done < text.size()) {
        const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            const int e = n < 0 ? errno : ENOSPC;
            ::close(fd);
            ::unlink(tmp.c_str());
            return fail("health.prometheus_textfile: cannot write " + tmp + ": " +
                        std::strerror(e));
        }
        done += static_cast<size_t>(n);
    }
    if (::close(fd) != 0 || ::rename(tmp.c_str(), path.c_str()) != 0) {
        const int e = errno;
        ::unlink(tmp.c_str());
        return fail("health.prometheus_textfile: cannot replace " + path + ": " + std::strerror(e));
    }
    return {};
}

}  // namespace tidemark::firmware
