// tidemark advise, the report as text: quantiles, the worst partitions, the lag histogram and
// the delay candidates with the recommendation.
#include <algorithm>
#include <cstdio>
#include <sstream>

#include "core/duration.h"
#include "firmware/commands/command_advise.h"
#include "firmware/human_units.h"

namespace tidemark::firmware {

namespace {

// A bucket edge in its own unit: every edge is a whole number of one ("500ms", "20s", "5m",
// "1d"); the lowest, below every negative lag, may be any number of milliseconds.
std::string edge_label(int64_t ms) {
    struct Unit {
        int64_t ms;
        const char* name;
    };
    static constexpr Unit units[] = {
        {24 * hour_ms, "d"}, {hour_ms, "h"}, {minute_ms, "m"}, {second_ms, "s"}};
    if (ms == 0) return "0";
    for (const Unit& u : units)
        if (ms % u.ms == 0) return std::to_string(ms / u.ms) + u.name;
    return std::to_string(ms) + "ms";
}

void format_quantiles(const AdviseReport& r, std::ostream& out) {
    char line[256];
    out << "\nlag = ingest_ms - event_ms (quantiles within " << r.relative_error * 100
        << " % relative error):\n";
    for (const LagQuantile& q : r.quantiles) {
        std::snprintf(line, sizeof line, "  %-8s %12.0f ms  (%s)\n", quantile_name(q.q).c_str(),
                      q.lag_ms, human_ms(q.lag_ms).c_str());
        out << line;
    }
    std::snprintf(line, sizeof line, "  %-8s %12lld ms\n  %-8s %12lld ms\n", "min",
                  static_cast<long long>(r.lag_min_ms), "max",
                  static_cast<long long>(r.lag_max_ms));
    out << line;
}

void format_partitions(const AdviseReport& r, std::ostream& out) {
    if (r.partitions_worst.empty()) return;
    char line[256];
    out << "\npartitions with the largest p99 lag:\n";
    std::snprintf(line, sizeof line, "  %-24s %10s %12s %12s %14s\n", "partition", "events",
                  "p50 lag", "p99 lag", "max disorder");
    out << line;
    for (const PartitionLag& p : r.partitions_worst) {
        std::snprintf(line, sizeof line, "  %-24.24s %10llu %12s %12s %14s\n", p.partition.c_str(),
                      static_cast<unsigned long long>(p.events), human_ms(p.p50_ms).c_str(),
                      human_ms(p.p99_ms).c_str(),
                      human_ms(static_cast<double>(p.disorder_max_ms)).c_str());
        out << line;
    }
}

void format_histogram(const AdviseReport& r, int bar_columns, std::ostream& out) {
    char line[256];
    out << "\nlag distribution (log-scale buckets):\n";
    size_t lo = r.histogram.size(), hi = 0;
    uint64_t peak = 0;
    for (size_t i = 0; i < r.histogram.size(); ++i) {
        if (r.histogram[i].count == 0) continue;
        lo = std::min(lo, i);
        hi = i;
        peak = std::max(peak, r.histogram[i].count);
    }
    for (size_t i = lo; i <= hi && i < r.histogram.size(); ++i) {
        const LagBucket& b = r.histogram[i];
        // A run of empty buckets between the first and the last that hold anything is one line.
        size_t last = i;
        while (b.count == 0 && last + 1 <= hi && r.histogram[last + 1].count == 0)
            ++last;
        const int64_t upper_ms = r.histogram[last].upper_ms;
        std::string label;
        if (i == 0)
            label = "< 0";
        else if (upper_ms == INT64_MAX)
            label = ">= " + edge_label(b.lower_ms);
        else
            label = edge_label(b.lower_ms) + " .. " + edge_label(upper_ms);
        // A bucket that holds anything gets at least one '#', so that rare lags stay visible.
        const int width =
            b.count == 0 ? 0
                         : std::max(1, static_cast<int>(static_cast<double>(b.count) * bar_columns /
                                                        static_cast<double>(peak)));
        std::snprintf(line, sizeof line, "  %-16s |%-*s %llu (%.3g %%)\n", label.c_str(),
                      bar_columns, std::string(static_cast<size_t>(width), '#').c_str(),
                      static_cast<unsigned long long>(b.count), percent(b.count, r.events));
        out << line;
        i = last;
    }
}

void format_candidates(const AdviseReport& r, std::ostream& out) {
    char line[256];
    out << "\ncandidate delays (an event is late when its partition has already seen an event "
           "more\n"
           "than the delay newer: the watermark is the newest event time minus the delay):\n";
    std::snprintf(line, sizeof line, "  %-10s %-11s %12s %12s %15s %18s\n", "delay", "", "on time",
                  "late", "added latency", "windows per key");
    out << line;
    for (size_t i = 0; i < r.candidates.size(); ++i) {
        const DelayCandidate& c = r.candidates[i];
        std::snprintf(line, sizeof line, "  %-10s %-11s %11.4f%% %12llu %15s %18llu%s\n",
                      core::format_duration(c.delay_ms).c_str(), c.origin.c_str(),
                      c.on_time_percent, static_cast<unsigned long long>(c.late_events),
                      human_ms(static_cast<double>(c.added_latency_ms)).c_str(),
                      static_cast<unsigned long long>(c.windows_per_key),
                      r.recommended && *r.recommended == i ? "  <- recommended" : "");
        out << line;
    }
    if (r.recommended) {
        const DelayCandidate& c = r.candidates[*r.recommended];
        std::snprintf(line, sizeof line,
                      "\nrecommended: \"watermark\": {\"delay\": \"%s\"}  (%.4f %% on time >= "
                      "target %g %%)\n",
                      core::format_duration(c.delay_ms).c_str(), c.on_time_percent,
                      r.target_percent);
        out << line;
    } else {
        std::snprintf(
            line, sizeof line,
            "\nno candidate delay meets the target of %g %% on time; the largest disorder "
            "decides. Consider late.allowed_lateness, or too_late: side_output.\n",
            r.target_percent);
        out << line;
    }
}

}  // namespace

std::string format_advise_report(const AdviseReport& r, int bar_columns) {
    std::ostringstream out;
    out << "pipeline " << r.pipeline << ": " << r.events << " events from " << r.records
        << " log records (" << r.malformed << " malformed), " << r.partitions << " partitions\n";
    if (r.events_untracked)
        out << "  " << r.events_untracked
            << " events in partitions past the advisor's bound are left out of the on-time "
               "shares\n";
    if (r.events == 0) return out.str();
    format_quantiles(r, out);
    format_partitions(r, out);
    format_histogram(r, bar_columns, out);
    format_candidates(r, out);
    return out.str();
}

}  // namespace tidemark::firmware
