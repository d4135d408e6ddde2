// The checks of the run as a whole: version records, counters, partition independence.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "tests/sim/sim_checks.h"

namespace tidemark::sim {
namespace {

const Run* live_run(const Recording& rec, const std::string& pipeline) {
    for (const Run& r : rec.versions.runs())
        if (r.pipeline == pipeline && r.live) return &r;
    return nullptr;
}

std::string shown(const std::string& key) {
    return key.size() > 24 ? key.substr(0, 12) + "...(" + std::to_string(key.size()) + " bytes)"
                           : key;
}

}  // namespace

void check_version_records(const Recording& rec, const std::vector<Expected>& expected,
                           Failures& out) {
    struct Row {
        std::string version, previous;
        int64_t switch_ms = 0, since_ms = 0;
    };
    std::map<std::string, Row> table;
    std::set<std::string> cleared;
    for (const Received& r : rec.upstream) {
        if (!r.version_record) continue;
        if (r.payload.empty()) {
            table.erase(r.pipeline);
            cleared.insert(r.pipeline);
            continue;
        }
        const auto j = nlohmann::json::parse(r.payload, nullptr, false);
        if (j.is_discarded() || !j.is_object()) {
            out.add("version records", "a version record that does not parse: " + r.payload);
            continue;
        }
        Row row{j.value("version", ""),
                j["previous"].is_string() ? j["previous"].get<std::string>() : "",
                j.value("switch_ms", int64_t{0}), j.value("since_ms", int64_t{0})};
        auto it = table.find(r.pipeline);
        if (it == table.end() || row.switch_ms > it->second.switch_ms) table[r.pipeline] = row;
    }
    const auto& removed = rec.versions.removed();
    for (const std::string& p : cleared)
        if (std::find(removed.begin(), removed.end(), p) == removed.end())
            out.add("version records",
                    "the version record of '" + p +
                        "' was cleared, but the pipeline was never removed "
                        "(a reload that fails leaves version records as they were)");
    std::set<std::string> live;
    for (const Expected& x : expected) {
        const Run& r = *x.run;
        if (!r.live) continue;
        live.insert(r.pipeline);
        auto it = table.find(r.pipeline);
        if (it == table.end()) {
            out.add("version records", "no version record names pipeline '" + r.pipeline +
                                           "' and its live version " + r.version);
            continue;
        }
        const Row& row = it->second;
        if (!row.version.starts_with(r.version)) {
            out.add("version records", "the version record of '" + r.pipeline + "' names " +
                                           row.version + ", but " + r.version + " is live (run " +
                                           std::to_string(r.index) + ": " + r.how + ")");
            continue;
        }
        if (!r.switched_in) continue;
        if (row.switch_ms != x.switch_ms || !row.previous.starts_with(r.previous) ||
            row.previous.empty() != r.previous.empty() || row.since_ms != x.since_ms)
            out.add("version records",
                    "the version record of '" + r.pipeline + "' version " + row.version +
                        " says switch_ms " + std::to_string(row.switch_ms) + ", previous '" +
                        row.previous + "', since_ms " + std::to_string(row.since_ms) +
                        "; its run gives " + std::to_string(x.switch_ms) + ", '" + r.previous +
                        "', " + std::to_string(x.since_ms));
    }
    for (const auto& [p, row] : table)
        if (!live.count(p))
            out.add("version records", "pipeline '" + p +
                                           "' no longer runs, yet its version record (" +
                                           row.version + ") was not cleared");
}

void check_counters(const Recording& rec, const std::vector<Expected>& expected, Failures& out) {
    for (const Figures& f : rec.figures) {
        const Run* r = live_run(rec, f.pipeline);
        if (!r) continue;
        const Expected& x = expected[static_cast<size_t>(r->index)];
        if (!f.version.starts_with(r->version)) {
            out.add("counters", "pipeline '" + f.pipeline + "' runs version " + f.version +
                                    " at the end; DESIGN's rules say " + r->version);
            continue;
        }
        if (!x.ambiguous.empty()) continue;
        std::string diff;
        const auto check = [&](const char* name, uint64_t host, uint64_t model) {
            if (host != model)
                diff += std::string(" ") + name + " " + std::to_string(host) + " (model " +
                        std::to_string(model) + ")";
        };
        const core::PipelineStats& h = f.stats;
        const model::ModelStats& m = x.stats;
        check("events_in", h.events_in, m.events_in);
        check("too_late", h.too_late, m.too_late);
        check("late_updated", h.late_updated, m.late_updated);
        check("too_late_partial", h.too_late_partial, m.too_late_partial);
        check("clamped", h.clamped, m.clamped);
        check("keys_refused", h.keys_refused, m.keys_refused);
        check("side_outputs", h.side_outputs, m.side_outputs);
        check("emitted_final", h.emitted_final, m.emitted_final);
        check("emitted_update", h.emitted_update, m.emitted_update);
        check("emitted_retract", h.emitted_retract, m.emitted_retract);
        check("malformed", f.decode.malformed, x.malformed);
        if (!diff.empty())
            out.add("counters", "pipeline '" + f.pipeline + "' version " + f.version + " counted" +
                                    diff + " over its run (" + r->how + ")");
    }
}

void check_partition_independence(const Scenario& s, const Recording& rec,
                                  const std::vector<Expected>& expected, Failures& out) {
    for (const Expected& x : expected) {
        const Run& run = *x.run;
        const PipelineDef& def = run.candidate.def;
        if (!def.scope_partition || x.results.empty()) continue;
        std::vector<int> silent = {most_skewed_device(s, rec, run)};
        std::vector<int> others;
        for (const auto& [key, d] : x.device_of)
            if (d != silent[0]) others.push_back(d);
        Rng rng(s.seed * 31 + static_cast<uint64_t>(run.index));
        if (!others.empty()) silent.push_back(rng.pick(others));
        for (int d : silent) {
            if (d < 0) continue;
            const Device& dev = s.devices[static_cast<size_t>(d)];
            const std::string partition = def.partition_by_site ? dev.site : dev.name;
            const Expected y = expect(s, rec, run, d);
            const auto other = [&](const Result& r) {
                auto it = x.partition_of.find(r.key);
                return !x.ambiguous.count(r.key) && it != x.partition_of.end() &&
                       it->second != partition;
            };
            std::vector<const Result*> with, without;
            for (const Result& r : x.results)
                if (other(r)) with.push_back(&r);
            for (const Result& r : y.results)
                if (other(r)) without.push_back(&r);
            size_t i = 0;
            while (i < with.size() && i < without.size() && *with[i] == *without[i])
                ++i;
            if (i == with.size() && i == without.size()) continue;
            // Which devices it touched: their results with and without it.
            std::map<std::string, std::pair<int, int>> per_key;
            for (const Result* r : with)
                ++per_key[r->key].first;
            for (const Result* r : without)
                ++per_key[r->key].second;
            std::string touched;
            for (const auto& [key, n] : per_key)
                if (n.first != n.second)
                    touched += " " + shown(key) + " " + std::to_string(n.first) + " results (" +
                               std::to_string(n.second) + " without it);";
            out.add(
                "partition independence",
                "pipeline '" + run.pipeline + "' version " + run.version +
                    " (scope partition): device " + shown(dev.name) + " (skew " +
                    std::to_string(dev.skew_ms) + " ms) changes other devices' results:" + touched +
                    " first difference: with it " + (i < with.size() ? text(*with[i]) : "nothing") +
                    ", without it " + (i < without.size() ? text(*without[i]) : "nothing") +
                    " (run " + std::to_string(run.index) + ": " + run.how + ")");
        }
    }
}

}  // namespace tidemark::sim
