// The engine where gateways live: partitions that go idle, keys that come and go, sessions at
// their length cap, checkpoints that fail. Each case was a wrong or missing result once.
#include <algorithm>
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

// Restores a checkpoint into a new engine of the same spec.
Driver restored(const core::PipelineSpec& spec, const MapWriter& store, uint64_t order) {
    Driver d(spec);
    for (const auto& [k, v] : store.data)
        REQUIRE(d.engine->restore_entry(k, v));
    REQUIRE(d.engine->restore_finish());
    d.order = order;
    return d;
}
}  // namespace

TEST_CASE("a partition going idle lets the others' minimum close windows at once") {
    // A at t=0, B at t=600s; A goes idle at ingest 60s: the watermark is then B's 600s, and the
    // older windows close by watermark, not ten minutes later by the all-idle advance.
    auto spec = make_spec(WindowType::tumbling, minute);
    spec.watermark.idle_timeout_ms = minute;
    Driver d(spec);
    d.feed({0, "A", 0, 1});
    d.feed({10 * second, "B", 600 * second, 2});
    for (int64_t now = 11 * second; now <= 60 * second; now += second)
        d.tick(now);
    const auto finals = d.rec.of_kind(EmissionKind::final_result);
    REQUIRE(finals.size() == 1);
    CHECK(finals[0]->key == "A");
    CHECK(finals[0]->closed_by == ClosedBy::watermark);
    CHECK(finals[0]->watermark_ms == 600 * second);
    CHECK(d.stats().watermark_ms == 600 * second);
    // B goes idle at 70s: from there the watermark follows ingest time from 600s.
    d.tick(80 * second);
    CHECK(d.stats().watermark_ms == 610 * second);
    d.tick(130 * second);  // 660s: B's [600s, 660s) closes, by the idle advance
    const auto all = d.rec.of_kind(EmissionKind::final_result);
    REQUIRE(all.size() == 2);
    CHECK(all[1]->key == "B");
    CHECK(all[1]->closed_by == ClosedBy::idle);
}

TEST_CASE("partitions going idle at different instants are taken one instant at a time") {
    // Ticks are coarse (one jump from 50s to 200s) but the result must be the one fine ticks give.
    auto spec = make_spec(WindowType::tumbling, minute);
    spec.watermark.idle_timeout_ms = minute;
    auto run = [&](bool fine) {
        Driver d(spec);
        d.feed({0, "A", 0, 1});
        d.feed({10 * second, "B", 600 * second, 2});
        d.feed({20 * second, "C", 300 * second, 3});
        if (fine)
            for (int64_t now = 21 * second; now <= 200 * second; now += second)
                d.tick(now);
        else
            d.tick(200 * second);
        // The watermark a result carries is the one when it fired, which coarse ticks make
        // later; which windows close, how, and with what, must not depend on them.
        std::string out;
        for (const auto& o : d.rec.out)
            out +=
                o.text.substr(0, o.text.find(" wm ")) + o.text.substr(o.text.find(" id ")) + "\n";
        return out;
    };
    CHECK(run(true) == run(false));
}

