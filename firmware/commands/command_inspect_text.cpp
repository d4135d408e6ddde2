// tidemark inspect, the report as text: rendered from the JSON report command_inspect.cpp
// gathers, section by section, so that --json and the text say the same.
#include "firmware/commands/command_inspect_text.h"

#include <nlohmann/json.hpp>
#include <ostream>
#include <string>

#include "core/duration.h"
#include "core/time_text.h"

namespace tidemark::firmware {

namespace {

using json = nlohmann::ordered_json;
using core::utc_text;

std::string age_text(int64_t ms) {
    if (ms < 0) return "in the future (clock changed?)";
    return core::format_duration(ms / 1000 * 1000) + " ago";
}

void print_log(const json& l, std::ostream& out) {
    out << "\nlog (" << l["dir"].get<std::string>() << "):\n";
    if (!l["present"].get<bool>())
        out << "  no log directory\n";
    else if (l.contains("segments")) {
        out << "  " << l["segments"] << " segments, " << l["bytes"] << " bytes";
        if (l.contains("first_offset"))
            out << ", offsets " << l["first_offset"] << " .. " << l["end_offset"];
        out << "\n";
        if (l.contains("oldest_ingest_ms"))
            out << "  oldest ingest " << utc_text(l["oldest_ingest_ms"].get<int64_t>())
                << ", newest " << utc_text(l["newest_ingest_ms"].get<int64_t>()) << "\n";
        if (l.contains("records")) {
            const json& r = l["records"];
            out << "  records: " << r["total"] << " (" << r["message"] << " message, " << r["tick"]
                << " tick, " << r["malformed"] << " malformed)\n";
        } else if (l.contains("counted")) {
            out << "  records: (not counted: the log is over "
                << core::format_size(inspect_log_count_bytes_max) << ")\n";
        }
    }
    if (l.contains("error")) out << "  error: " << l["error"].get<std::string>() << "\n";
}

void print_store(const json& s, std::ostream& out) {
    out << "\nstate (" << s["dir"].get<std::string>() << "):\n";
    if (s.contains("error")) out << "  " << s["error"].get<std::string>() << "\n";
    if (s.contains("checkpoint")) {
        const json& c = s["checkpoint"];
        if (c.is_null())
            out << "  no checkpoint yet\n";
        else {
            out << "  checkpoint " << age_text(c["age_ms"].get<int64_t>()) << " ("
                << utc_text(c["checkpoint_ms"].get<int64_t>()) << "), log offset "
                << c["log_offset"];
            if (c.contains("behind_bytes")) out << ", " << c["behind_bytes"] << " bytes";
            if (c.contains("behind_records")) out << " / " << c["behind_records"] << " records";
            if (c.contains("behind_bytes")) out << " behind the log end";
            out << "\n";
        }
    }
    if (s.contains("state_entries"))
        out << "  " << s["state_entries"] << " state entries, " << s["state_bytes"] << " bytes\n";
    if (s.contains("map_used_bytes")) out << "  map: " << s["map_used_bytes"] << " bytes used\n";
}

// The windows with the most too-late events, one a line, as health lists them.
void print_too_late_windows(const json& p, std::ostream& out) {
    if (!p.contains("too_late_windows") || p["too_late_windows"].empty()) return;
    out << "  windows with the most too-late events:\n";
    for (const json& w : p["too_late_windows"])
        out << "    " << utc_text(w["start_ms"].get<int64_t>()) << " .. "
            << utc_text(w["end_ms"].get<int64_t>()) << ": " << w["too_late"] << "\n";
    if (p["too_late_windows_dropped"].get<uint64_t>() > 0)
        out << "    (" << p["too_late_windows_dropped"]
            << " too-late events not counted against their window: the table of "
            << p["too_late_windows_tracked"] << " windows was full)\n";
}

void print_pipeline(const json& p, std::ostream& out) {
    out << "\npipeline " << p["name"].get<std::string>() << ":\n"
        << "  open windows " << p["open_windows"] << ", keys " << p["keys"] << ", state "
        << p["state_bytes"] << " bytes\n"
        << "  watermark " << utc_text(p["watermark_ms"].get<int64_t>()) << " ("
        << (p["watermark_lag_ms"].is_null() ? std::string("none yet")
                                            : p["watermark_lag_ms"].dump() + " ms behind ingest")
        << "), partitions " << p["partitions_active"] << " active, " << p["partitions_idle"]
        << " idle\n"
        << "  events in " << p["events_in"] << ", late-updated " << p["late_updated"]
        << ", too late " << p["too_late"] << ", clamped " << p["clamped"] << ", malformed "
        << p["malformed"] << ", fields missing " << p["fields_missing"] << "\n"
        << "  emitted " << p["emitted"]["final"] << " final, " << p["emitted"]["update"]
        << " update, " << p["emitted"]["retract"] << " retract; refused " << p["keys_refused"]
        << " keys, " << p["windows_refused"] << " windows\n";
    print_too_late_windows(p, out);
    if (p["events_in"].get<uint64_t>() > 0)
        out << "  lag p50 " << p["lag_ms"]["p50"] << " ms, p99 " << p["lag_ms"]["p99"]
            << " ms, p99.9 " << p["lag_ms"]["p999"] << " ms\n";
}

void print_outbox(const json& o, std::ostream& out) {
    out << "\noutbox:\n";
    if (o.contains("rows"))
        out << "  " << o["rows"] << " rows, " << o["bytes"] << " bytes, oldest seq "
            << o["oldest_seq"] << "; dropped " << o["dropped"] << ", compacted " << o["compacted"]
            << ", duplicates skipped " << o["duplicates_skipped"] << "\n";
    if (o.contains("first_rows"))
        for (const json& r : o["first_rows"])
            out << "  #" << r["seq"] << " " << r["pipeline"].get<std::string>() << " key "
                << r["key"].get<std::string>() << " window "
                << utc_text(r["window"]["start"].get<int64_t>()) << " .. "
                << utc_text(r["window"]["end"].get<int64_t>()) << " "
                << r["kind"].get<std::string>() << " rev " << r["revision"] << "\n";
    if (o.contains("error")) out << "  error: " << o["error"].get<std::string>() << "\n";
}

void print_side(const json& sd, std::ostream& out) {
    out << "\nside output:\n";
    if (sd.contains("rows"))
        out << "  " << sd["rows"] << " rows, " << sd["bytes"] << " bytes, dropped " << sd["dropped"]
            << "\n";
    if (sd.contains("latest"))
        for (const json& r : sd["latest"]) {
            out << "  #" << r["seq"];
            if (r.contains("pipeline")) out << " " << r["pipeline"].get<std::string>();
            if (r.contains("key")) out << " key " << r["key"].get<std::string>();
            if (r.contains("reason")) out << ": " << r["reason"].get<std::string>();
            out << "\n";
        }
    if (sd.contains("latest_scan_stopped_rows"))
        out << "  (the walk stopped after " << sd["latest_scan_stopped_rows"]
            << " rows: newer rows are not shown)\n";
    if (sd.contains("error")) out << "  error: " << sd["error"].get<std::string>() << "\n";
}

void print_versions(const json& versions, std::ostream& out) {
    out << "\nversions:\n";
    for (const json& v : versions) {
        out << "  " << v["name"].get<std::string>() << ": " << v["version"].get<std::string>();
        if (!v["backfill"].get<bool>()) {
            out << " live\n";
            continue;
        }
        out << (v["live_version"].is_null()
                    ? " (new)"
                    : " (live now: " + v["live_version"].get<std::string>() + ")")
            << (v["resumes"].get<bool>() ? " resumes its backfill: " : " would backfill ")
            << v["records"] << " log records from offset " << v["from_offset"] << "\n";
    }
}

}  // namespace

void print_inspect_text(std::string_view report_json, std::ostream& out) {
    // Parsed again from the text --json prints (a few kilobytes, once per command).
    const json j = json::parse(report_json);
    out << "data_dir " << j["data_dir"].get<std::string>() << "\n";
    print_log(j["log"], out);
    const json& s = j["store"];
    print_store(s, out);
    if (j.contains("pipelines")) {
        const json& ps = j["pipelines"];
        if (ps.contains("error")) out << "  pipelines: " << ps["error"].get<std::string>() << "\n";
        if (ps.contains("versions")) print_versions(ps["versions"], out);
        if (ps.contains("list"))
            for (const json& p : ps["list"])
                print_pipeline(p, out);
    } else if (!s.contains("error")) {
        out << "\n(pipelines: pass --config to restore the state and show open windows, keys and "
               "watermarks)\n";
    }
    if (j.contains("outbox")) print_outbox(j["outbox"], out);
    if (j.contains("side")) print_side(j["side"], out);
}

}  // namespace tidemark::firmware
