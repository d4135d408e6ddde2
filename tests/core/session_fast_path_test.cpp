// Sessions at the edges of the engine's per-event fast path (issue 31: an event inside its key's
// newest open session grows it in place, sessions.h): exactly at the gap boundary, at the
// max_duration cut, out of order inside the session, and after a restore. Each case states the
// sessions DESIGN.md section 4 gives and is also checked against the reference model.
#include <catch2/catch.hpp>

#include <set>
#include <vector>

#include "tests/core/scenario.h"

using namespace tidemark;
using model::Record;

namespace {

// A minute boundary near 2023-11-14.
constexpr int64_t t0_ms = 28'333'333LL * 60'000;
constexpr int64_t s_ms = 1000;

Record event(int64_t ingest_ms, int64_t event_ms, double value) {
    return model::event_record(ingest_ms, "k", event_ms, value);
}

Record tick(int64_t ingest_ms) {
    return model::tick_record(ingest_ms);
}

// Gap 10 s; count, min and max of the value; watermark delay 0, so that the watermark is the
// latest event and a session fires as soon as an event at or after its end arrives.
core::PipelineSpec session_spec(int64_t max_duration_ms) {
    core::PipelineSpec s;
    s.name = "p";
    s.fields = {"v"};
    s.window.type = core::WindowType::session;
    s.window.gap_ms = 10 * s_ms;
    s.window.max_duration_ms = max_duration_ms;
    s.watermark.delay_ms = 0;
    s.watermark.idle_timeout_ms = 60 * s_ms;
    s.watermark.max_future_ms = 600 * s_ms;
    s.aggregates = {{"n", core::AggregateFn::count, -1, 0},
                    {"min", core::AggregateFn::min, 0, 0},
                    {"max", core::AggregateFn::max, 0, 0}};
    return s;
}

// Events at t0 + offset (ms), one ingest millisecond apart, then ticks until everything closed.
std::vector<Record> stream(const std::vector<int64_t>& offsets_ms) {
    std::vector<Record> records;
    int64_t ingest = t0_ms;
    for (const int64_t offset : offsets_ms) {
        records.push_back(event(ingest, t0_ms + offset, static_cast<double>(offset)));
        ++ingest;
    }
    for (int64_t t = 1; t <= 200; ++t)
        records.push_back(tick(ingest + t * s_ms));
    return records;
}

struct Session {
    int64_t start_offset_ms;
    int64_t end_offset_ms;
    double count;
    bool operator==(const Session&) const = default;
};

// The finals the engine emitted, and that it agrees with the model (also when cut and restored
// after each record named in `cuts`).
std::vector<Session> finals(const core::PipelineSpec& spec, const std::vector<Record>& records,
                            const std::set<size_t>& cuts = {}) {
    model::RunOptions options;
    options.cut_after = cuts;
    const auto engine = model::run_engine(spec, records, options);
    REQUIRE(engine.error.empty());
    const auto diff = model::compare(spec, engine, model::run_model(spec, records));
    if (diff) FAIL_CHECK(*diff);
    CHECK(engine.stats.too_late == 0);
    CHECK(engine.stats.late_updated == 0);
    std::vector<Session> out;
    for (const auto& e : engine.emissions) {
        INFO(model::emission_text(e));
        CHECK(e.kind == core::EmissionKind::final_result);
        out.push_back({e.start_ms - t0_ms, e.end_ms - t0_ms, *e.values[0]});
    }
    return out;
}

}  // namespace

TEST_CASE(
    "an event one millisecond before a session's end joins it; one at its end starts the "
    "next") {
    const auto spec = session_spec(60 * s_ms);
    // [0, 10 s); 9.999 s joins: [0, 19.999 s); 19.999 s is its end (half-open): a new session.
    const auto records = stream({0, 9'999, 19'999, 25'000});
    const std::vector<Session> expected = {{0, 19'999, 2}, {19'999, 35'000, 2}};
    CHECK(finals(spec, records) == expected);
    CHECK(finals(spec, records, {0, 1, 2}) == expected);
}

TEST_CASE(
    "a session grows in place up to its max_duration cut, and the event at the cut starts "
    "the next") {
    const auto spec = session_spec(30 * s_ms);
    // Every event joins [0, ...) until the end is the cut at 30 s (24 s + gap would be 34 s);
    // 12 s arrives out of order inside it; 29.999 s is the last millisecond the session holds.
    const auto records = stream({0, 8'000, 16'000, 24'000, 12'000, 29'999, 30'000, 31'000});
    const std::vector<Session> expected = {{0, 30'000, 6}, {30'000, 41'000, 2}};
    CHECK(finals(spec, records) == expected);
    CHECK(finals(spec, records, {1, 3, 4, 5}) == expected);
}

TEST_CASE("an event inside a session that the cut shortened does not move its end") {
    const auto spec = session_spec(15 * s_ms);
    // [0, 10 s), then 7 s: [0, 15 s) (the cut, not 17 s); 14 s stays inside it.
    const auto records = stream({0, 7'000, 14'000, 15'000});
    const std::vector<Session> expected = {{0, 15'000, 3}, {15'000, 25'000, 1}};
    CHECK(finals(spec, records) == expected);
    CHECK(finals(spec, records, {0, 1}) == expected);
}
