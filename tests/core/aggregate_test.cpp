#include "core/aggregate.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

using namespace tidemark::core;

namespace {

constexpr double absent = std::numeric_limits<double>::quiet_NaN();

struct Input {
    double value;
    int64_t event_ms;
    uint64_t order;
};

AggregateSpec spec(std::string name, AggregateFn fn, int field = 0, double q = 0.5) {
    return AggregateSpec{std::move(name), fn, field, q};
}

// Copies and moves of two states (of one set or of two), each way round and onto itself, keep
// what each holds. Returns a's.
AggregateState copied_and_moved(AggregateState a, AggregateState b) {
    const AggregateState a0 = a, b0 = b;
    const AggregateState copy(a);
    CHECK(copy == a0);
    AggregateState c;
    c = b;
    CHECK(c == b0);
    c = a;
    CHECK(c == a0);
    const AggregateState& same = c;
    c = same;
    CHECK(c == a0);
    AggregateState d = std::move(b);
    CHECK(d == b0);
    d = std::move(c);
    CHECK(d == a0);
    return d;
}

// One aggregate of every kind over field 0, plus a count of events.
AggregateSet every_fn() {
    return AggregateSet(
        {spec("events", AggregateFn::count, -1), spec("n", AggregateFn::count),
         spec("sum", AggregateFn::sum), spec("min", AggregateFn::min),
         spec("max", AggregateFn::max), spec("mean", AggregateFn::mean),
         spec("first", AggregateFn::first), spec("last", AggregateFn::last),
         spec("variance", AggregateFn::variance), spec("stddev", AggregateFn::stddev),
         spec("median", AggregateFn::quantile, 0, 0.5)},
        QuantileOptions{});
}
enum Slot { events, n, sum, min, max, mean, first, last, variance, stddev, median };

AggregateState add_all(const AggregateSet& set, const std::vector<Input>& inputs) {
    AggregateState state = set.make();
    for (const Input& in : inputs)
        set.add(state, &in.value, in.event_ms, in.order);
    return state;
}

std::vector<std::optional<double>> results(const AggregateSet& set, const AggregateState& state) {
    std::vector<std::optional<double>> out;
    set.results(state, out);
    REQUIRE(out.size() == set.specs().size());
    return out;
}

}  // namespace

TEST_CASE("aggregate function names round trip; unknown ones list the known", "[aggregate]") {
    for (const char* name : {"count", "sum", "min", "max", "mean", "first", "last", "variance",
                             "stddev", "quantile"}) {
        auto fn = parse_aggregate_fn(name);
        REQUIRE(fn);
        CHECK(aggregate_fn_name(*fn) == name);
    }
    auto bad = parse_aggregate_fn("avg");
    REQUIRE_FALSE(bad);
    CHECK_THAT(bad.error().message, Catch::Contains("\"avg\"") && Catch::Contains("mean") &&
                                        Catch::Contains("quantile"));
}

