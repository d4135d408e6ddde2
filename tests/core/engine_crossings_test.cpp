// The engine where two of its features meet (issue 24): a session cut at max_duration with the
// too-late rule, forgetting with a device's fast clock, long composite keys with checkpoints.
// Each case failed before its fix.
#include <catch2/catch.hpp>

#include "tests/core/engine_harness.h"

using namespace tidemark;
using namespace tidemark::test;
using core::ClosedBy;
using core::EmissionKind;
using core::WindowType;

namespace {
constexpr int64_t second = 1'000;
constexpr int64_t minute = 60'000;
}  // namespace

TEST_CASE("an event that overlaps a fired session it cannot join is judged by its own window") {
    // Gap 5m, max 10m, lateness 1m. The session [10m, 20m) is cut at max_duration and has fired;
    // an event at 9m overlaps it but joining would span 10.5m, so its session is [9m, 10m),
    // whose horizon (11m) the watermark (20.5m) passed long ago: too late, not a late final.
    auto spec = make_spec(WindowType::session, 5 * minute, 10 * minute);
    spec.late.allowed_lateness_ms = minute;
    Driver d(spec);
    for (const int64_t t : {10 * minute, 14 * minute, 18 * minute, 19 * minute + 30 * second})
        d.feed({t, "a", t, 1});
    d.feed({20 * minute + 30 * second, "a", 20 * minute + 30 * second, 1});  // fires [10m, 20m)
    REQUIRE(d.rec.out.size() == 1);
    CHECK(d.rec.out[0].e.start_ms == 10 * minute);
    CHECK(d.rec.out[0].e.end_ms == 20 * minute);
    d.feed({20 * minute + 31 * second, "a", 9 * minute, 5});
    INFO(d.rec.text());
    CHECK(d.rec.out.size() == 1);
    CHECK(d.stats().too_late == 1);
    CHECK(d.stats().late_updated == 0);
}

TEST_CASE("an event that overlaps a session it cannot join, inside the horizon, is a late final") {
    // The same cut, with the watermark still inside the own session's horizon: it is late, not
    // too late, and becomes a session of its own with a first result.
    auto spec = make_spec(WindowType::session, 5 * minute, 10 * minute);
    spec.late.allowed_lateness_ms = 15 * minute;
    Driver d(spec);
    for (const int64_t t : {10 * minute, 14 * minute, 18 * minute, 19 * minute + 30 * second})
        d.feed({t, "a", t, 1});
    d.feed({20 * minute + 30 * second, "a", 20 * minute + 30 * second, 1});
    d.feed({20 * minute + 31 * second, "a", 9 * minute, 5});
    INFO(d.rec.text());
    REQUIRE(d.rec.out.size() == 2);
    CHECK(d.rec.out[1].e.kind == EmissionKind::final_result);
    CHECK(d.rec.out[1].e.closed_by == ClosedBy::late);
    CHECK(d.rec.out[1].e.start_ms == 9 * minute);
    CHECK(d.rec.out[1].e.end_ms == 10 * minute);
    CHECK(d.stats().too_late == 0);
    CHECK(d.stats().late_updated == 1);
}
