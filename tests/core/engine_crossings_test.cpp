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

Driver restored(const core::PipelineSpec& spec, const MapWriter& store, uint64_t order) {
    Driver d(spec);
    for (const auto& [k, v] : store.data)
        REQUIRE(d.engine->restore_entry(k, v));
    REQUIRE(d.engine->restore_finish());
    d.order = order;
    return d;
}

// Scope partition, 1m windows, 2m of lateness; partitions idle after 10s.
core::PipelineSpec partition_spec() {
    auto spec = make_spec(WindowType::tumbling, minute);
    spec.watermark.scope = core::WatermarkScope::partition;
    spec.watermark.idle_timeout_ms = 10 * second;
    spec.watermark.max_future_ms = 10 * minute;
    spec.late.allowed_lateness_ms = 2 * minute;
    return spec;
}

// A device 9 minutes fast (under max_future) sends for a second, then falls silent until it is
// forgotten (its windows fired and passed their lateness).
void fast_device_forgotten(Driver& d) {
    d.feed({0, "fast", 9 * minute, 1});
    d.feed({1 * second, "fast", 9 * minute + 1 * second, 1});
    for (int64_t now = 2 * second; now <= 10 * minute; now += 5 * second)
        d.tick(now);
    REQUIRE(d.stats().partitions_forgotten == 1);
}

// A device with a right clock: one event a second for a minute from `from`.
void right_clock_minute(Driver& d, const std::string& name, int64_t from) {
    for (int64_t t = from; t < from + minute; t += second)
        d.feed({t, name, t, 1});
}
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

TEST_CASE("a late event whose merge, cut at max_duration, ends past the horizon is too late") {
    // Found by the appliance simulation (issue 24). Gap 20s, max 40s, lateness 30s: the fired
    // session [100s, 130s) is kept until the watermark reaches 160s. An event at 85s joins it
    // (the span 85s..110s fits), but the merged session ends at 85s + 40s = 125s, whose
    // horizon (155s) the watermark (158s) has passed: too late. Before, the fired session was
    // retracted and [85s, 125s) emitted as a final closed_by late, past its own horizon.
    auto spec = make_spec(WindowType::session, 20 * second, 40 * second);
    spec.late.allowed_lateness_ms = 30 * second;
    Driver d(spec);
    d.feed({100 * second, "a", 100 * second, 1});
    d.feed({110 * second, "a", 110 * second, 1});
    d.feed({158 * second, "a", 158 * second, 1});
    REQUIRE(d.rec.out.size() == 1);  // [100s, 130s) fired
    d.feed({159 * second, "a", 85 * second, 1});
    INFO(d.rec.text());
    CHECK(d.rec.out.size() == 1);
    CHECK(d.stats().too_late == 1);
}

TEST_CASE("a composite key too long to store is refused, and every checkpoint still commits") {
    // Scope partition with a partition other than the key: `partition|key`, each part up to
    // 256 bytes from the decoder, made state keys of 536-544 bytes, over LMDB's 511: the
    // checkpoint's put failed, and so did every later one while that key lived.
    auto spec = make_spec(WindowType::tumbling, minute);
    spec.watermark.scope = core::WatermarkScope::partition;
    spec.late.too_late = core::TooLate::side_output;
    Driver d(spec);
    d.feed({1'000, "dev-1", 1'000, 1, "site-1"});
    d.feed({1'000, std::string(256, 'k'), 1'000, 1, std::string(256, 'p')});
    d.feed({1'000, std::string(200, 'k'), 1'000, 1, std::string(100, 'p')});  // 301: kept
    d.feed({1'000, "dev-2", 1'000, 1, std::string(core::key_bytes_max + 1, 'p')});
    CHECK(d.stats().keys_refused == 2);
    REQUIRE(d.rec.side.size() == 2);
    CHECK(d.rec.side[0].reason.find("more than the 384 allowed") != std::string::npos);
    CHECK(d.stats().keys == 2);
    MapWriter w;
    d.engine->checkpoint(w);
    for (const auto& [k, v] : w.data)
        CHECK(k.size() <= core::state_key_bytes_max);
    // Others are not held back: dev-1's window closes on its own partition's watermark.
    d.feed({200'000, "dev-1", 200'000, 1, "site-1"});
    CHECK(d.rec.of_kind(EmissionKind::final_result).size() == 1);
}

TEST_CASE("one device with a fast clock, forgotten, never makes another device late") {
    // Before (issue 24, finding 2): the lead of forgotten partitions was one maximum that
    // never decayed, so every new partition started 8m50s in the future: all its events were
    // too late, for good.
    Driver d(partition_spec());
    fast_device_forgotten(d);
    right_clock_minute(d, "new", 11 * minute);
    d.tick(15 * minute);
    INFO(d.rec.text());
    CHECK(d.stats().too_late == 0);
    size_t new_finals = 0;
    for (const auto* e : d.rec.of_kind(EmissionKind::final_result))
        new_finals += e->key == "new";
    CHECK(new_finals == 1);
    CHECK(d.stats().partitions_remembered == 2);  // the fast one, and "new", forgotten since
}

TEST_CASE("a forgotten device that returns starts where it would have been, also after a restore") {
    // Its windows' ids are taken: back with its clock now right, what it sends for time it
    // already covered is too late (its watermark kept moving with ingest time, as an idle
    // one's does); a device never seen starts afresh beside it.
    const auto spec = partition_spec();
    Driver first(spec);
    fast_device_forgotten(first);
    MapWriter store;
    first.engine->checkpoint(store);
    Driver d = restored(spec, store, first.order);
    right_clock_minute(d, "fast", 11 * minute);
    right_clock_minute(d, "new", 11 * minute);
    d.tick(15 * minute);
    INFO(d.rec.text());
    CHECK(d.stats().too_late == 60);  // the fast one's, all of them
    for (const auto* e : d.rec.of_kind(EmissionKind::final_result))
        CHECK(e->key == "new");
    CHECK(d.stats().partitions_remembered == 2);  // both forgotten again since
}

TEST_CASE("past max_keys forgotten partitions, the lowest lead is given up to the floor") {
    // keys_max 2: the third forgotten partition makes the one with the lowest lead go. Its
    // watermark then is the floor: a new device starts no earlier, which holds back only
    // events older than where that partition was.
    auto spec = partition_spec();
    spec.limits.keys_max = 2;
    Driver d(spec);
    fast_device_forgotten(d);
    right_clock_minute(d, "a", 11 * minute);
    for (int64_t now = 12 * minute; now <= 20 * minute; now += 5 * second)
        d.tick(now);
    right_clock_minute(d, "b", 21 * minute);
    for (int64_t now = 22 * minute; now <= 30 * minute; now += 5 * second)
        d.tick(now);
    REQUIRE(d.stats().partitions_forgotten == 3);
    CHECK(d.stats().partitions_remembered == 2);
    CHECK(d.stats().forgotten_evicted == 1);
    // a's and b's leads were the lowest (-10s each, the hash of the name breaks the tie): a new
    // device starts no earlier than the one given up was when it went (about 24m).
    const uint64_t too_late_before = d.stats().too_late;
    d.feed({31 * minute, "c", 31 * minute, 1});
    d.feed({31 * minute, "c", 5 * minute, 1});
    CHECK(d.stats().too_late == too_late_before + 1);
    // The fast one is still remembered: back with its clock right, it is too late.
    d.feed({31 * minute, "fast", 31 * minute, 1});
    CHECK(d.stats().too_late == too_late_before + 2);
}
