// The result checks: what a downstream built from the upstream's records, per (pipeline,
// version, key, window), against the reference model's results for each run of that version;
// ids; the allowed-lateness horizon. sim_checks_runs.cpp has the checks of the run as a whole.
#include "tests/sim/sim_checker.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <tuple>

#include "tests/sim/sim_checks.h"

namespace tidemark::sim {

void Failures::add(const std::string& kind, const std::string& text) {
    if (++count_[kind] <= shown_per_kind) shown_.push_back("[" + kind + "] " + text);
}

std::vector<std::string> Failures::list() const {
    std::vector<std::string> out = shown_;
    for (const auto& [kind, n] : count_)
        if (n > shown_per_kind)
            out.push_back("[" + kind + "] ... and " + std::to_string(n - shown_per_kind) + " more");
    return out;
}

namespace {

using Window = std::tuple<std::string, int64_t, int64_t>;  // key, start, end
using Identity = std::tuple<std::string, int64_t, int64_t, std::string, uint32_t>;

Window window_of(const Result& r) {
    return {r.key, r.start_ms, r.end_ms};
}
Identity identity_of(const Result& r) {
    return {r.key, r.start_ms, r.end_ms, r.kind, r.revision};
}

bool same_values(const Result& a, const Result& b) {
    if (a.values.size() != b.values.size()) return false;
    for (size_t i = 0; i < a.values.size(); ++i) {
        const auto &x = a.values[i], &y = b.values[i];
        if (x.has_value() != y.has_value()) return false;
        if (x && std::fabs(*x - *y) > 1e-9 * std::max({1.0, std::fabs(*x), std::fabs(*y)}))
            return false;
    }
    return true;
}
bool same(const Result& a, const Result& b) {
    return identity_of(a) == identity_of(b) && a.closed_by == b.closed_by &&
           a.watermark_ms == b.watermark_ms && same_values(a, b);
}

// DESIGN.md section 4: per window the record with the highest revision, a retract winning a
// tie; a window whose kept record is a retract has no value (it stays, as a tombstone).
std::map<Window, Result> view_of(const std::vector<Result>& results) {
    std::map<Window, Result> view;
    for (const Result& r : results) {
        auto [it, added] = view.try_emplace(window_of(r), r);
        const Result& kept = it->second;
        if (!added &&
            (r.revision > kept.revision ||
             (r.revision == kept.revision && r.kind == "retract" && kept.kind != "retract")))
            it->second = r;
    }
    return view;
}

struct Row {
    Received received;
    size_t index = 0;  // its place in what the upstream received
    std::string version;
    Result result;
};

// The runs a group of results (one version label, or several pooled) is compared with.
struct Unit {
    std::string pipeline;
    std::string label;  // the version label(s) of the records
    std::vector<const Row*> rows;
    std::vector<const Expected*> runs;
};

void check_unit(const Unit& u, const Recording& rec, Failures& out) {
    std::set<std::string> ambiguous;
    std::vector<Result> expected;
    for (const Expected* x : u.runs) {
        ambiguous.insert(x->ambiguous.begin(), x->ambiguous.end());
        expected.insert(expected.end(), x->results.begin(), x->results.end());
    }
    const PipelineDef& def = u.runs.front()->run->candidate.def;
    std::string runs;
    for (const Expected* x : u.runs)
        runs += " run " + std::to_string(x->run->index) + " (" + x->run->how + ")";
    const std::string where = "pipeline '" + u.pipeline + "' version " + u.label + ":" + runs;
    const auto compared = [&](const std::string& key) { return !ambiguous.count(key); };
    std::vector<Result> got;
    std::set<uint64_t> ids;
    for (const Row* r : u.rows)
        if (ids.insert(r->received.id).second && compared(r->result.key)) got.push_back(r->result);
    std::erase_if(expected, [&](const Result& r) { return !compared(r.key); });

    // Every record is one the model computed for the run (the same identity and content).
    std::multimap<Identity, const Result*> by_identity;
    for (const Result& r : expected)
        by_identity.emplace(identity_of(r), &r);
    for (const Result& g : got) {
        auto [lo, hi] = by_identity.equal_range(identity_of(g));
        if (lo == hi)
            out.add("results", where + ": a record the model never computed: " + text(g));
        else if (std::none_of(lo, hi, [&](const auto& kv) { return same(*kv.second, g); }))
            out.add("results", where + ": a record differs from the model's: appliance " + text(g) +
                                   ", model " + text(*lo->second));
    }
    // Without compaction, every result arrives; with it, what a consumer keeps still must.
    std::set<Identity> got_identities;
    for (const Result& g : got)
        got_identities.insert(identity_of(g));
    if (!rec.compaction_ever)
        for (const Result& e : expected)
            if (!got_identities.count(identity_of(e)))
                out.add("lost", where + ": never reached the upstream: " + text(e));
    const auto want = view_of(expected), have = view_of(got);
    std::set<Window> windows;
    for (const auto& [w, r] : want)
        windows.insert(w);
    for (const auto& [w, r] : have)
        windows.insert(w);
    for (const Window& w : windows) {
        auto a = have.find(w), e = want.find(w);
        const bool has_a = a != have.end() && a->second.kind != "retract";
        const bool has_e = e != want.end() && e->second.kind != "retract";
        if (has_e && !has_a)
            out.add("view",
                    where + ": the consumer has no value for a window the model has: " +
                        text(e->second) +
                        (a != have.end() ? " (consumer keeps " + text(a->second) + ")" : ""));
        else if (has_a && !has_e)
            out.add("view", where +
                                ": the consumer has a value the model has not: " + text(a->second) +
                                (e != want.end() ? " (model keeps " + text(e->second) + ")" : ""));
        else if (has_a && !same(a->second, e->second))
            out.add("view", where + ": the consumer keeps " + text(a->second) + ", the model " +
                                text(e->second));
    }
    // Two records of one window and revision with other values: a consumer cannot tell which.
    std::map<Identity, const Result*> first;
    for (const Result& g : got)
        if (auto [it, added] = first.try_emplace(identity_of(g), &g);
            !added && !same(*it->second, g))
            out.add("view", where + ": two records of one window and revision: " +
                                text(*it->second) + " and " + text(g));
    // DESIGN.md section 4: with retract corrections a downstream sum of finals and updates less
    // retracts never drifts (the count, values[0], stands for every additive value).
    if (def.retract)
        for (const Window& w : windows) {
            double sum = 0;
            for (const Result& g : got)
                if (window_of(g) == w && !g.values.empty() && g.values[0])
                    sum += (g.kind == "retract" ? -1 : 1) * *g.values[0];
            auto a = have.find(w);
            const double kept =
                a != have.end() && a->second.kind != "retract" && a->second.values[0]
                    ? *a->second.values[0]
                    : 0;
            if (std::fabs(sum - kept) > 1e-9)
                out.add("retract sum", where + ": finals + updates - retracts of the count give " +
                                           std::to_string(sum) + ", the window's value is " +
                                           std::to_string(kept) + " (window of " + std::get<0>(w) +
                                           " at " + std::to_string(std::get<1>(w)) + ")");
        }
    // DESIGN.md section 4: a switch's version record comes after every result the switching
    // version emitted before it, and before its first result after it (rows in outbox order:
    // what the upstream received first).
    const Expected& x = *u.runs.front();
    if (u.runs.size() == 1 && x.run->switched_in && !rec.compaction_ever && x.ambiguous.empty()) {
        size_t at = rec.upstream.size();
        for (size_t i = 0; i < rec.upstream.size() && at == rec.upstream.size(); ++i) {
            const Received& r = rec.upstream[i];
            if (!r.version_record || r.pipeline != u.pipeline || r.payload.empty()) continue;
            const auto j = nlohmann::json::parse(r.payload, nullptr, false);
            if (j.is_object() && j.value("version", "") == u.label &&
                j.value("switch_ms", int64_t{0}) == x.switch_ms)
                at = i;
        }
        std::set<uint64_t> before;
        for (const Row* r : u.rows)
            if (r->index < at) before.insert(r->received.id);
        if (at < rec.upstream.size() && before.size() != x.results_before_live)
            out.add("version records",
                    where + ": " + std::to_string(before.size()) +
                        " of its results arrived before its version record, but it emitted " +
                        std::to_string(x.results_before_live) + " before the switch");
    }
    // DESIGN.md section 4: a late event inside the horizon (watermark < end + lateness)
    // corrects the window; past it, it is too late. A merged session is exempt: its fired
    // part was inside the horizon (retracted, closed_by merge), and the merge may end it
    // earlier. (Sessions that never fired merge only ahead of the horizon while max_duration
    // is at least twice the gap, as the generator keeps it.)
    for (const Result& g : got) {
        if (g.closed_by != "late" || g.end_ms + def.lateness_ms > g.watermark_ms) continue;
        const bool merged = std::any_of(got.begin(), got.end(), [&](const Result& m) {
            return m.closed_by == "merge" && m.key == g.key && m.start_ms < g.end_ms &&
                   g.start_ms < m.end_ms;
        });
        if (def.window == PipelineDef::Window::session && merged) continue;
        out.add("too late", where +
                                ": emitted as a late correction though its window is past the "
                                "allowed lateness (end + " +
                                std::to_string(def.lateness_ms) + " <= watermark): " + text(g) +
                                "; it should be counted too late");
    }
}

Row parse_row(const Received& r, const std::vector<Expected>& expected) {
    Row row;
    row.received = r;
    const auto j = nlohmann::json::parse(r.payload, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return row;
    row.version = j.value("version", "");
    Result& x = row.result;
    x.key = j.value("key", "");
    x.start_ms = j["window"].value("start", int64_t{0});
    x.end_ms = j["window"].value("end", int64_t{0});
    x.kind = j.value("kind", "");
    x.revision = j.value("revision", 0u);
    x.closed_by = j.value("closed_by", "");
    x.watermark_ms = j.value("watermark", int64_t{0});
    // Values by aggregate name, in the order of a definition of this pipeline and version.
    for (const Expected& e : expected) {
        const auto& spec = e.run->candidate.config.spec;
        if (e.run->pipeline != r.pipeline || !row.version.starts_with(e.run->version)) continue;
        for (const auto& a : spec.aggregates) {
            const auto& v = j["values"][a.name];
            x.values.push_back(v.is_number() ? std::optional<double>(v.get<double>())
                                             : std::nullopt);
        }
        break;
    }
    return row;
}

}  // namespace

std::vector<std::string> check(const Scenario& s, const Recording& rec, std::string* summary) {
    Failures out;
    std::vector<Expected> expected;
    for (const Run& run : rec.versions.runs())
        expected.push_back(expect(s, rec, run));
    std::vector<Row> rows;
    for (size_t i = 0; i < rec.upstream.size(); ++i)
        if (!rec.upstream[i].version_record) {
            rows.push_back(parse_row(rec.upstream[i], expected));
            rows.back().index = i;
        }

    // Ids: one id, one record (version records too); each id said once.
    std::map<uint64_t, const Received*> by_id;
    std::set<uint64_t> reused;
    for (const Received& r : rec.upstream)
        if (auto [it, added] = by_id.try_emplace(r.id, &r);
            !added && it->second->payload != r.payload && reused.insert(r.id).second)
            out.add("ids", "id " + std::to_string(r.id) + " names two different records: " +
                               it->second->payload + " and " + r.payload);
    // DESIGN.md section 5, inside the appliance zero duplicated: a record may reach the
    // upstream twice (a resend), but it is one outbox row. A version run again must not use
    // the ids of its earlier run at all (section 4), even for the same content.
    std::set<uint64_t> doubled;
    for (const Received& r : rec.upstream) {
        if (by_id[r.id]->seq == r.seq || reused.count(r.id) || !doubled.insert(r.id).second)
            continue;
        const auto j = nlohmann::json::parse(r.payload, nullptr, false);
        const std::string version = j.is_object() ? j.value("version", "") : "";
        int runs = 0;
        for (const Run& run : rec.versions.runs())
            runs +=
                run.pipeline == r.pipeline && !version.empty() && version.starts_with(run.version);
        if (runs > 1)
            out.add("ids", "a version run again reused an id of its earlier run (outbox seqs " +
                               std::to_string(by_id[r.id]->seq) + " and " + std::to_string(r.seq) +
                               "): " + r.payload);
        else
            out.add("duplicates", "id " + std::to_string(r.id) + " was two outbox rows (seqs " +
                                      std::to_string(by_id[r.id]->seq) + " and " +
                                      std::to_string(r.seq) + "): " + r.payload);
    }

    // Records by (pipeline, version label), in the order they first arrived; mapped to the runs
    // of the version the label starts with, in order, or pooled when the counts differ.
    std::map<std::string, std::vector<std::string>> labels;  // pipeline -> labels, first seen
    std::map<std::pair<std::string, std::string>, std::vector<const Row*>> by_label;
    for (const Row& r : rows) {
        auto& list = by_label[{r.received.pipeline, r.version}];
        if (list.empty()) labels[r.received.pipeline].push_back(r.version);
        list.push_back(&r);
    }
    size_t units = 0, compared_rows = 0;
    for (const auto& [pipeline, names] : labels) {
        std::map<std::string, std::vector<std::string>> labels_of;  // version hash -> labels
        for (const std::string& label : names) {
            const Expected* match = nullptr;
            for (const Expected& e : expected)
                if (e.run->pipeline == pipeline && label.starts_with(e.run->version)) match = &e;
            if (!match) {
                out.add("results", "pipeline '" + pipeline +
                                       "': " + std::to_string(by_label[{pipeline, label}].size()) +
                                       " records of version '" + label + "', which never ran");
                continue;
            }
            labels_of[match->run->version].push_back(label);
        }
        for (const auto& [version, group_labels] : labels_of) {
            std::vector<const Expected*> runs;
            for (const Expected& e : expected)
                if (e.run->pipeline == pipeline && e.run->version == version && !e.results.empty())
                    runs.push_back(&e);
            if (runs.empty())
                for (const Expected& e : expected)
                    if (e.run->pipeline == pipeline && e.run->version == version)
                        runs.push_back(&e);
            std::vector<Unit> todo;
            if (runs.size() == group_labels.size()) {
                for (size_t i = 0; i < runs.size(); ++i)
                    todo.push_back({pipeline,
                                    group_labels[i],
                                    by_label[{pipeline, group_labels[i]}],
                                    {runs[i]}});
            } else {
                Unit pooled{pipeline, "", {}, runs};
                for (const std::string& l : group_labels) {
                    pooled.label += (pooled.label.empty() ? "" : "+") + l;
                    const auto& rs = by_label[{pipeline, l}];
                    pooled.rows.insert(pooled.rows.end(), rs.begin(), rs.end());
                }
                todo.push_back(pooled);
            }
            for (const Unit& u : todo) {
                check_unit(u, rec, out);
                ++units;
                compared_rows += u.rows.size();
            }
        }
    }
    // A version with results of which no record arrived under any label.
    for (const Expected& e : expected) {
        const bool counted = std::any_of(e.results.begin(), e.results.end(), [&](const Result& r) {
            return !e.ambiguous.count(r.key);
        });
        if (!counted) continue;
        bool seen = false;
        for (const auto& [key, list] : by_label)
            seen |= key.first == e.run->pipeline && key.second.starts_with(e.run->version);
        if (!seen)
            out.add("lost", "pipeline '" + e.run->pipeline + "' version " + e.run->version +
                                ": none of its " + std::to_string(e.results.size()) +
                                " results reached the upstream (run " +
                                std::to_string(e.run->index) + ": " + e.run->how + ")");
    }
    check_version_records(rec, expected, out);
    check_counters(rec, expected, out);
    check_partition_independence(s, rec, expected, out);
    if (summary)
        *summary = std::to_string(expected.size()) + " version runs, " +
                   std::to_string(rec.upstream.size()) + " records upstream, " +
                   std::to_string(units) + " views compared over " + std::to_string(compared_rows) +
                   " records";
    return out.list();
}

}  // namespace tidemark::sim
