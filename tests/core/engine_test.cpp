// The engine's semantics, scenario by scenario, as DESIGN.md section 4 states them.
#include <algorithm>

#include <catch2/catch.hpp>

#include "tests/core/engine_harness.h"

using namespace tidemark;
using namespace tidemark::test;
using core::ClosedBy;
using core::EmissionKind;
using core::WindowType;

namespace {
constexpr int64_t minute = 60'000;
}

TEST_CASE("a tumbling window fires once when the watermark reaches its end") {
    auto spec = make_spec(WindowType::tumbling, minute);
    spec.watermark.delay_ms = 5'000;
    Driver d(spec);
    d.feed({1'000, "a", 1'000, 1});
    d.feed({30'000, "a", 30'000, 3});
    d.feed({64'000, "a", 64'000, 5});  // watermark 59s: [0,60s) still open
    REQUIRE(d.rec.out.empty());
    d.feed({65'000, "a", 65'000, 7});  // watermark 60s: fires
    REQUIRE(d.rec.out.size() == 1);
    const auto& e = d.rec.out[0].e;
    CHECK(e.kind == EmissionKind::final_result);
    CHECK(e.start_ms == 0);
    CHECK(e.end_ms == minute);
    CHECK(e.closed_by == ClosedBy::watermark);
    CHECK(e.watermark_ms == 60'000);
    CHECK(e.values[0] == 2.0);
    CHECK(e.values[1] == 4.0);
    CHECK(e.values[2] == 3.0);
}

TEST_CASE("tumbling windows honour the offset") {
    auto spec = make_spec(WindowType::tumbling, minute);
    spec.window.offset_ms = 15'000;
    Driver d(spec);
    d.feed({10'000, "a", 10'000, 1});
    d.feed({20'000, "a", 20'000, 1});
    d.feed({80'000, "a", 80'000, 1});
    REQUIRE(d.rec.out.size() == 2);
    CHECK(d.rec.out[0].e.start_ms == -45'000);
    CHECK(d.rec.out[0].e.end_ms == 15'000);
    CHECK(d.rec.out[1].e.start_ms == 15'000);
    CHECK(d.rec.out[1].e.end_ms == 75'000);
}

TEST_CASE("the global watermark is the minimum over partitions that are not idle") {
    auto spec = make_spec(WindowType::tumbling, minute);
    spec.watermark.idle_timeout_ms = 30'000;
    Driver d(spec);
    d.feed({1'000, "fast", 1'000, 1});
    d.feed({1'000, "slow", 1'000, 1});
    d.feed({20'000, "fast", 70'000, 1});
    CHECK(d.rec.out.empty());  // slow holds the watermark at 1s
    CHECK(d.stats().watermark_ms == 1'000);
    d.feed({25'000, "slow", 61'000, 1});
    REQUIRE(d.rec.out.size() == 2);  // both keys' [0,60s) in key order
    CHECK(d.rec.out[0].e.key == "fast");
    CHECK(d.rec.out[1].e.key == "slow");
}

TEST_CASE("an idle partition stops holding the watermark back") {
    auto spec = make_spec(WindowType::tumbling, minute);
    spec.watermark.idle_timeout_ms = 30'000;
    Driver d(spec);
    d.feed({1'000, "a", 1'000, 1});
    d.feed({1'000, "b", 1'000, 1});
    d.feed({20'000, "a", 20'000, 1});
    d.feed({40'000, "a", 40'000, 1});
    d.feed({62'000, "a", 62'000, 1});  // b idle since 31s: watermark follows a
    REQUIRE(d.rec.out.size() == 2);
    // b's only window fired and has no lateness: b holds nothing, and is forgotten.
    CHECK(d.stats().partitions_idle == 0);
    CHECK(d.stats().partitions_forgotten == 1);
    CHECK(d.stats().partitions_active == 1);
}

TEST_CASE("when every partition is idle the watermark follows ingest time and closes windows") {
    auto spec = make_spec(WindowType::tumbling, minute);
    spec.watermark.idle_timeout_ms = 10'000;
    Driver d(spec);
    d.feed({1'000, "a", 1'000, 1});
    d.tick(10'000);
    CHECK(d.rec.out.empty());
    d.tick(11'000);  // idle from 11s, watermark 1s
    CHECK(d.stats().partitions_idle == 1);
    d.tick(69'000);  // watermark 59s
    CHECK(d.rec.out.empty());
    d.tick(70'000);  // watermark 60s
    REQUIRE(d.rec.out.size() == 1);
    CHECK(d.rec.out[0].e.closed_by == ClosedBy::idle);
    CHECK(d.rec.out[0].e.watermark_ms == 60'000);
}

TEST_CASE("a backfill that pauses does not leap to the present") {
    auto spec = make_spec(WindowType::tumbling, minute);
    spec.watermark.idle_timeout_ms = 10'000;
    Driver d(spec);
    // Old data (event time far behind ingest time), then silence.
    d.feed({1'000'000'000, "a", 5'000, 1});
    d.tick(1'000'020'000);  // idle since +10s: watermark 5s + 10s
    CHECK(d.stats().watermark_ms == 15'000);
    CHECK(d.rec.out.empty());
}

TEST_CASE("scope partition: each partition closes windows on its own watermark") {
    auto spec = make_spec(WindowType::tumbling, minute);
    spec.watermark.scope = core::WatermarkScope::partition;
    Driver d(spec);
    d.feed({1'000, "a", 1'000, 1});
    d.feed({1'000, "b", 1'000, 1});
    d.feed({70'000, "a", 70'000, 1});
    REQUIRE(d.rec.out.size() == 1);  // a's window closed although b is behind
    CHECK(d.rec.out[0].e.key == "a");
    // b, offline for hours, is not late for its own windows.
    d.feed({10'000'000, "b", 2'000, 1});
    CHECK(d.stats().too_late == 0);
    d.feed({10'000'001, "b", 61'000, 1});
    REQUIRE(d.rec.out.size() == 2);
    CHECK(d.rec.out[1].e.key == "b");
    CHECK(d.rec.out[1].e.values[0] == 2.0);
}

TEST_CASE("scope partition: an idle partition's windows close by ingest time") {
    auto spec = make_spec(WindowType::tumbling, minute);
    spec.watermark.scope = core::WatermarkScope::partition;
    spec.watermark.idle_timeout_ms = 10'000;
    Driver d(spec);
    d.feed({1'000, "a", 1'000, 1});
    d.feed({1'000, "b", 50'000, 1});
    d.tick(11'000);  // both idle from 11s
    d.tick(20'000);  // b: 50s + 9s = 59s
    CHECK(d.rec.out.empty());
    d.tick(21'000);  // b: 60s
    REQUIRE(d.rec.out.size() == 1);
    CHECK(d.rec.out[0].e.key == "b");
    CHECK(d.rec.out[0].e.closed_by == ClosedBy::idle);
    d.tick(70'000);  // a: 1s + 59s
    REQUIRE(d.rec.out.size() == 2);
    CHECK(d.rec.out[1].e.key == "a");
}

TEST_CASE("an event stamped too far ahead is clamped to its ingest time and counted") {
    auto spec = make_spec(WindowType::tumbling, minute);
    spec.watermark.max_future_ms = 10 * minute;
    Driver d(spec);
    d.feed({1'000, "a", 1'000 + 3'600'000, 1});  // clock an hour ahead
    CHECK(d.stats().clamped == 1);
    CHECK(d.stats().watermark_ms == 1'000);
    d.feed({2'000, "b", 2'000 + 60'000, 1});  // within max_future: kept
    CHECK(d.stats().clamped == 1);
}

TEST_CASE("the watermark never moves back") {
    auto spec = make_spec(WindowType::tumbling, minute);
    spec.watermark.idle_timeout_ms = 10'000;
    Driver d(spec);
    d.feed({1'000, "a", 100'000, 1});
    d.tick(20'000);                   // a idle
    d.feed({21'000, "b", 5'000, 1});  // a new partition far behind
    CHECK(d.stats().watermark_ms >= 100'000);
}

TEST_CASE("late events inside the allowed lateness re-fire the window (upsert)") {
    auto spec = make_spec(WindowType::tumbling, minute);
    spec.late.allowed_lateness_ms = 5 * minute;
    Driver d(spec);
    d.feed({1'000, "a", 1'000, 1});
    d.feed({61'000, "a", 61'000, 1});
    REQUIRE(d.rec.out.size() == 1);
    d.feed({62'000, "a", 2'000, 10});
    REQUIRE(d.rec.out.size() == 2);
    const auto& u = d.rec.out[1].e;
    CHECK(u.kind == EmissionKind::update);
    CHECK(u.revision == 1);
    CHECK(u.closed_by == ClosedBy::late);
    CHECK(u.values[0] == 2.0);
    CHECK(u.values[1] == 11.0);
    CHECK(d.stats().late_updated == 1);
    CHECK(u.id != d.rec.out[0].e.id);
}

TEST_CASE("retract mode sends a retract of the previous result before the update") {
    auto spec = make_spec(WindowType::tumbling, minute);
    spec.late.allowed_lateness_ms = 5 * minute;
    spec.late.corrections = core::Corrections::retract;
    Driver d(spec);
    d.feed({1'000, "a", 1'000, 1});
    d.feed({61'000, "a", 61'000, 1});
    d.feed({62'000, "a", 2'000, 10});
    REQUIRE(d.rec.out.size() == 3);
    CHECK(d.rec.out[1].e.kind == EmissionKind::retract);
    CHECK(d.rec.out[1].e.revision == 0);
    CHECK(d.rec.out[1].e.values[1] == 1.0);
    CHECK(d.rec.out[2].e.kind == EmissionKind::update);
    CHECK(d.rec.out[2].e.revision == 1);
    CHECK(d.rec.out[2].e.values[1] == 11.0);
}

TEST_CASE("past the allowed lateness an event is too late: dropped or side output, counted") {
    auto spec = make_spec(WindowType::tumbling, minute);
    spec.late.allowed_lateness_ms = minute;
    SECTION("drop") {
        Driver d(spec);
        d.feed({1'000, "a", 1'000, 1});
        d.feed({200'000, "a", 200'000, 1});
        d.feed({200'001, "a", 2'000, 1});
        CHECK(d.stats().too_late == 1);
        CHECK(d.stats().side_outputs == 0);
        CHECK(d.rec.side.empty());
        CHECK(d.rec.out.size() == 1);
    }
    SECTION("side output") {
        spec.late.too_late = core::TooLate::side_output;
        Driver d(spec);
        d.feed({1'000, "a", 1'000, 1});
        d.feed({200'000, "a", 200'000, 1});
        d.feed({200'001, "a", 2'000, 1});
        CHECK(d.stats().too_late == 1);
        REQUIRE(d.rec.side.size() == 1);
        CHECK(d.rec.side[0].window_start_ms == 0);
        CHECK(d.rec.side[0].window_end_ms == minute);
        CHECK(d.rec.side[0].topic == "t/a");
        CHECK(d.rec.side[0].reason.find("too late") != std::string::npos);
    }
}

TEST_CASE("a late event for a window that had no data gives that window a first result") {
    auto spec = make_spec(WindowType::tumbling, minute);
    spec.late.allowed_lateness_ms = 5 * minute;
    Driver d(spec);
    d.feed({1'000, "a", 130'000, 1});
    d.feed({2'000, "b", 30'000, 5});  // b's [0,60s) is behind the watermark (130s)
    REQUIRE(d.rec.out.size() == 1);
    CHECK(d.rec.out[0].e.kind == EmissionKind::final_result);
    CHECK(d.rec.out[0].e.closed_by == ClosedBy::late);
    CHECK(d.rec.out[0].e.key == "b");
}

TEST_CASE("keys past max_keys are refused and counted") {
    auto spec = make_spec(WindowType::tumbling, minute);
    spec.limits.keys_max = 2;
    Driver d(spec);
    d.feed({1'000, "a", 1'000, 1});
    d.feed({1'000, "b", 1'000, 1});
    d.feed({1'000, "c", 1'000, 1});
    CHECK(d.stats().keys == 2);
    CHECK(d.stats().keys_refused == 1);
}

TEST_CASE("windows past max_open_windows are refused and counted") {
    auto spec = make_spec(WindowType::tumbling, minute);
    spec.limits.open_windows_max = 2;
    spec.watermark.delay_ms = 10 * minute;
    Driver d(spec);
    d.feed({1'000, "a", 1'000, 1});
    d.feed({1'000, "a", 61'000, 1});
    d.feed({1'000, "a", 121'000, 1});
    CHECK(d.stats().open_windows == 2);
    CHECK(d.stats().windows_refused == 1);
}

TEST_CASE("hopping windows: every window of the grid that holds the event") {
    auto spec = make_spec(WindowType::hopping, 3 * minute, minute);
    Driver d(spec);
    d.feed({1'000, "a", 150'000, 2});  // in [0,3m), [1m,4m), [2m,5m)
    d.feed({1'000, "a", 400'000, 0});  // closes everything up to 400s
    auto finals = d.rec.of_kind(EmissionKind::final_result);
    REQUIRE(finals.size() == 3);
    CHECK(finals[0]->start_ms == 0);
    CHECK(finals[1]->start_ms == minute);
    CHECK(finals[2]->start_ms == 2 * minute);
    for (auto* f : finals)
        CHECK(f->values[1] == 2.0);
}

TEST_CASE("sessions: a late event that bridges two sessions retracts the fired one") {
    auto spec = make_spec(WindowType::session, 10'000);
    spec.late.allowed_lateness_ms = minute;
    Driver d(spec);
    d.feed({1'000, "a", 0, 1});       // [0,10s)
    d.feed({1'000, "a", 15'000, 2});  // [15s,25s)
    d.feed({1'000, "b", 12'000, 0});  // b moves the watermark to 12s: a's first session fires
    REQUIRE(d.rec.out.size() == 1);
    CHECK(d.rec.out[0].e.end_ms == 10'000);
    d.feed({1'000, "a", 8'000, 4});  // bridges: [0,25s)
    REQUIRE(d.rec.out.size() == 2);
    CHECK(d.rec.out[1].e.kind == EmissionKind::retract);
    CHECK(d.rec.out[1].e.closed_by == ClosedBy::merge);
    CHECK(d.rec.out[1].e.end_ms == 10'000);
    CHECK(d.rec.out[1].e.values[0] == 1.0);  // what it cancels
    d.feed({1'000, "a", 100'000, 0});
    d.feed({1'000, "b", 100'000, 0});
    INFO(d.rec.text());
    auto finals = d.rec.of_kind(EmissionKind::final_result);
    REQUIRE(finals.size() >= 2);
    const core::Emission* merged = nullptr;
    for (auto* f : finals)
        if (f->key == "a" && f->start_ms == 0 && f->end_ms == 25'000) merged = f;
    REQUIRE(merged);
    CHECK(merged->values[0] == 3.0);
    CHECK(merged->values[1] == 7.0);
}

TEST_CASE("sessions are cut at max_duration") {
    auto spec = make_spec(WindowType::session, 10'000, 30'000);
    Driver d(spec);
    for (int64_t t = 0; t <= 60'000; t += 5'000)
        d.feed({t, "a", t, 1});
    d.feed({200'000, "b", 200'000, 0});
    auto finals = d.rec.of_kind(EmissionKind::final_result);
    for (auto* f : finals)
        if (f->key == "a") CHECK(f->end_ms - f->start_ms <= 30'000);
}

TEST_CASE("ids are stable and differ by revision and kind") {
    using core::emission_id;
    CHECK(emission_id("gw", "p", "k", 0, 60, 0, EmissionKind::final_result) ==
          emission_id("gw", "p", "k", 0, 60, 0, EmissionKind::final_result));
    CHECK(emission_id("gw", "p", "k", 0, 60, 0, EmissionKind::final_result) !=
          emission_id("gw", "p", "k", 0, 60, 1, EmissionKind::update));
    CHECK(emission_id("gw", "p", "k", 0, 60, 0, EmissionKind::retract) !=
          emission_id("gw", "p", "k", 0, 60, 0, EmissionKind::final_result));
    CHECK(emission_id("gw", "pk", "", 0, 60, 0, EmissionKind::final_result) !=
          emission_id("gw", "p", "k", 0, 60, 0, EmissionKind::final_result));
    // Upstream dedupes by id: these values were produced by the first release and must never
    // change, whichever way the hash is computed.
    CHECK(emission_id("gw", "p", "k", 0, 60, 0, EmissionKind::final_result) ==
          0xcdb89cfaff828173ULL);
    CHECK(emission_id("gateway-7", "temps", "device-12345", -1764400000000, 1764400060000,
                      4294967295u, EmissionKind::retract) == 0x725222ed880a0d99ULL);
    const uint64_t seed = core::emission_id_seed("gateway-7", "temps");
    CHECK(core::emission_id_from_seed(seed, "device-12345", -1764400000000, 1764400060000,
                                      4294967295u, EmissionKind::retract) == 0x725222ed880a0d99ULL);
}

TEST_CASE("state of another pipeline definition is refused on restore") {
    auto spec = make_spec(WindowType::tumbling, minute);
    Driver a(spec);
    a.feed({1'000, "a", 1'000, 1});
    MapWriter w;
    a.engine->checkpoint(w);
    spec.window.size_ms = 2 * minute;
    Driver b(spec);
    for (auto& [k, v] : w.data)
        REQUIRE(b.engine->restore_entry(k, v));
    auto done = b.engine->restore_finish();
    REQUIRE_FALSE(done);
    CHECK(done.error().message.find("another definition") != std::string::npos);
}

TEST_CASE("windows that close together come out in key order, bytes compared unsigned") {
    // Keys with a long shared prefix, keys that are prefixes of others, a zero byte and bytes
    // above 0x7f: the order is std::string's, whatever shortcut the engine takes to sort.
    const std::vector<std::string> keys = {"device-10",
                                           "device-9",
                                           "device-1",
                                           "device-100000000000",
                                           "device-10000000000",
                                           "device-",
                                           "device-\xff",
                                           "device-1" + std::string(1, '\0'),
                                           "d",
                                           "device-\x7f",
                                           "e",
                                           "device-10000000001"};
    auto spec = make_spec(WindowType::tumbling, minute);
    Driver d(spec);
    for (const auto& k : keys)
        d.feed({1'000, k, 1'000, 1, "one partition"});
    d.feed({61'000, "zz", 61'000, 1, "one partition"});
    std::vector<std::string> fired;
    for (const auto* e : d.rec.of_kind(EmissionKind::final_result))
        fired.push_back(e->key);
    std::vector<std::string> expected = keys;
    std::sort(expected.begin(), expected.end());
    CHECK(fired == expected);
}

TEST_CASE("windows opened newest first still fire oldest first, each once") {
    // Every event opens a window that closes before the key's earlier ones: the key's timer
    // moves earlier each time (the engine keeps its timers in a heap that drops stale entries
    // lazily; this walks it through many of them).
    auto spec = make_spec(WindowType::tumbling, minute);
    spec.watermark.delay_ms = 1'000 * minute;
    Driver d(spec);
    for (int64_t m = 200; m >= 1; --m) {
        d.feed({200 * minute, "a", m * minute + 1, 1});
        d.feed({200 * minute, "b", m * minute + 2, 2});
    }
    d.finish();
    const auto finals = d.rec.of_kind(EmissionKind::final_result);
    REQUIRE(finals.size() == 400);
    for (size_t i = 0; i < finals.size(); ++i) {
        const int64_t m = 1 + static_cast<int64_t>(i / 2);
        CHECK(finals[i]->start_ms == m * minute);
        CHECK(finals[i]->key == (i % 2 == 0 ? "a" : "b"));
    }
}

TEST_CASE("prefetch is a hint only: the same emissions with and without it") {
    // Issue 31: the processor tells the engine which key several pipelines are about to
    // process. Before the first key (an empty table), for keys seen and not seen, for a
    // partition other than the key in both scopes, and for every window type.
    for (const auto scope : {core::WatermarkScope::global, core::WatermarkScope::partition}) {
        for (const auto type : {WindowType::tumbling, WindowType::hopping, WindowType::session}) {
            auto spec = type == WindowType::hopping ? make_spec(type, 3 * minute, minute)
                                                    : make_spec(type, minute);
            spec.watermark.scope = scope;
            spec.late.allowed_lateness_ms = minute;
            Driver plain(spec), hinted(spec);
            std::vector<Input> inputs;
            for (int64_t i = 0; i < 400; ++i) {
                const std::string key = "dev-" + std::to_string(i % 7);
                const std::string partition = i % 3 == 0 ? "site-" + std::to_string(i % 2) : "";
                inputs.push_back({100'000 + i * 1'000, key, 100'000 + i * 1'000 - (i % 5) * 7'000,
                                  static_cast<double>(i), partition});
            }
            const uint32_t pipelines[] = {0};
            for (const auto& in : inputs) {
                plain.feed(in);
                hinted.engine->prefetch(pipelines, in.key, in.partition);
                hinted.engine->prefetch(pipelines, "never-seen", "");
                hinted.feed(in);
            }
            plain.finish();
            hinted.finish();
            CHECK(plain.rec.text() == hinted.rec.text());
            CHECK(!plain.rec.out.empty());
        }
    }
}

TEST_CASE("a prefetched key's state is taken only while it is still the table's") {
    // Issue 31: process() takes the state Engine::prefetch found rather than looking the key
    // up again. Between the two the key can go: here the step of the event's own ingest time
    // lets its partition go idle, the watermark follows ingest time and the key's window fires
    // and is forgotten; its state returns to the pool under the same name. The event must then
    // make a new key, as it does without the hint. And a hint for another key than the
    // event's.
    auto spec = make_spec(WindowType::tumbling, minute);
    spec.watermark.idle_timeout_ms = 10'000;
    Driver plain(spec), hinted(spec);
    const uint32_t pipelines[] = {0};
    std::vector<Input> inputs;
    for (int64_t round = 0; round < 6; ++round) {
        const int64_t t = 100'000 + round * 10 * minute;
        inputs.push_back({t, "a", t, 1.0 + static_cast<double>(round)});
        inputs.push_back({t + 500, "b", t + 400, 2.0});
        inputs.push_back({t + 900, "a", t + 800, 3.0});
    }
    for (size_t i = 0; i < inputs.size(); ++i) {
        const Input& in = inputs[i];
        plain.feed(in);
        // Each "b" is fed after a hint for "a", which the table holds then.
        hinted.engine->prefetch(pipelines, in.key == "b" ? "a" : in.key, "");
        hinted.feed(in);
    }
    plain.finish();
    hinted.finish();
    CHECK(plain.rec.text() == hinted.rec.text());
    CHECK(plain.rec.out.size() >= 12);
    CHECK(plain.stats().keys == hinted.stats().keys);
}
