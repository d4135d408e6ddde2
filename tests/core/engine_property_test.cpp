// Properties over seeded random streams (issue 2): ordering, determinism, slices vs naive
// hopping, session order independence, retract arithmetic, snapshot/restore equivalence.
#include <algorithm>
#include <catch2/catch.hpp>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <tuple>

#include "tests/core/engine_harness.h"

using namespace tidemark;
using namespace tidemark::test;
using core::EmissionKind;
using core::WindowType;

namespace {

constexpr int64_t second = 1'000;

// An in-order stream: `keys` devices, one event each per `step_ms`, ingest = event time.
std::vector<Input> ordered_stream(uint32_t seed, int keys, int events, int64_t step_ms) {
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int> value(0, 100);
    std::vector<Input> out;
    int64_t t = 1'000'000;
    for (int i = 0; i < events; ++i) {
        t += step_ms;
        const int k = static_cast<int>(rng() % static_cast<uint64_t>(keys));
        out.push_back({t, "k" + std::to_string(k), t, static_cast<double>(value(rng))});
    }
    return out;
}

// Shuffles event times within `delay_ms` while ingest time stays in order: every event's
// displacement stays below the delay, so nothing is late.
std::vector<Input> shuffled_within(std::vector<Input> in, int64_t delay_ms, uint32_t seed) {
    std::mt19937_64 rng(seed);
    // Sort by a jittered key: each event moves at most `delay_ms / 2` earlier or later.
    std::vector<std::pair<int64_t, Input>> keyed;
    std::uniform_int_distribution<int64_t> jitter(0, delay_ms / 2 - 1);
    for (auto& i : in)
        keyed.push_back({i.event_ms + jitter(rng), i});
    std::stable_sort(keyed.begin(), keyed.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<Input> out;
    int64_t ingest = 0;
    for (auto& [k, i] : keyed) {
        ingest = std::max(ingest, k);
        i.ingest_ms = ingest;
        out.push_back(i);
    }
    return out;
}

std::vector<std::string> sorted_finals(const Recorder& r) {
    std::vector<std::string> out;
    for (const auto& o : r.out) {
        if (o.e.kind != EmissionKind::final_result) continue;
        std::string s =
            o.e.key + " " + std::to_string(o.e.start_ms) + " " + std::to_string(o.e.end_ms);
        for (const auto& v : o.e.values)
            s += " " + format_value(v);
        out.push_back(s);
    }
    std::sort(out.begin(), out.end());
    return out;
}

core::PipelineSpec with_delay(core::PipelineSpec s, int64_t delay_ms) {
    s.watermark.delay_ms = delay_ms;
    return s;
}

}  // namespace

TEST_CASE("property 1: events shuffled within the watermark delay give the same finals") {
    for (uint32_t seed = 1; seed <= 20; ++seed) {
        const auto sorted = ordered_stream(seed, 50, 5'000, 97);
        const auto shuffled = shuffled_within(sorted, 10 * second, seed * 7);
        for (auto type : {WindowType::tumbling, WindowType::hopping, WindowType::session}) {
            auto spec = type == WindowType::hopping   ? make_spec(type, 60 * second, 10 * second)
                        : type == WindowType::session ? make_spec(type, 3 * second)
                                                      : make_spec(type, 60 * second);
            spec = with_delay(spec, 10 * second);
            Driver a(spec), b(spec);
            a.feed_all(sorted);
            b.feed_all(shuffled);
            a.finish();
            b.finish();
            INFO("seed " << seed << " type " << static_cast<int>(type));
            CHECK(b.stats().too_late == 0);
            CHECK(b.stats().late_updated == 0);
            CHECK(sorted_finals(a.rec) == sorted_finals(b.rec));
            CHECK_FALSE(sorted_finals(a.rec).empty());
        }
    }
}

TEST_CASE("property 2: the same input twice gives byte-identical emissions") {
    for (uint32_t seed = 1; seed <= 10; ++seed) {
        auto in = shuffled_within(ordered_stream(seed, 30, 3'000, 50), 20 * second, seed);
        // A late minority, past the delay.
        std::mt19937_64 rng(seed);
        for (auto& i : in)
            if (rng() % 20 == 0) i.event_ms -= 30 * second;
        auto spec =
            with_delay(make_spec(WindowType::hopping, 30 * second, 10 * second), 5 * second);
        spec.late.allowed_lateness_ms = 20 * second;
        spec.late.corrections = core::Corrections::retract;
        spec.late.too_late = core::TooLate::side_output;
        spec.watermark.idle_timeout_ms = 5 * second;
        Driver a(spec), b(spec);
        a.feed_all(in);
        b.feed_all(in);
        a.finish();
        b.finish();
        CHECK(a.rec.text() == b.rec.text());
        CHECK(a.rec.side.size() == b.rec.side.size());
        CHECK(a.stats().late_updated > 0);
    }
}

TEST_CASE("property 3: hopping via slices equals a naive per-window computation") {
    struct Acc {
        double n = 0, sum = 0, max = -1e300;
    };
    for (uint32_t seed = 1; seed <= 10; ++seed) {
        const int64_t size = 60 * second, advance = seed % 2 ? 10 * second : 25 * second;
        const auto in = ordered_stream(seed, 20, 3'000, 113);
        Driver d(make_spec(WindowType::hopping, size, advance));
        d.feed_all(in);
        d.finish();
        // Naive: every window of the grid, for every event, one update each.
        std::map<std::tuple<std::string, int64_t>, Acc> naive;
        for (const auto& i : in) {
            const int64_t last = (i.event_ms / advance) * advance;
            for (int64_t ws = last; ws > i.event_ms - size; ws -= advance) {
                Acc& a = naive[{i.key, ws}];
                a.n += 1;
                a.sum += i.value;
                a.max = std::max(a.max, i.value);
            }
        }
        std::vector<std::string> expected;
        for (const auto& [k, a] : naive) {
            expected.push_back(std::get<0>(k) + " " + std::to_string(std::get<1>(k)) + " " +
                               std::to_string(std::get<1>(k) + size) + " " + format_value(a.n) +
                               " " + format_value(a.sum) + " " + format_value(a.max));
        }
        std::sort(expected.begin(), expected.end());
        auto got = sorted_finals(d.rec);
        got.erase(std::remove_if(got.begin(), got.end(),
                                 [](const std::string& s) { return s.rfind("zz-closer", 0) == 0; }),
                  got.end());
        INFO("seed " << seed);
        for (size_t x = 0; x < std::min(got.size(), expected.size()); ++x)
            if (got[x] != expected[x]) {
                INFO("first difference: got " << got[x] << " expected " << expected[x]);
                CHECK(false);
                break;
            }
        CHECK(got.size() == expected.size());
    }
}

TEST_CASE("property 4: session results do not depend on arrival order") {
    for (uint32_t seed = 1; seed <= 20; ++seed) {
        // Bursty: sessions form and merge as out-of-order events fill the gaps.
        std::mt19937_64 rng(seed);
        std::vector<Input> sorted;
        int64_t t = 1'000'000;
        for (int i = 0; i < 3'000; ++i) {
            t += (rng() % 10 == 0) ? 5'000 + static_cast<int64_t>(rng() % 3'000)
                                   : static_cast<int64_t>(rng() % 400);
            sorted.push_back(
                {t, "k" + std::to_string(rng() % 8), t, static_cast<double>(rng() % 50)});
        }
        const auto shuffled = shuffled_within(sorted, 8 * second, seed + 100);
        auto spec = with_delay(make_spec(WindowType::session, 2 * second), 8 * second);
        Driver a(spec), b(spec);
        a.feed_all(sorted);
        b.feed_all(shuffled);
        a.finish();
        b.finish();
        INFO("seed " << seed);
        CHECK(sorted_finals(a.rec) == sorted_finals(b.rec));
        CHECK(b.stats().too_late == 0);
    }
}

TEST_CASE("property 5: in retract mode, finals + updates - retracts equals the truth") {
    for (auto type : {WindowType::tumbling, WindowType::hopping, WindowType::session}) {
        for (uint32_t seed = 1; seed <= 10; ++seed) {
            std::mt19937_64 rng(seed);
            auto in = ordered_stream(seed, 10, 3'000, 200);
            // A fifth of the events arrive late, but inside the allowed lateness.
            for (auto& i : in)
                if (rng() % 5 == 0) i.event_ms -= static_cast<int64_t>(rng() % 50'000);
            auto spec = type == WindowType::hopping   ? make_spec(type, 30 * second, 10 * second)
                        : type == WindowType::session ? make_spec(type, 2 * second)
                                                      : make_spec(type, 30 * second);
            spec.late.allowed_lateness_ms = 10 * 60 * second;
            spec.late.corrections = core::Corrections::retract;
            spec.watermark.idle_timeout_ms = 60 * second;
            Driver d(spec);
            d.feed_all(in);
            d.tick(in.back().ingest_ms + 500'000'000);  // every partition idle: all closes
            REQUIRE(d.stats().too_late == 0);
            CHECK(d.stats().late_updated > 0);
            double n = 0, sum = 0;
            for (const auto& o : d.rec.out) {
                if (o.e.key == "zz") continue;
                const double sign = o.e.kind == EmissionKind::retract ? -1 : 1;
                n += sign * *o.e.values[0];
                sum += sign * *o.e.values[1];
            }
            // Truth: every event counted once per window that holds it.
            const double per_event = type == WindowType::hopping ? 3 : 1;
            double truth_sum = 0;
            for (const auto& i : in)
                truth_sum += i.value;
            INFO("type " << static_cast<int>(type) << " seed " << seed);
            CHECK(n == per_event * static_cast<double>(in.size()));
            CHECK(sum == per_event * truth_sum);
            if (type == WindowType::session) CHECK(d.stats().emitted_retract > 0);
        }
    }
}

TEST_CASE("property 6: restoring a snapshot and feeding the rest equals the uninterrupted run") {
    for (auto type : {WindowType::tumbling, WindowType::hopping, WindowType::session}) {
        for (auto scope : {core::WatermarkScope::global, core::WatermarkScope::partition}) {
            for (uint32_t seed = 1; seed <= 6; ++seed) {
                std::mt19937_64 rng(seed);
                auto in = shuffled_within(ordered_stream(seed, 40, 4'000, 150), 6 * second, seed);
                for (auto& i : in) {
                    if (rng() % 15 == 0) i.event_ms -= static_cast<int64_t>(rng() % 120'000);
                    i.partition = "p" + std::to_string(std::hash<std::string>{}(i.key) % 7);
                }
                auto spec = type == WindowType::hopping ? make_spec(type, 30 * second, 10 * second)
                            : type == WindowType::session ? make_spec(type, 2 * second)
                                                          : make_spec(type, 20 * second);
                spec.watermark.delay_ms = 3 * second;
                spec.watermark.scope = scope;
                spec.watermark.idle_timeout_ms = 20 * second;
                spec.late.allowed_lateness_ms = 60 * second;
                spec.late.corrections =
                    seed % 2 ? core::Corrections::retract : core::Corrections::upsert;
                spec.late.too_late = core::TooLate::side_output;
                // A pause in the middle lets partitions go idle.
                for (size_t i = in.size() / 3; i < in.size(); ++i)
                    in[i].ingest_ms += 100 * second;

                Driver whole(spec);
                whole.feed_all(in);
                whole.finish();

                // Checkpoint every few hundred records (incrementally); restart from the last.
                Driver part(spec);
                MapWriter store;
                const size_t cut = in.size() / 2 + seed * 37;
                size_t i = 0;
                for (; i < cut; ++i) {
                    part.feed(in[i]);
                    if (i % 250 == 0) part.engine->checkpoint(store);
                }
                part.engine->checkpoint(store);
                Driver resumed(spec);
                resumed.order = part.order;
                for (const auto& [k, v] : store.data)
                    REQUIRE(resumed.engine->restore_entry(k, v));
                REQUIRE(resumed.engine->restore_finish());
                for (; i < in.size(); ++i)
                    resumed.feed(in[i]);
                resumed.finish();

                // Two restarts in a row from the same store: what the first resumed run purged or
                // merged must be erased from the store, or the second restart brings it back.
                Driver first(spec);
                MapWriter chained;
                const size_t cut1 = in.size() / 3, cut2 = 2 * in.size() / 3;
                size_t j = 0;
                for (; j < cut1; ++j) {
                    first.feed(in[j]);
                    if (j % 250 == 0) first.engine->checkpoint(chained);
                }
                first.engine->checkpoint(chained);
                Driver again(spec);
                again.order = first.order;
                for (const auto& [k, v] : chained.data)
                    REQUIRE(again.engine->restore_entry(k, v));
                REQUIRE(again.engine->restore_finish());
                for (; j < cut2; ++j) {
                    again.feed(in[j]);
                    if (j % 250 == 0) again.engine->checkpoint(chained);
                }
                again.engine->checkpoint(chained);
                Driver third(spec);
                third.order = again.order;
                for (const auto& [k, v] : chained.data)
                    REQUIRE(third.engine->restore_entry(k, v));
                REQUIRE(third.engine->restore_finish());
                for (; j < in.size(); ++j)
                    third.feed(in[j]);
                third.finish();
                CHECK(first.rec.text() + again.rec.text() + third.rec.text() == whole.rec.text());

                std::string joined = part.rec.text() + resumed.rec.text();
                INFO("type " << static_cast<int>(type) << " scope " << static_cast<int>(scope)
                             << " seed " << seed);
                CHECK(joined == whole.rec.text());
                CHECK(resumed.stats().events_in == whole.stats().events_in);
                CHECK(resumed.stats().too_late == whole.stats().too_late);
                CHECK(resumed.stats().emitted_final == whole.stats().emitted_final);
                CHECK(resumed.stats().keys == whole.stats().keys);
                CHECK(resumed.stats().open_windows == whole.stats().open_windows);

                // An incremental checkpoint writes what changed, not everything.
                MapWriter full;
                resumed.engine->checkpoint(full);  // what changed since the restore
                const size_t all = full.puts;
                resumed.feed(
                    {in.back().ingest_ms + 1'000'001, "k1", in.back().ingest_ms + 1'000'001, 1});
                MapWriter delta;
                resumed.engine->checkpoint(delta);
                CHECK(delta.puts < std::max<size_t>(all, 8));
            }
        }
    }
}

TEST_CASE("property 7: the global watermark is the minimum over active partitions, naively") {
    // The engine keeps the minimum lazily (a leaf per partition, paths and idle order brought
    // up to date only when needed); this recomputes it from scratch after every event. Phases
    // alternate random keys, round robin over the stalest (the minimum moves on every event)
    // and a subset only (the others go idle and come back). A heartbeat partition reports
    // far ahead every step, so the pipeline is never all idle.
    for (uint32_t seed : {7u, 8u, 9u}) {
        auto spec = make_spec(WindowType::tumbling, 10 * second);
        spec.watermark.delay_ms = 1'000;
        spec.watermark.idle_timeout_ms = 5 * second;
        Driver d(spec);
        std::mt19937_64 rng(seed);
        struct Seen {
            int64_t max_event_ms;
            int64_t last_ingest_ms;
        };
        std::map<std::string, Seen> seen;
        int64_t ingest = 1'000'000;
        int64_t expected = std::numeric_limits<int64_t>::min();
        const int keys = 300;
        int next_round_robin = 0;
        auto feed = [&](const std::string& key, int64_t event_ms) {
            d.feed({ingest, key, event_ms, 1});
            auto [it, fresh] = seen.try_emplace(key, Seen{event_ms, ingest});
            if (!fresh) {
                it->second.max_event_ms = std::max(it->second.max_event_ms, event_ms);
                it->second.last_ingest_ms = ingest;
            }
            int64_t low = std::numeric_limits<int64_t>::max();
            for (const auto& [name, s] : seen)
                if (s.last_ingest_ms + spec.watermark.idle_timeout_ms > ingest)
                    low = std::min(low, s.max_event_ms - spec.watermark.delay_ms);
            expected = std::max(expected, low);
            REQUIRE(d.stats().watermark_ms == expected);
        };
        for (int step = 0; step < 6'000; ++step) {
            ingest += static_cast<int64_t>(rng() % 40);
            const int phase = (step / 500) % 3;
            int k;
            if (phase == 0) {
                k = static_cast<int>(rng() % keys);
            } else if (phase == 1) {
                k = next_round_robin;
                next_round_robin = (next_round_robin + 1) % keys;
            } else {
                k = static_cast<int>(rng() % 20);
            }
            feed("k" + std::to_string(k), ingest - static_cast<int64_t>(rng() % 3'000));
            feed("heartbeat", ingest + 1'000'000);
        }
    }
}

TEST_CASE("property 8: a partition goes idle exactly an idle timeout after its last record") {
    // The engine renews a partition's place in its idle queue only every half timeout and
    // moves a stale place when it comes due (issue 31); this counts, after every record and
    // tick, the partitions whose last record is less than a timeout old. Partitions report
    // with periods on both sides of the half timeout and of the timeout itself, some in bursts
    // that stop right after a renewal, many at the same instants; both watermark scopes.
    for (const auto scope : {core::WatermarkScope::global, core::WatermarkScope::partition}) {
        for (uint32_t seed : {11u, 12u, 13u}) {
            constexpr int64_t timeout = 4 * second;
            auto spec = make_spec(WindowType::tumbling, 10 * second);
            spec.watermark.delay_ms = 500;
            spec.watermark.idle_timeout_ms = timeout;
            spec.watermark.scope = scope;
            Driver d(spec);
            std::mt19937_64 rng(seed);
            const std::vector<int64_t> periods = {timeout / 4,     timeout / 2 - 1, timeout / 2,
                                                  timeout / 2 + 1, timeout - 1,     timeout,
                                                  timeout + 1,     3 * timeout / 2};
            struct Reporter {
                int64_t period_ms;
                int64_t next_ms;
                int burst_left;  // records before a silence, -1: never silent
            };
            std::vector<Reporter> reporters;
            for (int i = 0; i < 40; ++i)
                reporters.push_back({periods[static_cast<size_t>(i) % periods.size()],
                                     1'000'000 + static_cast<int64_t>(rng() % 8) * 250,
                                     i % 3 == 0 ? static_cast<int>(rng() % 4) + 1 : -1});
            std::map<std::string, int64_t> last_ingest;
            const auto check = [&](int64_t now) {
                uint64_t active = 0;
                for (const auto& [name, last] : last_ingest)
                    if (last + timeout > now) ++active;
                REQUIRE(d.stats().partitions_active == active);
            };
            int64_t now = 1'000'000;
            for (int step = 0; step < 4'000; ++step) {
                // The next instant some reporter is due, or a tick that lands between records.
                int64_t next = std::numeric_limits<int64_t>::max();
                for (const Reporter& r : reporters)
                    next = std::min(next, r.next_ms);
                if (rng() % 4 == 0) next = std::min(next, now + static_cast<int64_t>(rng() % 900));
                now = std::max(now, next);
                d.tick(now);
                check(now);
                for (size_t i = 0; i < reporters.size(); ++i) {
                    Reporter& r = reporters[i];
                    if (r.next_ms != now) continue;
                    const std::string key = "p" + std::to_string(i);
                    d.feed({now, key, now - static_cast<int64_t>(rng() % 300), 1});
                    last_ingest[key] = now;
                    check(now);
                    r.next_ms = now + r.period_ms;
                    if (r.burst_left > 0 && --r.burst_left == 0) {
                        // Silent for a while, then a new burst.
                        r.next_ms += 2 * timeout + static_cast<int64_t>(rng() % 3) * timeout;
                        r.burst_left = static_cast<int>(rng() % 4) + 1;
                    }
                }
            }
        }
    }
}
