#include "core/quantile.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

using tidemark::core::QuantileSketch;

namespace {

constexpr double relative_error = 0.01;

// The value at sorted position floor(q * (n - 1)): the rank the sketch promises to answer for.
double exact_quantile(std::vector<double> values, double q) {
    std::sort(values.begin(), values.end());
    return values[static_cast<size_t>(std::floor(q * static_cast<double>(values.size() - 1)))];
}

bool within_bound(double estimate, double exact, double a) {
    // A hair of slack for the rounding of log() at bucket edges; |v| < 1e-9 counts as zero.
    return std::fabs(estimate - exact) <= a * std::fabs(exact) * (1 + 1e-9) + 1e-9;
}

std::vector<double> draw(size_t n, uint32_t seed,
                         const std::function<double(std::mt19937_64&)>& f) {
    std::mt19937_64 rng(seed);
    std::vector<double> values(n);
    for (double& v : values)
        v = f(rng);
    return values;
}

QuantileSketch sketch_of(const std::vector<double>& values, double a = relative_error,
                         uint32_t buckets_max = 1024) {
    QuantileSketch sketch(a, buckets_max);
    for (double v : values)
        sketch.add(v);
    return sketch;
}

}  // namespace

TEST_CASE("quantiles are within the relative error bound", "[quantile]") {
    struct Case {
        const char* name;
        std::vector<double> values;
    };
    const std::vector<Case> cases = {
        {"uniform",
         draw(50'000, 1,
              [](auto& rng) { return std::uniform_real_distribution(0.0, 1000.0)(rng); })},
        {"lognormal",
         draw(50'000, 2, [](auto& rng) { return std::lognormal_distribution(0.0, 2.0)(rng); })},
        {"negative",
         draw(50'000, 3,
              [](auto& rng) { return std::uniform_real_distribution(-1e4, -1.0)(rng); })},
        // Signed readings at a sensor's 0.01 resolution, zero included.
        {"mixed", draw(50'000, 4,
                       [](auto& rng) {
                           return std::round(std::normal_distribution(0.0, 100.0)(rng) * 100) / 100;
                       })},
        {"integers",
         draw(50'000, 5,
              [](auto& rng) { return double(std::uniform_int_distribution(-3, 3)(rng)); })},
    };
    for (const Case& c : cases) {
        const QuantileSketch sketch = sketch_of(c.values);
        CHECK(sketch.count() == c.values.size());
        for (double q : {0.0, 0.5, 0.9, 0.99, 0.999, 1.0}) {
            const double exact = exact_quantile(c.values, q);
            const double estimate = sketch.quantile(q);
            INFO(c.name << " q=" << q << " exact=" << exact << " estimate=" << estimate);
            CHECK(within_bound(estimate, exact, relative_error));
        }
    }
}

TEST_CASE("a default sketch uses 1% error and 1024 buckets", "[quantile]") {
    QuantileSketch by_default;
    QuantileSketch explicit_sketch(0.01, 1024);
    CHECK(by_default.empty());
    CHECK(std::isnan(by_default.quantile(0.5)));
    for (int i = -50; i <= 100; ++i) {
        by_default.add(i * 3.7);
        explicit_sketch.add(i * 3.7);
    }
    CHECK(by_default == explicit_sketch);
    CHECK(within_bound(by_default.quantile(0.99),
                       exact_quantile(
                           [] {
                               std::vector<double> v;
                               for (int i = -50; i <= 100; ++i)
                                   v.push_back(i * 3.7);
                               return v;
                           }(),
                           0.99),
                       0.01));
}

TEST_CASE("zero, tiny values, NaN and infinities", "[quantile]") {
    QuantileSketch sketch;
    sketch.add(0.0);
    sketch.add(-0.0);
    sketch.add(1e-12);
    sketch.add(std::numeric_limits<double>::quiet_NaN());
    CHECK(sketch.count() == 3);
    CHECK(sketch.quantile(0.5) == 0.0);
    sketch.add(std::numeric_limits<double>::infinity());
    CHECK(std::isfinite(sketch.quantile(1.0)));
    CHECK(sketch.quantile(1.0) > 1e307);
}

TEST_CASE("merging sketches equals adding everything to one", "[quantile]") {
    for (uint32_t buckets_max : {1024u, 32u}) {
        INFO("buckets_max " << buckets_max);
        const auto values = draw(20'000, 7, [](auto& rng) {
            const double v = std::lognormal_distribution(0.0, 3.0)(rng);
            return std::bernoulli_distribution(0.3)(rng) ? -v : v;
        });
        const QuantileSketch all = sketch_of(values, relative_error, buckets_max);
        // Four uneven parts, merged in several orders and shapes.
        std::vector<QuantileSketch> parts(4, QuantileSketch(relative_error, buckets_max));
        for (size_t i = 0; i < values.size(); ++i)
            parts[(i * i) % 7 % 4].add(values[i]);

        QuantileSketch left = parts[0];
        for (size_t i = 1; i < 4; ++i)
            left.merge(parts[i]);
        QuantileSketch right = parts[3];
        for (size_t i = 3; i-- > 0;)
            right.merge(parts[i]);
        QuantileSketch ab = parts[0], cd = parts[2];
        ab.merge(parts[1]);
        cd.merge(parts[3]);
        cd.merge(ab);

        CHECK(left == all);
        CHECK(right == all);
        CHECK(cd == all);
        CHECK(left.count() == values.size());

        // One sketch per value never collapses on add: merging them all gives the same state.
        QuantileSketch singles(relative_error, buckets_max);
        for (double v : values) {
            QuantileSketch one(relative_error, buckets_max);
            one.add(v);
            singles.merge(one);
        }
        CHECK(singles == all);
    }
}

TEST_CASE("the bucket bound holds and keeps high quantiles exact", "[quantile]") {
    constexpr uint32_t buckets_max = 128;
    // Spans about 440 buckets: the lowest are collapsed.
    const auto values =
        draw(100'000, 11, [](auto& rng) { return std::lognormal_distribution(0.0, 1.0)(rng); });
    const QuantileSketch sketch = sketch_of(values, relative_error, buckets_max);
    const size_t bucket_bytes = sizeof(std::pair<int32_t, uint64_t>);
    CHECK(sketch.bytes() <= sizeof(QuantileSketch) + 2 * (buckets_max + 1) * bucket_bytes);
    const QuantileSketch unbounded = sketch_of(values, relative_error, 100'000);
    CHECK(unbounded.bytes() > sketch.bytes());
    for (double q : {0.99, 0.999, 1.0}) {
        INFO("q=" << q);
        CHECK(within_bound(sketch.quantile(q), exact_quantile(values, q), relative_error));
    }
    // The collapsed low tail is reported as the lowest bucket kept: an overestimate.
    CHECK(sketch.quantile(0.01) > exact_quantile(values, 0.01) * 1.5);
    CHECK(sketch.quantile(0.0) == sketch.quantile(0.01));
}

TEST_CASE("negative values collapse from the most negative, keeping the top exact", "[quantile]") {
    constexpr uint32_t buckets_max = 64;
    const auto values =
        draw(50'000, 12, [](auto& rng) { return -std::lognormal_distribution(0.0, 1.0)(rng); });
    const QuantileSketch sketch = sketch_of(values, relative_error, buckets_max);
    for (double q : {0.999, 1.0}) {
        INFO("q=" << q);
        CHECK(within_bound(sketch.quantile(q), exact_quantile(values, q), relative_error));
    }
    CHECK(sketch.quantile(0.0) > exact_quantile(values, 0.0) / 2);  // overestimated, not below
}

TEST_CASE("sketches encode and decode to an equal sketch", "[quantile]") {
    const auto values =
        draw(5'000, 13, [](auto& rng) { return std::normal_distribution(0.0, 50.0)(rng); });
    for (uint32_t buckets_max : {1024u, 16u}) {
        const QuantileSketch sketch = sketch_of(values, 0.02, buckets_max);
        std::string encoded = "prefix";
        sketch.encode(encoded);
        encoded += "tail";
        std::string_view in(encoded);
        in.remove_prefix(6);
        QuantileSketch decoded;
        REQUIRE(decoded.decode(in));
        CHECK(in == "tail");
        CHECK(decoded == sketch);
        CHECK(decoded.quantile(0.9) == sketch.quantile(0.9));

        // Every truncation is refused, never read past.
        const std::string whole = encoded.substr(6, encoded.size() - 10);
        for (size_t n = 0; n < whole.size(); n += 7) {
            std::string_view cut(whole.data(), n);
            QuantileSketch damaged;
            CHECK_FALSE(damaged.decode(cut));
        }
    }
    // A count that disagrees with the buckets is damage.
    QuantileSketch one;
    one.add(5);
    std::string encoded;
    one.encode(encoded);
    encoded[28] = 2;  // count_ low byte: after f64 relative_error, min, max, u32 buckets_max
    std::string_view in(encoded);
    QuantileSketch damaged;
    CHECK_FALSE(damaged.decode(in));

    // Extremes the wrong way round in a sketch that holds values: quantile() would clamp with
    // lo > hi (undefined); an empty sketch's +inf/-inf are fine.
    QuantileSketch two;
    two.add(1);
    two.add(9);
    std::string swapped;
    two.encode(swapped);
    std::string min_bytes = swapped.substr(8, 8);
    std::string max_bytes = swapped.substr(16, 8);
    swapped.replace(8, 8, max_bytes).replace(16, 8, min_bytes);
    std::string_view swapped_in(swapped);
    QuantileSketch refused;
    CHECK_FALSE(refused.decode(swapped_in));
    std::string empty_encoded;
    QuantileSketch().encode(empty_encoded);
    std::string_view empty_in(empty_encoded);
    QuantileSketch empty;
    CHECK(empty.decode(empty_in));
}

TEST_CASE("a sketch's buckets: a few in place, more on the heap, as a vector holds them",
          "[quantile]") {
    using tidemark::core::QuantileBucket;
    using tidemark::core::QuantileBuckets;
    constexpr size_t in_place = QuantileBuckets::inline_max;
    // Random inserts, front drops, shrinks, copies and moves against a vector.
    std::mt19937_64 rng(31);
    for (int round = 0; round < 200; ++round) {
        QuantileBuckets buckets;
        std::vector<QuantileBucket> model;
        for (int op = 0; op < 60; ++op) {
            const auto kind = rng() % 10;
            if (kind < 5) {
                const size_t at = model.empty() ? 0 : rng() % (model.size() + 1);
                const QuantileBucket b{static_cast<int32_t>(rng() % 1000) - 500, rng() % 9 + 1};
                model.insert(model.begin() + static_cast<std::ptrdiff_t>(at), b);
                CHECK(*buckets.insert(buckets.begin() + at, b) == b);
            } else if (kind <= 6 && !model.empty()) {
                const size_t n = rng() % (model.size() + 1);
                model.erase(model.begin(), model.begin() + static_cast<std::ptrdiff_t>(n));
                buckets.erase_front(n);
            } else if (kind == 7) {
                buckets.shrink_to_fit();
                CHECK(buckets.capacity() == std::max(in_place, model.size()));
            } else if (kind == 8) {
                QuantileBuckets copy;
                copy.push_back({7, 7});
                copy = buckets;
                buckets = QuantileBuckets(copy);  // copy into a temporary, then moved
            } else {
                QuantileBuckets moved(std::move(buckets));
                CHECK(buckets.empty());
                buckets = std::move(moved);
            }
            REQUIRE(buckets.size() == model.size());
            CHECK(std::equal(buckets.begin(), buckets.end(), model.begin(), model.end()));
            CHECK(buckets.capacity() >= std::max(in_place, model.size()));
            CHECK(buckets.heap_capacity() ==
                  (buckets.capacity() > in_place ? buckets.capacity() : 0));
        }
    }
}

TEST_CASE("a sketch of a few values keeps its buckets in itself", "[quantile]") {
    QuantileSketch sketch;
    // Three positive buckets, and zero: nothing on the heap.
    for (double v : {10.0, 20.0, 40.0, 0.0, 20.0, 40.0})
        sketch.add(v);
    CHECK(sketch.bytes() == sizeof(QuantileSketch));
    QuantileSketch copy = sketch;
    CHECK(copy == sketch);
    CHECK(copy.quantile(0.5) == sketch.quantile(0.5));
    // A fourth bucket goes to the heap, and is counted; so does a negative value's.
    sketch.add(80);
    const size_t four = sketch.bytes();
    CHECK(four > sizeof(QuantileSketch));
    CHECK(sketch.quantile(1) == 80);
    sketch.add(-5);
    CHECK(sketch.bytes() > four);
    CHECK(sketch.quantile(0) == -5);
    // Copies either way keep what each holds.
    copy = sketch;
    CHECK(copy == sketch);
    QuantileSketch sparse;
    sparse.add(3);
    copy = sparse;
    CHECK(copy == sparse);
    CHECK(copy.quantile(0.5) == 3);
}