TEST_CASE("each aggregate on a small hand-computed input", "[aggregate]") {
    const AggregateSet set = every_fn();
    // Arrival order differs from event-time order: first/last go by event time.
    const std::vector<Input> inputs = {
        {3, 2'000, 10}, {1, 1'000, 11}, {4, 5'000, 12}, {1, 3'000, 13}, {5, 4'000, 14}};
    const auto r = results(set, add_all(set, inputs));
    CHECK(r[events] == 5.0);
    CHECK(r[n] == 5.0);
    CHECK(r[sum] == 14.0);
    CHECK(r[min] == 1.0);
    CHECK(r[max] == 5.0);
    CHECK(*r[mean] == Approx(2.8));
    CHECK(r[first] == 1.0);               // event_ms 1000
    CHECK(r[last] == 4.0);                // event_ms 5000
    CHECK(*r[variance] == Approx(2.56));  // population variance
    CHECK(*r[stddev] == Approx(1.6));
    CHECK(*r[median] == Approx(3.0).epsilon(0.01));
}

TEST_CASE("a fresh state: count is 0, everything else has no value", "[aggregate]") {
    const AggregateSet set = every_fn();
    const auto r = results(set, set.make());
    CHECK(r[events] == 0.0);
    CHECK(r[n] == 0.0);
    for (int i = sum; i <= median; ++i)
        CHECK_FALSE(r[static_cast<size_t>(i)].has_value());
}

TEST_CASE("missing (NaN) and infinite fields are skipped", "[aggregate]") {
    const AggregateSet set = every_fn();
    const double inf = std::numeric_limits<double>::infinity();
    AggregateState only_missing =
        add_all(set, {{absent, 1'000, 1}, {inf, 2'000, 2}, {-inf, 3'000, 3}});
    auto r = results(set, only_missing);
    CHECK(r[events] == 3.0);
    CHECK(r[n] == 0.0);
    for (int i = sum; i <= median; ++i)
        CHECK_FALSE(r[static_cast<size_t>(i)].has_value());

    AggregateState some = add_all(
        set,
        {{absent, 500, 1}, {2, 1'000, 2}, {absent, 1'500, 3}, {6, 2'000, 4}, {absent, 9'000, 5}});
    r = results(set, some);
    CHECK(r[events] == 5.0);
    CHECK(r[n] == 2.0);
    CHECK(r[sum] == 8.0);
    CHECK(r[min] == 2.0);
    CHECK(r[max] == 6.0);
    CHECK(r[mean] == 4.0);
    CHECK(r[first] == 2.0);
    CHECK(r[last] == 6.0);
    CHECK(r[variance] == 4.0);
    CHECK(r[stddev] == 2.0);
}

TEST_CASE("a sum of zero is a value, not a missing one", "[aggregate]") {
    const AggregateSet set = every_fn();
    auto r = results(set, add_all(set, {{2, 1, 1}, {-2, 2, 2}}));
    CHECK(r[sum] == 0.0);
    r = results(set, add_all(set, {{-0.0, 1, 1}}));
    REQUIRE(r[sum].has_value());
    CHECK(*r[sum] == 0.0);
}

TEST_CASE("first and last break event-time ties by log order", "[aggregate]") {
    const AggregateSet set = every_fn();
    // Same event time; added in reverse log order.
    const std::vector<Input> inputs = {{30, 1'000, 3}, {20, 1'000, 2}, {10, 1'000, 1}};
    auto r = results(set, add_all(set, inputs));
    CHECK(r[first] == 10.0);
    CHECK(r[last] == 30.0);
    // The same through merges of single-event states, in either direction.
    AggregateState a = add_all(set, {inputs[0]});
    AggregateState b = add_all(set, {inputs[1]});
    AggregateState c = add_all(set, {inputs[2]});
    set.merge(a, b);
    set.merge(a, c);
    set.merge(c, b);
    set.merge(c, add_all(set, {inputs[0]}));
    for (const AggregateState* s : {&a, &c}) {
        r = results(set, *s);
        CHECK(r[first] == 10.0);
        CHECK(r[last] == 30.0);
    }
}

TEST_CASE("min and max of -0 and +0 do not depend on order", "[aggregate]") {
    const AggregateSet set = every_fn();
    for (const auto& inputs : {std::vector<Input>{{0.0, 1, 1}, {-0.0, 2, 2}},
                               std::vector<Input>{{-0.0, 1, 1}, {0.0, 2, 2}}}) {
        const auto r = results(set, add_all(set, inputs));
        CHECK(std::signbit(*r[min]));
        CHECK_FALSE(std::signbit(*r[max]));
    }
}

TEST_CASE("merges in any order equal adding every event to one state", "[aggregate]") {
    const AggregateSet set = every_fn();
    std::mt19937_64 rng(42);
    std::vector<Input> inputs;
    for (uint64_t i = 0; i < 500; ++i) {
        const bool missing = std::bernoulli_distribution(0.1)(rng);
        const double value =
            missing ? absent : double(std::uniform_int_distribution(-1000, 1000)(rng));
        // Few distinct event times, so that first/last ties are common.
        const int64_t event_ms = std::uniform_int_distribution<int64_t>(0, 20)(rng) * 1'000;
        inputs.push_back({value, event_ms, 1'000 + i});
    }
    const AggregateState sequential = add_all(set, inputs);
    const auto expected = results(set, sequential);

    // Split into 6 slices, as the engine's panes would, and merge them in several ways.
    std::vector<AggregateState> slices(6, set.make());
    for (size_t i = 0; i < inputs.size(); ++i) {
        const Input& in = inputs[i];
        set.add(slices[(i * 7 + i / 3) % 6], &in.value, in.event_ms, in.order);
    }
    std::vector<std::vector<size_t>> orders = {
        {0, 1, 2, 3, 4, 5}, {5, 4, 3, 2, 1, 0}, {2, 0, 5, 1, 3, 4}};
    std::vector<AggregateState> merged;
    for (const auto& order : orders) {
        AggregateState into = set.make();
        for (size_t s : order)
            set.merge(into, slices[s]);
        merged.push_back(std::move(into));
    }
    // A tree: (0+1) + ((2+3) + (4+5)).
    AggregateState a = slices[0], b = slices[2], c = slices[4];
    set.merge(a, slices[1]);
    set.merge(b, slices[3]);
    set.merge(c, slices[5]);
    set.merge(b, c);
    set.merge(a, b);
    merged.push_back(std::move(a));

    for (const AggregateState& state : merged) {
        const auto r = results(set, state);
        for (int exact : {events, n, sum, min, max, first, last}) {
            INFO("aggregate " << set.specs()[static_cast<size_t>(exact)].name);
            CHECK(r[static_cast<size_t>(exact)] == expected[static_cast<size_t>(exact)]);
        }
        CHECK(*r[mean] == Approx(*expected[mean]).epsilon(1e-12));
        CHECK(*r[variance] == Approx(*expected[variance]).epsilon(1e-9));
        CHECK(*r[stddev] == Approx(*expected[stddev]).epsilon(1e-9));
        CHECK(state.sketches == sequential.sketches);
    }
}

TEST_CASE("states encode and decode to an equal state", "[aggregate]") {
    const AggregateSet set = every_fn();
    const AggregateState fresh = set.make();
    const AggregateState state =
        add_all(set, {{3, 2'000, 10}, {absent, 1'000, 11}, {-4.5, 5'000, 12}, {1e9, 3'000, 13}});
    for (const AggregateState* original : {&fresh, &state}) {
        std::string encoded;
        set.encode(*original, encoded);
        encoded += "next";
        std::string_view in(encoded);
        AggregateState decoded;
        REQUIRE(set.decode(in, decoded));
        CHECK(in == "next");
        CHECK(decoded == *original);
        CHECK(results(set, decoded) == results(set, *original));
    }

    std::string encoded;
    set.encode(state, encoded);
    for (size_t n = 0; n < encoded.size(); n += 5) {
        std::string_view cut(encoded.data(), n);
        AggregateState damaged;
        CHECK_FALSE(set.decode(cut, damaged));
    }
    // State written under another aggregate list or other sketch parameters is refused.
    const AggregateSet fewer({spec("sum", AggregateFn::sum)}, QuantileOptions{});
    std::string_view in(encoded);
    AggregateState other;
    CHECK_FALSE(fewer.decode(in, other));
    auto specs = set.specs();
    const AggregateSet coarser(specs, QuantileOptions{0.05, 1024});
    in = encoded;
    CHECK_FALSE(coarser.decode(in, other));
}

TEST_CASE("states copy and move between values in place and on the heap", "[aggregate]") {
    const AggregateSet small({spec("n", AggregateFn::count, -1), spec("m", AggregateFn::mean, 0)},
                             QuantileOptions{});
    const AggregateSet large = every_fn();
    AggregateState a = small.make();
    AggregateState b = large.make();
    const double v = 2.5;
    small.add(a, &v, 1, 1);
    large.add(b, &v, 1, 1);
    // Values in place (a) -> on the heap (b) -> in place again.
    const AggregateState d = copied_and_moved(std::move(a), std::move(b));
    std::vector<std::optional<double>> out;
    small.results(d, out);
    CHECK(out == std::vector<std::optional<double>>{1.0, 2.5});
}

TEST_CASE("memory estimates", "[aggregate]") {
    const AggregateSet set = every_fn();
    AggregateState state = set.make();
    CHECK(set.bytes(state) == set.bytes_per_window());
    // 19 doubles: count 1 + count 1 + sum, min, max 1 each + mean 2 + first, last, variance,
    // stddev 3 each; the quantile keeps its sketch, in a list of its own.
    CHECK(set.bytes_per_window() == sizeof(AggregateState) + 19 * sizeof(double) +
                                        sizeof(QuantileSketch) + SketchList::overhead_bytes(1));
    for (int i = 1; i <= 100; ++i) {
        const double v = i * 10.0;
        set.add(state, &v, i, static_cast<uint64_t>(i));
    }
    CHECK(set.bytes(state) > set.bytes_per_window());
    // The engine keeps one state per open window (issue 16): the doubles of count + mean + max
    // in place, no vector of sketches for a pipeline without quantiles.
    CHECK(sizeof(AggregateState) <= 48);
    const AggregateSet counts({spec("n", AggregateFn::count, -1)}, QuantileOptions{});
    // A few values are held in the state itself: nothing on the heap.
    CHECK(counts.bytes_per_window() == sizeof(AggregateState));
}

TEST_CASE("the sketches of a state: one block, copied sketch by sketch", "[aggregate]") {
    const AggregateSet set(
        {spec("p50", AggregateFn::quantile, 0, 0.5), spec("n", AggregateFn::count, -1),
         spec("p95", AggregateFn::quantile, 0, 0.95)},
        QuantileOptions{});
    AggregateState a = set.make();
    REQUIRE(a.sketches.size() == 2);
    // A window of a sparse device: its few values live in the state's one block.
    for (int i = 1; i <= 3; ++i) {
        const double v = i * 10.0;
        set.add(a, &v, i, static_cast<uint64_t>(i));
    }
    CHECK(set.bytes(a) == set.bytes_per_window());
    AggregateState b = set.make();
    for (int i = 1; i <= 50; ++i) {
        const double v = i * 1.5;
        set.add(b, &v, i, static_cast<uint64_t>(i));
    }
    CHECK(set.bytes(b) > set.bytes_per_window());
    // From no block to b's, then a's copied into it sketch by sketch (the same number).
    const AggregateState d = copied_and_moved(std::move(a), std::move(b));
    std::vector<std::optional<double>> out;
    set.results(d, out);
    REQUIRE(out.size() == 3);
    // 10, 20, 30: both quantiles are at rank 1 (floor of 0.5 x 2 and 0.95 x 2), within 1 %.
    CHECK(*out[0] == Approx(20).epsilon(0.01));
    CHECK(*out[1] == 3);
    CHECK(*out[2] == Approx(20).epsilon(0.01));
    // No quantile, no block.
    const AggregateSet counts({spec("n", AggregateFn::count, -1)}, QuantileOptions{});
    CHECK(counts.make().sketches.size() == 0);
}

TEST_CASE("a closed window's sketch block waits for the next window's, within a bound",
          "[aggregate]") {
    // On a thread of its own: the pool is the thread's, and goes with it (LeakSanitizer in CI
    // finds a block it leaves behind).
    std::thread([] {
        const AggregateSet set({spec("p95", AggregateFn::quantile, 0, 0.95)}, QuantileOptions{});
        const AggregateSet three(
            {spec("p50", AggregateFn::quantile, 0, 0.5), spec("p90", AggregateFn::quantile, 0, 0.9),
             spec("p99", AggregateFn::quantile, 0, 0.99)},
            QuantileOptions{});
        REQUIRE(SketchList::pooled_bytes() == 0);
        const void* freed = nullptr;
        {
            AggregateState closed = set.make();
            const double v = 7;
            set.add(closed, &v, 1, 1);
            freed = closed.sketches.begin();
        }
        const size_t one = SketchList::pooled_bytes();
        CHECK(one > 0);
        // A list of another size does not take it; one of the same size does, fresh.
        AggregateState other = three.make();
        CHECK(SketchList::pooled_bytes() == one);
        AggregateState next = set.make();
        CHECK(static_cast<const void*>(next.sketches.begin()) == freed);
        CHECK(SketchList::pooled_bytes() == 0);
        CHECK(next == set.make());
        // Ten thousand windows close at once: the pool keeps what its bound allows, the rest
        // goes back to the heap, and new windows take what it kept.
        const AggregateState fresh = three.make();
        std::vector<AggregateState> windows(10'000, fresh);
        windows.clear();
        CHECK(SketchList::pooled_bytes() <= SketchList::pool_bytes_max);
        CHECK(SketchList::pooled_bytes() > SketchList::pool_bytes_max / 2);
        std::vector<AggregateState> again(10'000, fresh);
        CHECK(SketchList::pooled_bytes() == one);  // set.make()'s above, of one sketch
        CHECK(again.back() == fresh);
        // The last block freed is the first taken (the stack's top), then the one before it.
        {
            AggregateState a = set.make();
            AggregateState b = set.make();
            const void* a_block = a.sketches.begin();
            const void* b_block = b.sketches.begin();
            a = AggregateState{};
            b = AggregateState{};
            AggregateState first = set.make();
            AggregateState second = set.make();
            CHECK(static_cast<const void*>(first.sketches.begin()) == b_block);
            CHECK(static_cast<const void*>(second.sketches.begin()) == a_block);
        }
        // Blocks of one sketch fill the pool to its bound; past it they go to the heap.
        const AggregateState single = set.make();
        std::vector<AggregateState> singles(20'000, single);
        singles.clear();
        const size_t block_bytes = one;
        CHECK(SketchList::pooled_bytes() <= SketchList::pool_bytes_max);
        CHECK(SketchList::pooled_bytes() + block_bytes > SketchList::pool_bytes_max);  // full
        std::vector<AggregateState> refill(20'000, single);
        CHECK(refill.back() == single);
    }).join();
}