TEST_CASE("a restart around the idle transition gives the uncut run's results") {
    for (const auto scope : {core::WatermarkScope::global, core::WatermarkScope::partition}) {
        for (const auto type : {WindowType::tumbling, WindowType::session}) {
            auto spec = make_spec(type, type == WindowType::session ? 20 * second : minute);
            spec.watermark.idle_timeout_ms = 3 * second;
            spec.watermark.delay_ms = 5 * second;
            spec.watermark.scope = scope;
            spec.late.allowed_lateness_ms = 30 * minute;
            std::vector<Input> in;
            for (int i = 0; i < 40; ++i)
                in.push_back({i * second, "k" + std::to_string(i % 3), i * second, double(i)});
            // Silence (ticks), then a late and a returning device.
            const int64_t quiet_end = 200 * second;
            Driver whole(spec);
            whole.feed_all(in);
            for (int64_t now = 40 * second; now <= quiet_end; now += second)
                whole.tick(now);
            whole.feed({quiet_end + 1, "k1", 10 * second, 100});
            whole.feed({quiet_end + 2, "k2", quiet_end, 7});
            const int64_t end = quiet_end + 3'000'000'000;
            whole.tick(end);
            for (int64_t cut = 38 * second; cut <= 50 * second; cut += second) {
                Driver first(spec);
                first.feed_all(in);
                for (int64_t now = 40 * second; now <= cut; now += second)
                    first.tick(now);
                MapWriter store;
                first.engine->checkpoint(store);
                Driver resumed = restored(spec, store, first.order);
                for (int64_t now = cut + second; now <= quiet_end; now += second)
                    resumed.tick(now);
                resumed.feed({quiet_end + 1, "k1", 10 * second, 100});
                resumed.feed({quiet_end + 2, "k2", quiet_end, 7});
                resumed.tick(end);
                INFO("scope " << int(scope) << " type " << int(type) << " cut " << cut);
                CHECK(first.rec.text() + resumed.rec.text() == whole.rec.text());
            }
        }
    }
}

TEST_CASE("scope partition: a returning device is judged the same with or without a restart") {
    // A session that grew leaves its timer entry early; the partition goes idle and its idle
    // deadline follows that early entry. A restored engine schedules from the exact due time.
    // The returning event must be judged against the same watermark either way.
    auto spec = make_spec(WindowType::session, 10 * second);
    spec.watermark.scope = core::WatermarkScope::partition;
    spec.watermark.idle_timeout_ms = 5 * second;
    const int64_t t0 = 100 * second;
    const std::vector<Input> before = {{t0, "a", t0, 1, "P"},
                                       {t0 + 1 * second, "a", t0 + 8 * second, 2, "P"}};
    // Another key of the same device: [t0 - 1s, t0 + 9s) is too late once the watermark
    // passes t0 + 9s. The early deadline (t0 + 8s) raised it to t0 + 10s in the running
    // engine; by t0 + 12s it is t0 + 14s either way.
    const Input returning{t0 + 12 * second, "b", t0 - 1 * second, 3, "P"};
    Driver whole(spec);
    whole.feed_all(before);
    whole.tick(t0 + 7 * second);
    whole.tick(t0 + 8 * second);
    whole.feed(returning);
    whole.tick(t0 + 100 * second);

    Driver first(spec);
    first.feed_all(before);
    first.tick(t0 + 7 * second);
    MapWriter store;
    first.engine->checkpoint(store);
    Driver resumed = restored(spec, store, first.order);
    resumed.tick(t0 + 8 * second);
    resumed.feed(returning);
    resumed.tick(t0 + 100 * second);
    CHECK(first.rec.text() + resumed.rec.text() == whole.rec.text());
    CHECK(whole.stats().too_late == resumed.stats().too_late);
}

TEST_CASE("no session ends before an event it holds, and sessions never overlap") {
    auto spec = make_spec(WindowType::session, 10 * second, 20 * second);
    spec.watermark.delay_ms = 100 * second;  // everything stays open until finish()
    Driver d(spec);
    for (int64_t t : {10, 18, 25, 5, 26})
        d.feed({100 * second, "a", t * second, double(t)});
    d.finish();
    const auto finals = d.rec.of_kind(EmissionKind::final_result);
    REQUIRE(finals.size() == 2);
    // [5, 10) is cut where the session of 10..26 starts: 5 cannot join it (21 s > max 20 s).
    CHECK(finals[0]->start_ms == 5 * second);
    CHECK(finals[0]->end_ms == 10 * second);
    CHECK(finals[0]->values[0] == 1.0);
    CHECK(finals[1]->start_ms == 10 * second);
    CHECK(finals[1]->end_ms == 30 * second);
    CHECK(finals[1]->values[0] == 4.0);  // 10, 18, 25 and 26
}

