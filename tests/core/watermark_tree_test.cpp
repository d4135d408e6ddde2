// The watermark min-tree (core/engine/watermark_tree.h) against the plainest model of what it
// answers: the minimum over every index's last value, time_max for an index never set or set to
// time_max (idle), time_max when nothing is set. Checked after every change (set() and raise()),
// through growth, rises, falls and idling, in the orders the engine sees: devices in turn (each
// raise lifts the minimum), random order, and a few partitions far behind the rest.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <utility>
#include <vector>

#include "core/engine/watermark_tree.h"
#include "core/hash.h"

using tidemark::core::detail::time_max;
using tidemark::core::detail::WatermarkTree;

namespace {

struct Model {
    std::vector<int64_t> values;
    void set(uint32_t index, int64_t value) {
        if (index >= values.size()) values.resize(index + 1, time_max);
        values[index] = value;
    }
    int64_t minimum() const {
        int64_t low = time_max;
        for (int64_t v : values)
            low = std::min(low, v);
        return low;
    }
};

// splitmix64 (core/hash.h's finaliser over a Weyl sequence): a fixed sequence, so that a
// failure repeats.
uint64_t next(uint64_t& state) {
    return tidemark::core::hash::mix(state += 0x9E3779B97F4A7C15ull);
}

}  // namespace

TEST_CASE("an empty tree's minimum is time_max") {
    WatermarkTree tree;
    CHECK(tree.minimum() == time_max);
    tree.set(0, time_max);
    CHECK(tree.minimum() == time_max);
    tree.set(3, 7);
    CHECK(tree.minimum() == 7);
    tree.set(3, time_max);
    CHECK(tree.minimum() == time_max);
}

TEST_CASE("the minimum follows every change, for every number of partitions") {
    // Sizes around the tree's own boundaries: a level of 8, the first growth past 16, 64 and
    // 512 leaves (a level more), 10 k.
    for (uint32_t partitions : {1u, 2u, 7u, 8u, 9u, 16u, 17u, 63u, 64u, 65u, 511u, 513u, 10000u}) {
        CAPTURE(partitions);
        uint64_t seed = partitions;
        WatermarkTree tree;
        Model model;
        uint64_t mismatches = 0;
        // Every other change goes through raise(), told the value the index holds (as the
        // engine tells it a partition's candidate); raise() of a fall or of an index never
        // set does what set() does.
        bool use_raise = false;
        const auto set = [&](uint32_t index, int64_t value) {
            use_raise = !use_raise;
            if (use_raise && index < model.values.size())
                tree.raise(index, model.values[index], value);
            else
                tree.set(index, value);
            model.set(index, value);
            if (tree.minimum() != model.minimum()) ++mismatches;
        };
        // Devices in turn, each event raising its own value: every raise lifts the minimum.
        for (int64_t round = 0; round < 4; ++round)
            for (uint32_t i = 0; i < partitions; ++i)
                set(i, round * 1000 + i);
        // Random order, rising by a random step; now and then a partition goes idle
        // (time_max) or comes back low, and a value is written again unchanged.
        std::vector<int64_t> last(partitions, 0);
        const int steps = partitions < 600 ? 20000 : 60000;
        for (int s = 0; s < steps; ++s) {
            const uint32_t i = static_cast<uint32_t>(next(seed) % partitions);
            const uint64_t r = next(seed) % 100;
            int64_t value;
            if (r < 3)
                value = time_max;
            else if (r < 6)
                value = static_cast<int64_t>(next(seed) % 5000);  // back low
            else if (r < 9)
                value = model.values[i];  // unchanged
            else
                value = last[i] + 1 + static_cast<int64_t>(next(seed) % 3000);
            if (value != time_max) last[i] = std::max(last[i], value);
            set(i, value);
        }
        // A few partitions far behind, then caught up one by one.
        for (uint32_t i = 0; i < partitions; i += std::max(1u, partitions / 5))
            set(i, -1000 - static_cast<int64_t>(i));
        for (uint32_t i = 0; i < partitions; i += std::max(1u, partitions / 5))
            set(i, 1'000'000 + i);
        // Everything idle, one by one.
        for (uint32_t i = 0; i < partitions; ++i)
            set(i, time_max);
        CHECK(mismatches == 0);
        CHECK(tree.minimum() == time_max);
    }
}

TEST_CASE("growth keeps the values set before it") {
    WatermarkTree tree;
    Model model;
    // Indexes that grow the tree in jumps (a forgotten partition's index is reused, a new one
    // takes the next), with the minimum held by a leaf set before each growth.
    for (uint32_t index : {0u, 5u, 15u, 16u, 100u, 1000u, 4095u, 4096u, 70000u}) {
        tree.set(index, 1'000'000 - static_cast<int64_t>(index));
        model.set(index, 1'000'000 - static_cast<int64_t>(index));
        CHECK(tree.minimum() == model.minimum());
    }
    tree.set(70000, time_max);
    model.set(70000, time_max);
    CHECK(tree.minimum() == model.minimum());
    tree.set(4096, 5);
    model.set(4096, 5);
    CHECK(tree.minimum() == 5);
}

TEST_CASE("a moved tree answers as the original did") {
    WatermarkTree tree;
    for (uint32_t i = 0; i < 100; ++i)
        tree.set(i, 500 - static_cast<int64_t>(i));
    WatermarkTree moved = std::move(tree);
    CHECK(moved.minimum() == 401);
    moved.set(99, 1000);
    CHECK(moved.minimum() == 402);
    moved.raise(98, 402, 1000);
    CHECK(moved.minimum() == 403);
}

TEST_CASE("raise() of a leaf below its parent's minimum and of the one at it") {
    WatermarkTree tree;
    for (uint32_t i = 0; i < 64; ++i)
        tree.set(i, 100 + i);  // index 0 holds the minimum, 100; each group's first its own
    // Index 9 is above its group's minimum (index 8, 108): the parent stays, the leaf is not
    // read, and a later raise of the group's minimum must see 9's new value.
    tree.raise(9, 109, 5000);
    CHECK(tree.minimum() == 100);
    for (uint32_t i = 10; i < 16; ++i)
        tree.raise(i, 100 + i, 6000);
    tree.raise(8, 108, 7000);  // the group's minimum is now 9's 5000
    for (uint32_t i = 0; i < 8; ++i)
        tree.raise(i, 100 + i, 8000 + i);
    for (uint32_t i = 16; i < 64; ++i)
        tree.raise(i, 100 + i, 9000);
    CHECK(tree.minimum() == 5000);
    tree.raise(9, 5000, 9500);
    CHECK(tree.minimum() == 6000);
}
