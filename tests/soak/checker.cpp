#include "tests/soak/checker.h"

#include <algorithm>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>

namespace tidemark::soak {

namespace {

struct Aggregate {
    int64_t count = 0;
    int64_t sum = 0;
    int64_t min = std::numeric_limits<int64_t>::max();
    int64_t max = std::numeric_limits<int64_t>::min();
};

// (pipeline, key, start, end): the window a consumer upserts (the version is checked apart).
using WindowId = std::tuple<std::string, std::string, int64_t, int64_t>;

struct Result {
    std::string id;
    std::string version;
    std::string kind;
    int64_t revision = 0;
    nlohmann::json values;
    std::string raw;
};

std::string describe(const WindowId& w) {
    std::ostringstream s;
    s << std::get<0>(w) << " key=" << std::get<1>(w) << " [" << std::get<2>(w) << ","
      << std::get<3>(w) << ")";
    return s.str();
}

std::string describe(const Aggregate& a) {
    std::ostringstream s;
    s << "n=" << a.count << " s=" << a.sum << " lo=" << a.min << " hi=" << a.max;
    return s.str();
}

// A JSON number equal to the integer `expected` (counts are integers, sums and extremes may be
// printed as doubles: integers below 2^53 are exact either way).
bool equals(const nlohmann::json& value, int64_t expected) {
    if (value.is_number_integer()) return value.get<int64_t>() == expected;
    if (value.is_number_float()) return value.get<double>() == static_cast<double>(expected);
    return false;
}

std::optional<Result> parse(const std::string& payload, WindowId& window) {
    const auto j = nlohmann::json::parse(payload, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) return std::nullopt;
    try {
        Result r;
        r.id = j.at("id").get<std::string>();
        r.version = j.contains("version") ? j.at("version").dump() : std::string();
        r.kind = j.at("kind").get<std::string>();
        r.revision = j.at("revision").get<int64_t>();
        r.values = j.at("values");
        r.raw = payload;
        window = WindowId{j.at("pipeline").get<std::string>(), j.at("key").get<std::string>(),
                          j.at("window").at("start").get<int64_t>(),
                          j.at("window").at("end").get<int64_t>()};
        if (r.kind != "final" && r.kind != "update" && r.kind != "retract") return std::nullopt;
        return r;
    } catch (const std::exception&) {
        return std::nullopt;
    }
}

}  // namespace

int64_t tumbling_start_ms(int64_t t_ms, int64_t size_ms, int64_t offset_ms) {
    const int64_t shifted = t_ms - offset_ms;
    int64_t q = shifted / size_ms;
    if (shifted % size_ms != 0 && shifted < 0) --q;
    return q * size_ms + offset_ms;
}

Verdict check(const std::vector<PipelineSpec>& pipelines, const std::vector<PublishedEvent>& events,
              const std::vector<PublishedEvent>& uncertain,
              const std::vector<UpstreamMessage>& upstream, std::size_t examples_max) {
    Verdict v;
    auto example = [&](const std::string& text) {
        if (v.examples.size() < examples_max) v.examples.push_back(text);
    };
    v.events = static_cast<int64_t>(events.size());

    std::map<WindowId, Aggregate> expected;
    for (const auto& p : pipelines) {
        for (const auto& e : events) {
            const int64_t start = tumbling_start_ms(e.ts_ms, p.size_ms, p.offset_ms);
            const std::string& key = p.key_by == KeyBy::device ? e.device : e.zone;
            Aggregate& a = expected[WindowId{p.name, key, start, start + p.size_ms}];
            ++a.count;
            a.sum += e.v;
            a.min = std::min(a.min, e.v);
            a.max = std::max(a.max, e.v);
        }
    }
    std::set<WindowId> uncertain_windows;
    for (const auto& p : pipelines) {
        for (const auto& e : uncertain) {
            const int64_t start = tumbling_start_ms(e.ts_ms, p.size_ms, p.offset_ms);
            const std::string& key = p.key_by == KeyBy::device ? e.device : e.zone;
            uncertain_windows.insert(WindowId{p.name, key, start, start + p.size_ms});
        }
    }
    for (const auto& w : uncertain_windows)
        expected.erase(w);
    v.windows_uncertain = static_cast<int64_t>(uncertain_windows.size());
    v.windows_expected = static_cast<int64_t>(expected.size());

    // Identity of a record: its window, version, revision and kind (a retract carries the
    // revision it cancels, so a final and its retract share a revision but not a kind).
    using Identity = std::tuple<WindowId, std::string, int64_t, std::string>;
    std::map<std::string, std::string> payload_by_id;
    std::map<Identity, std::string> id_by_identity;
    std::map<WindowId, Result> kept;
    std::set<std::pair<std::string, std::string>> versions;
    for (const auto& m : upstream) {
        if (m.topic.ends_with("/side")) {
            ++v.side_records;
            continue;
        }
        // Version records, and too-late tallies (late.report): not results.
        if (m.topic.ends_with("/version") || m.topic.ends_with("/late")) continue;
        WindowId window;
        auto r = parse(m.payload, window);
        if (!r) {
            ++v.unparsable;
            example("not a result record on " + m.topic + ": " + m.payload);
            continue;
        }
        ++v.results;
        versions.emplace(std::get<0>(window), r->version);
        auto [by_id, fresh_id] = payload_by_id.emplace(r->id, r->raw);
        if (!fresh_id) {
            if (by_id->second != r->raw) {
                ++v.duplicates_different_id;
                example("id " + r->id + " with two payloads: " + by_id->second + " / " + r->raw);
            }
            continue;  // the consumer dedupes by id
        }
        ++v.results_unique;
        auto [by_identity, fresh_identity] =
            id_by_identity.emplace(Identity{window, r->version, r->revision, r->kind}, r->id);
        if (!fresh_identity && by_identity->second != r->id) {
            ++v.duplicates_different_id;
            example(describe(window) + " revision " + std::to_string(r->revision) + " " + r->kind +
                    " under two ids: " + by_identity->second + " and " + r->id);
        }
        auto it = kept.find(window);
        if (it == kept.end()) {
            kept.emplace(window, std::move(*r));
            continue;
        }
        const Result& old = it->second;
        if (r->version != old.version) continue;  // counted in `versions`, reported below
        if (r->revision > old.revision || (r->revision == old.revision && r->kind == "retract")) {
            it->second = std::move(*r);
        }
    }
    v.versions = static_cast<int64_t>(versions.size());
    if (versions.size() > pipelines.size()) {
        ++v.wrong;
        example("more than one version per pipeline: " + std::to_string(versions.size()) +
                " (pipeline, version) pairs for " + std::to_string(pipelines.size()) +
                " pipelines");
    }

    for (const auto& [window, r] : kept) {
        if (r.kind != "retract") ++v.windows_received;
    }
    for (const auto& [window, want] : expected) {
        auto it = kept.find(window);
        if (it == kept.end()) {
            ++v.lost;
            example("lost: " + describe(window) + " expected " + describe(want) + ", no result");
            continue;
        }
        const Result& got = it->second;
        if (got.kind == "retract") {
            ++v.lost;
            example("lost: " + describe(window) + " expected " + describe(want) +
                    ", kept record is a retract: " + got.raw);
            continue;
        }
        const nlohmann::json& values = got.values;
        const bool shaped = values.is_object() && values.contains("n") && values.contains("s") &&
                            values.contains("lo") && values.contains("hi");
        if (shaped && values["n"].is_number_integer() && values["n"].get<int64_t>() < want.count) {
            ++v.lost;
            example("lost: " + describe(window) + " expected " + describe(want) + ", got " +
                    got.raw);
            continue;
        }
        if (!shaped || !equals(values["n"], want.count) || !equals(values["s"], want.sum) ||
            !equals(values["lo"], want.min) || !equals(values["hi"], want.max)) {
            ++v.wrong;
            example("wrong: " + describe(window) + " expected " + describe(want) + ", got " +
                    got.raw);
        }
    }
    for (const auto& [window, r] : kept) {
        if (r.kind == "retract" || expected.contains(window) || uncertain_windows.contains(window))
            continue;
        ++v.wrong;
        example("wrong: a result for a window nobody published into: " + r.raw);
    }
    return v;
}

}  // namespace tidemark::soak