TEST_CASE("max_keys bounds live keys and partitions, not keys ever seen") {
    auto spec = make_spec(WindowType::tumbling, minute);
    spec.limits.keys_max = 5;
    spec.watermark.idle_timeout_ms = 10 * second;
    Driver d(spec);
    // 50 devices, five at a time, each active for two minutes then silent for good.
    int64_t now = 0;
    for (int group = 0; group < 10; ++group) {
        for (int64_t s = 0; s < 120; s += 5) {
            now += 5 * second;
            for (int i = 0; i < 5; ++i)
                d.feed({now, "dev-" + std::to_string(group * 5 + i), now, 1});
        }
        d.tick(now + 2 * minute);  // the group falls silent: idle, its windows close
        now += 2 * minute;
        CHECK(d.stats().keys <= 5);
        CHECK(d.stats().partitions_active + d.stats().partitions_idle <= 5);
    }
    CHECK(d.stats().keys_refused == 0);
    CHECK(d.stats().partitions_forgotten >= 45);
}

TEST_CASE("an event refused by max_keys goes to side output where too-late events do") {
    auto spec = make_spec(WindowType::tumbling, minute);
    spec.limits.keys_max = 1;
    spec.late.too_late = core::TooLate::side_output;
    Driver d(spec);
    d.feed({1'000, "a", 1'000, 1});
    d.feed({1'000, "b", 1'000, 1});
    CHECK(d.stats().keys_refused == 1);
    REQUIRE(d.rec.side.size() == 1);
    CHECK(d.rec.side[0].key == "b");
    CHECK(d.rec.side[0].reason.find("max_keys") != std::string::npos);
}

