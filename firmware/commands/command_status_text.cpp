// status_text(): the report as tables for a person (status_view.h).
#include <algorithm>
#include <cstdio>

#include "core/time_text.h"
#include "firmware/commands/command_status_view.h"
#include "firmware/human_units.h"

namespace tidemark::firmware {
namespace {

// A table with a header line and columns as wide as their widest cell; numbers right-aligned.
struct Table {
    std::vector<std::string> headers;
    std::vector<bool> right;  // per column
    std::vector<std::vector<std::string>> rows;

    std::string render(const std::string& indent) const {
        std::vector<size_t> width(headers.size());
        for (size_t c = 0; c < headers.size(); ++c)
            width[c] = headers[c].size();
        for (const auto& row : rows)
            for (size_t c = 0; c < row.size() && c < width.size(); ++c)
                width[c] = std::max(width[c], row[c].size());
        std::string out;
        auto line = [&](const std::vector<std::string>& cells) {
            std::string l = indent;
            for (size_t c = 0; c < cells.size() && c < width.size(); ++c) {
                const size_t pad = width[c] - cells[c].size();
                const bool last = c + 1 == cells.size();
                if (right[c]) l.append(pad, ' ');
                l += cells[c];
                if (!right[c] && !last) l.append(pad, ' ');
                if (!last) l += "  ";
            }
            out += l + "\n";
        };
        line(headers);
        for (const auto& row : rows)
            line(row);
        return out;
    }
};

std::string count(uint64_t n) {
    return std::to_string(n);
}

std::string age(int64_t now_ms, int64_t time_ms) {
    if (time_ms <= 0) return "-";
    return human_duration(now_ms - time_ms);
}

// One line: an alarm's text may hold a library's message with tabs and newlines in it.
std::string one_line(const std::string& text) {
    std::string out;
    for (const char c : text) {
        const bool space = c == ' ' || (static_cast<unsigned char>(c) < 0x20);
        if (space && (out.empty() || out.back() == ' ')) continue;
        out += space ? ' ' : c;
    }
    while (!out.empty() && out.back() == ' ')
        out.pop_back();
    return out;
}

std::string alarms_text(const std::vector<std::string>& alarms) {
    if (alarms.empty()) return "none";
    std::string out;
    for (const std::string& a : alarms)
        out += (out.empty() ? "" : ", ") + one_line(a);
    return out;
}

std::string outbox_text(const GatewayStatus& g) {
    std::string out = count(g.outbox_rows) + (g.outbox_rows == 1 ? " row" : " rows");
    if (g.outbox_rows > 0 && g.outbox_oldest_age_ms)
        out += ", oldest " + human_duration(*g.outbox_oldest_age_ms);
    return out;
}

std::string rate_text(const std::optional<double>& rate) {
    if (!rate) return "-";
    char buf[32];
    std::snprintf(buf, sizeof buf, *rate < 10 ? "%.2f" : *rate < 1000 ? "%.1f" : "%.0f", *rate);
    return buf;
}

std::string too_late_text(const PipelineStatus& p) {
    if (p.too_late == 0) return "0";
    char buf[64];
    const double percent = 100.0 * static_cast<double>(p.too_late) /
                           static_cast<double>(std::max<uint64_t>(p.events_in, 1));
    std::snprintf(buf, sizeof buf, "%llu (%.2g%%)", static_cast<unsigned long long>(p.too_late),
                  percent);
    return buf;
}

std::string nodes_table(const StatusReport& r) {
    Table t{{"NODE", "STATUS", "RECORD AGE", "UPTIME", "INGEST", "UPSTREAM", "OUTBOX", "ALARMS"},
            {false, false, true, true, false, false, false, false},
            {}};
    for (const GatewayStatus& g : r.gateways) {
        if (!g.error.empty()) {
            t.rows.push_back(
                {g.node, g.status.value_or("-"), "-", "-", "-", "-", "-", one_line(g.error)});
            continue;
        }
        t.rows.push_back({g.node, g.status.value_or("-"), age(r.now_ms, g.time_ms),
                          human_duration(g.uptime_s * 1000),
                          g.ingest_connected ? "connected" : "disconnected",
                          !g.upstream_configured ? "none"
                          : g.link_up            ? "up"
                                                 : "down",
                          outbox_text(g), alarms_text(g.alarms)});
    }
    return t.render("");
}

std::string pipelines_table(const GatewayStatus& g) {
    std::string out = "\n" + g.node + ": ";
    if (g.pipelines.empty()) return out + "no pipelines\n";
    out += count(g.pipelines.size()) + (g.pipelines.size() == 1 ? " pipeline\n" : " pipelines\n");
    Table t{{"PIPELINE", "VERSION", "WATERMARK LAG", "EVENTS/S", "EVENTS", "LATE UPDATED",
             "TOO LATE", "KEYS", "OPEN WINDOWS", "STATE"},
            {false, false, true, true, true, true, true, true, true, true},
            {}};
    for (const PipelineStatus& p : g.pipelines) {
        t.rows.push_back(
            {p.name,
             (p.version.empty() ? "-" : p.version) + (p.backfilling ? " (backfilling)" : ""),
             p.watermark_lag_ms ? human_duration(*p.watermark_lag_ms) : "-",
             rate_text(p.events_per_s), count(p.events_in), count(p.late_updated), too_late_text(p),
             count(p.keys), count(p.open_windows), human_bytes(p.state_bytes)});
    }
    out += t.render("  ");
    switch (g.rate_source) {
        case RateSource::none:
            out += "  events/s: from two records; this is one (tidemark status --watch)\n";
            break;
        case RateSource::records:
            out += "  events/s: between two records " + human_duration(g.rate_span_ms) +
                   " apart; too late: share of all events since the state began\n";
            break;
        case RateSource::record:
            out += "  events/s: as the record says\n";
            break;
    }
    return out;
}

std::string sinks_table(const StatusReport& r) {
    Table t{{"SINK", "STATUS", "RECORD AGE", "UPTIME", "BROKER", "POSTGRES", "ROWS WRITTEN",
             "REJECTED", "SPOOL BACKLOG", "ALARMS"},
            {false, false, true, true, false, false, true, true, true, false},
            {}};
    for (const SinkStatus& s : r.sinks) {
        t.rows.push_back({s.client_id, s.status.value_or("-"), age(r.now_ms, s.time_ms),
                          human_duration(s.uptime_s * 1000), s.broker_link_up ? "up" : "down",
                          s.postgres_up ? "up" : "down", count(s.rows_written), count(s.rejected),
                          human_bytes(s.spool_backlog_bytes), alarms_text(s.alarms)});
    }
    return t.render("");
}

}  // namespace

std::string status_text(const StatusReport& r) {
    std::string out = "tidemark status: " + r.broker + " at " + core::utc_text(r.now_ms) + ", " +
                      count(r.gateways.size()) +
                      (r.gateways.size() == 1 ? " gateway" : " gateways");
    if (!r.sinks.empty())
        out += ", " + count(r.sinks.size()) + (r.sinks.size() == 1 ? " sink" : " sinks");
    out += "\n\n";
    if (!r.gateways.empty()) {
        out += nodes_table(r);
        for (const GatewayStatus& g : r.gateways)
            if (g.error.empty()) out += pipelines_table(g);
    }
    if (!r.sinks.empty()) out += (r.gateways.empty() ? "" : "\n") + sinks_table(r);
    for (const std::string& note : r.notes)
        out += "\nnote: " + note + "\n";
    return out;
}

}  // namespace tidemark::firmware