TEST_CASE("a too-late event from a new partition counts as too late, not as refused") {
    auto spec = make_spec(WindowType::tumbling, minute);
    spec.limits.keys_max = 1;
    Driver d(spec);
    d.feed({1'000, "a", 10 * minute, 1});  // watermark 10 min
    d.feed({2'000, "b", 1 * minute, 1});   // its window ended long ago
    CHECK(d.stats().too_late == 1);
    CHECK(d.stats().keys_refused == 0);
}

TEST_CASE("a device back after being forgotten never reuses an id for other values") {
    // Scope partition: the device's partition is forgotten once its windows passed lateness;
    // when it returns with an old event, that window's id is taken: it must be too late.
    auto spec = make_spec(WindowType::tumbling, minute);
    spec.watermark.scope = core::WatermarkScope::partition;
    spec.watermark.idle_timeout_ms = 10 * second;
    spec.late.allowed_lateness_ms = minute;
    Driver d(spec);
    d.feed({0, "dev", 1'000, 1});
    d.feed({1'000, "dev", 2'000, 1});
    for (int64_t now = 2 * second; now <= 10 * minute; now += second)
        d.tick(now);
    REQUIRE(d.stats().partitions_forgotten == 1);
    REQUIRE(d.rec.of_kind(EmissionKind::final_result).size() == 1);
    d.feed({10 * minute + 1, "dev", 3'000, 5});
    d.finish();
    CHECK(d.rec.of_kind(EmissionKind::final_result).size() == 1);
    CHECK(d.stats().too_late == 1);
}

TEST_CASE("the window budget counts the fired record a window keeps for its lateness") {
    auto spec = make_spec(WindowType::tumbling, minute);
    spec.late.allowed_lateness_ms = 10 * minute;
    spec.watermark.delay_ms = 0;
    const uint64_t per_key = core::windows_per_key_estimate(spec);
    // Steady state: one key, an event a second for an hour; count what the engine keeps.
    Driver d(spec);
    uint64_t most = 0;
    for (int64_t t = 0; t < 60 * minute; t += second) {
        d.feed({t, "a", t, 1});
        most = std::max(most, d.stats().open_windows);
    }
    CHECK(most <= per_key);
}

TEST_CASE("a quantile never lies outside the window's values") {
    auto spec = make_spec(WindowType::tumbling, minute);
    spec.aggregates = {{"p95", core::AggregateFn::quantile, 0, 0.95},
                       {"p0", core::AggregateFn::quantile, 0, 0.0}};
    for (const std::vector<double>& values :
         std::vector<std::vector<double>>{{30}, {-30}, {200}, {10, 20}, {0.001, 1e6}}) {
        Driver d(spec);
        for (double v : values)
            d.feed({1'000, "a", 1'000, v});
        d.finish();
        REQUIRE(d.rec.out.size() == 1);
        const double low = *std::min_element(values.begin(), values.end());
        const double high = *std::max_element(values.begin(), values.end());
        for (const auto& v : d.rec.out[0].e.values) {
            REQUIRE(v);
            CHECK(*v >= low);
            CHECK(*v <= high);
        }
        if (values.size() == 1) CHECK(*d.rec.out[0].e.values[0] == values[0]);
    }
}

TEST_CASE("hopping: an event too late for one window but on time for another is counted") {
    auto spec = make_spec(WindowType::hopping, 10 * second, 5 * second);
    Driver d(spec);
    d.feed({0, "a", 1'000, 1});
    d.feed({1'000, "a", 11'000, 1});  // watermark 11s: [0,10) fired
    d.feed({2'000, "a", 7'000, 1});   // in [0,10) (past) and [5,15) (open)
    CHECK(d.stats().too_late == 0);
    CHECK(d.stats().too_late_partial == 1);
    d.finish();
    bool counted = false;
    for (const auto* e : d.rec.of_kind(EmissionKind::final_result))
        if (e->start_ms == 5'000) counted = *e->values[0] == 2.0;  // 7s and 11s
    CHECK(counted);
}

TEST_CASE("composite keys keep partition and key apart when a part holds '|'") {
    auto spec = make_spec(WindowType::tumbling, minute);
    spec.watermark.scope = core::WatermarkScope::partition;
    Driver d(spec);
    d.feed({1'000, "c", 1'000, 1, "a|b"});
    d.feed({1'000, "b|c", 1'000, 1, "a"});
    d.finish();
    const auto finals = d.rec.of_kind(EmissionKind::final_result);
    REQUIRE(finals.size() == 2);
    CHECK(finals[0]->key != finals[1]->key);
}

TEST_CASE("state written under another watermark scope is refused on restore") {
    auto spec = make_spec(WindowType::tumbling, minute);
    Driver a(spec);
    a.feed({1'000, "a", 1'000, 1});
    MapWriter w;
    a.engine->checkpoint(w);
    spec.watermark.scope = core::WatermarkScope::partition;
    Driver b(spec);
    for (auto& [k, v] : w.data)
        REQUIRE(b.engine->restore_entry(k, v));
    auto done = b.engine->restore_finish();
    REQUIRE_FALSE(done);
    CHECK(done.error().message.find("scope") != std::string::npos);
}

TEST_CASE("a checkpoint whose transaction failed is written again by the next one") {
    // Windows fire and purge between the failed checkpoint and the next: the store must end up
    // as if every checkpoint had committed, so a restore continues exactly.
    auto spec = make_spec(WindowType::session, 10 * second, minute);
    spec.late.allowed_lateness_ms = 5 * second;
    std::vector<Input> in;
    for (int i = 0; i < 300; ++i)
        in.push_back(
            {i * 1'000, "k" + std::to_string(i % 7), i * 1'000 - (i % 5) * 3'000, double(i)});
    const int64_t end = in.back().ingest_ms + 3'000'000'000;
    Driver whole(spec);
    whole.feed_all(in);
    whole.tick(end);

    Driver first(spec);
    MapWriter store;
    for (size_t i = 0; i < 200; ++i) {
        first.feed(in[i]);
        if (i % 40 == 39) {
            if (i == 119) {
                MapWriter lost;  // the transaction that did not commit
                first.engine->checkpoint(lost);
                first.engine->checkpoint_failed();
            } else {
                first.engine->checkpoint(store);
            }
        }
    }
    Driver resumed = restored(spec, store, first.order);
    for (size_t i = 200; i < in.size(); ++i)
        resumed.feed(in[i]);
    resumed.tick(end);
    CHECK(first.rec.text() + resumed.rec.text() == whole.rec.text());
}

TEST_CASE("a silence of ours (resume) does not make the broker's backlog late") {
    // Ingest was paused for ten minutes while devices kept sending; the broker kept their
    // messages. When ingest listens again, the engine is told so before the backlog arrives.
    auto spec = make_spec(WindowType::tumbling, minute);
    spec.watermark.idle_timeout_ms = 5 * second;
    spec.watermark.delay_ms = second;
    std::vector<Input> live;
    for (int64_t s = 0; s < 60; ++s)
        for (const char* k : {"a", "b"})
            live.push_back({s * second, k, s * second, 1});
    const int64_t back = 660 * second;  // ingest time when the backlog arrives
    std::vector<Input> backlog;
    for (int64_t s = 60; s < 660; ++s)
        for (const char* k : {"a", "b"})
            backlog.push_back({back + s, k, s * second, 1});
    auto run = [&](bool resume, int64_t cut) {
        Driver d(spec);
        d.feed_all(live);
        MapWriter store;
        std::string before;
        if (resume) d.engine->resume(back);
        if (cut >= 0) {
            d.engine->checkpoint(store);
            before = d.rec.text();
            Driver r = restored(spec, store, d.order);
            r.feed_all(backlog);
            r.tick(back + 3'000'000'000);
            return std::make_pair(before + r.rec.text(), r.stats().too_late);
        }
        d.feed_all(backlog);
        d.tick(back + 3'000'000'000);
        return std::make_pair(d.rec.text(), d.stats().too_late);
    };
    const auto [text, too_late] = run(true, -1);
    CHECK(too_late == 0);
    // 11 one-minute windows per device, each complete.
    CHECK(std::count(text.begin(), text.end(), '\n') == 22);
    CHECK(text.find("final a [600000,660000) rev 0 idle") != std::string::npos);
    CHECK(run(true, 0) == run(true, -1));  // a restart right after the resumption
    CHECK(run(false, -1).second > 0);      // without it, the pause made the backlog late
}

TEST_CASE("repeated resumptions keep what the idle advance had reached") {
    // Restarts every few seconds while every partition is idle: each downtime is left out, the
    // listening time in between still counts.
    auto spec = make_spec(WindowType::tumbling, minute);
    spec.watermark.idle_timeout_ms = 3 * second;
    Driver d(spec);
    d.feed({0, "a", 0, 1});
    int64_t now = 0;
    for (int restart = 0; restart < 20; ++restart) {
        for (int s = 0; s < 4; ++s)
            d.tick(now += second);
        now += second;  // down for a second
        d.engine->resume(now);
    }
    // 100 s of ingest time, 20 of them ours; idle from 3 s on: 100 - 20 - 3 = 77 s of advance.
    d.tick(now += second);
    CHECK(d.stats().watermark_ms >= 70 * second);
    CHECK(d.rec.of_kind(EmissionKind::final_result).size() == 1);
}

TEST_CASE("resumptions after restores keep what the idle advance had reached") {
    auto spec = make_spec(WindowType::session, 30 * second);
    spec.watermark.idle_timeout_ms = 3 * second;
    spec.watermark.delay_ms = 5 * second;
    spec.late.allowed_lateness_ms = 30 * minute;
    spec.late.corrections = core::Corrections::retract;
    auto d = std::make_unique<Driver>(spec);
    int64_t now = 0;
    for (int s = 0; s < 10; ++s)
        for (const char* k : {"d-1", "d-2"}) {
            now += 100;
            d->feed({now, k, now, 1});
        }
    std::string out;
    MapWriter store;  // the store outlives the processes
    for (int restart = 0; restart < 15; ++restart) {
        for (int s = 0; s < 5; ++s)
            d->tick(now += second);
        d->engine->checkpoint(store);
        out += d->rec.text();
        now += 1500;  // down
        auto r = std::make_unique<Driver>(restored(spec, store, d->order));
        d = std::move(r);
        d->engine->resume(now);
    }
    d->tick(now += second);
    out += d->rec.text();
    INFO(out);
    CHECK(std::count(out.begin(), out.end(), '\n') == 2);
}

TEST_CASE("a new partition whose first event is refused for open_windows_max stays live") {
    // The refused event's key is created and removed again before its partition is touched:
    // the partition, new and so idle without keys, was forgotten mid-event and then made
    // active, so it stayed on the dirty list and in the idle queue after going back to the
    // pool (scope partition: its watermark record freed, dereferenced when it went idle;
    // reused while still listed, then released twice by a checkpoint). It is to stay live
    // until it goes idle, then be forgotten once.
    for (const auto scope : {core::WatermarkScope::partition, core::WatermarkScope::global}) {
        INFO((scope == core::WatermarkScope::partition ? "scope partition" : "scope global"));
        auto spec = make_spec(WindowType::tumbling, 10 * second);
        spec.watermark.scope = scope;
        spec.watermark.idle_timeout_ms = 5 * second;
        spec.limits.open_windows_max = 1;
        Driver d(spec);
        MapWriter store;
        d.feed({0, "a", 0, 1});
        d.engine->checkpoint(store);  // from here on, changes are tracked
        d.feed({1 * second, "b", 1 * second, 2});
        CHECK(d.stats().windows_refused == 1);
        CHECK(d.stats().partitions_active == 2);
        CHECK(d.stats().partitions_forgotten == 0);
        d.tick(minute);  // all idle: a's window closes, and a and b (no key) are forgotten
        CHECK(d.stats().partitions_active == 0);
        CHECK(d.stats().partitions_forgotten == 2);
        CHECK(d.rec.of_kind(EmissionKind::final_result).size() == 1);
        d.engine->resume(minute + second);
        d.engine->checkpoint(store);
        // What the store holds restores, and the partitions forgotten are not in it.
        Driver r = restored(spec, store, d.order);
        CHECK(r.stats().partitions_idle + r.stats().partitions_active == 0);
        r.engine->resume(minute + 2 * second);
        r.feed({minute + 3 * second, "c", minute + 3 * second, 3});
        CHECK(r.stats().partitions_active == 1);
    }
}

TEST_CASE("a checkpoint erases only what the store holds, and the store stays exact") {
    // A version backfilling history moves through hours of event time between two checkpoints:
    // nearly every window it creates is purged before the next one, and erasing each of them
    // (never written) made that checkpoint the live p99 during a backfill (issue 13). Keys
    // come and go too (transient devices), and so do their partitions.
    struct Case {
        const char* name;
        core::PipelineSpec spec;
    };
    std::vector<Case> cases = {
        {"tumbling", make_spec(WindowType::tumbling, minute)},
        {"hopping", make_spec(WindowType::hopping, 5 * minute, minute)},
        {"session", make_spec(WindowType::session, 30 * second, 10 * minute)}};
    for (auto& c : cases) {
        c.spec.late.allowed_lateness_ms = 2 * minute;
        c.spec.watermark.idle_timeout_ms = minute;
    }
    cases.push_back(cases[0]);
    cases.back().name = "tumbling, scope partition";
    cases.back().spec.watermark.scope = core::WatermarkScope::partition;
    // Three hours at one record a second: 8 steady devices, and one transient device per
    // 10 minutes that sends for 3 of them; some records up to 6 s out of order.
    std::vector<Input> in;
    for (int i = 0; i < 3 * 3600; ++i) {
        const int64_t now = int64_t(i) * second;
        const std::string key = i % 3 == 2 && (i % 600) < 180 ? "t" + std::to_string(i / 600)
                                                              : "k" + std::to_string(i % 8);
        in.push_back({now, key, now - (i % 4) * 2 * second, double(i % 97)});
    }
    const std::vector<size_t> checkpoints = {50, 3600, 3601, 3700, 9000};
    const int64_t end = in.back().ingest_ms + 3'000'000'000;
    for (const Case& c : cases) {
        INFO(c.name);
        Driver whole(c.spec);
        whole.feed_all(in);
        whole.tick(end);

        Driver first(c.spec);
        MapWriter store;
        for (size_t i = 0; i <= checkpoints.back(); ++i) {
            first.feed(in[i]);
            if (std::find(checkpoints.begin(), checkpoints.end(), i) == checkpoints.end()) continue;
            first.engine->checkpoint(store);
            INFO("checkpoint after record " << i);
            CHECK(store.absent_erases == 0);
        }
        CHECK(store.erases > 0);  // windows and keys that were stored did go
        // The store holds exactly what a first checkpoint at that point writes.
        Driver once(c.spec);
        for (size_t i = 0; i <= checkpoints.back(); ++i)
            once.feed(in[i]);
        MapWriter full;
        once.engine->checkpoint(full);
        CHECK(store.data == full.data);
        // And a restore from it continues exactly.
        Driver resumed = restored(c.spec, store, first.order);
        for (size_t i = checkpoints.back() + 1; i < in.size(); ++i)
            resumed.feed(in[i]);
        resumed.tick(end);
        CHECK(first.rec.text() + resumed.rec.text() == whole.rec.text());
        CHECK(whole.rec.out.size() > 100);
    }
}

TEST_CASE("a key created in the object of a key removed since the last checkpoint is written") {
    // Changed keys wait for the next checkpoint on a list of their objects, each object once: a
    // backfill creates and removes a key for nearly every window between two checkpoints, and a
    // list of names grew by one for each (issue 31). A removed key's object stays listed, and
    // the next key created in it must reach the store all the same; so must one created after
    // a first checkpoint that failed, with records processed between it and its failure.
    auto spec = make_spec(WindowType::tumbling, minute);
    spec.late.allowed_lateness_ms = 2 * minute;
    spec.watermark.idle_timeout_ms = minute;
    // Two hours at one record a second: 8 steady devices and one transient device per 10
    // minutes that sends for 3 of them (as in the test above), and from 1 h on a second
    // transient device at a time, whose keys take objects freed long before.
    std::vector<Input> in;
    for (int i = 0; i < 2 * 3600; ++i) {
        const int64_t now = int64_t(i) * second;
        std::string key = "k" + std::to_string(i % 8);
        if (i % 3 == 2 && (i % 600) < 180) key = "t" + std::to_string(i / 600);
        if (i >= 3600 && i % 5 == 4 && (i % 600) >= 300 && (i % 600) < 480)
            key = "u" + std::to_string(i / 600);
        in.push_back({now, key, now, double(i % 97)});
    }
    struct Plan {
        const char* name;
        size_t lost_at;           // a first checkpoint here does not commit (SIZE_MAX: none)
        size_t failed_at;         // and is reported failed here
        size_t checkpoints_from;  // and then one every `every` records
        size_t every;
    };
    // Every 100 records, a key takes an object freed and unlisted checkpoints before; every
    // 700, one freed since the last checkpoint, still listed. With the failure at 300, the
    // first checkpoint after it (1100) finds a listed object free: left marked but not listed,
    // the key that takes it later is never written (tried).
    const std::vector<Plan> plans = {
        {"incremental checkpoints every 100 records", SIZE_MAX, SIZE_MAX, 90, 100},
        {"incremental checkpoints every 700 records", SIZE_MAX, SIZE_MAX, 90, 700},
        {"after a first checkpoint that failed", 90, 300, 1100, 100}};
    for (const Plan& plan : plans) {
        std::vector<size_t> checkpoints;
        for (size_t i = plan.checkpoints_from; i < in.size(); i += plan.every)
            checkpoints.push_back(i);
        INFO(plan.name);
        Driver first(spec);
        MapWriter store;
        for (size_t i = 0; i <= checkpoints.back(); ++i) {
            first.feed(in[i]);
            if (i == plan.lost_at) {
                MapWriter lost;  // the transaction that did not commit
                first.engine->checkpoint(lost);
            } else if (i == plan.failed_at) {
                first.engine->checkpoint_failed();
            } else if (std::find(checkpoints.begin(), checkpoints.end(), i) != checkpoints.end()) {
                first.engine->checkpoint(store);
                INFO("checkpoint after record " << i);
                // The store holds exactly what a first checkpoint at that point writes.
                Driver once(spec);
                for (size_t j = 0; j <= i; ++j)
                    once.feed(in[j]);
                MapWriter full;
                once.engine->checkpoint(full);
                CHECK(store.data == full.data);
                CHECK(store.absent_erases == 0);
            }
        }
    }
}
