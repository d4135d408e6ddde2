// The engine's watermark min-tree (internal): the global watermark's candidate, the minimum over
// the partitions that are not idle.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "core/engine/types.h"

namespace tidemark::core::detail {

/// The minimum of one value per partition index (a partition's max event time - delay; idle
/// ones as time_max).
///
/// Operation: a tournament tree of eight children a node, kept up to date on every change from
/// the leaf up to the first node whose minimum the change leaves as it was. The eight children
/// of a node sit side by side in one cache line, so each level a change passes through reads
/// one line: a rise reads the leaf's eight and, only when they no longer hold the old value's
/// equal or less, writes the parent and goes on with the parent's eight. A raise from a value
/// the caller knows (a partition's own candidate) looks at the parent first and reads the
/// leaf's line only when the parent held that value: in the engine's tumbling bench one
/// rise in five. A stream that always raises the minimum (devices in turn) passes every
/// level, five for 10 k partitions where a binary tree has fourteen.
/// (Issue 31: the binary tree's walk cost the engine's tumbling bench 2.2 first-level cache
/// misses an event and a quarter of its rate; before it, the paths were brought up to date
/// when the minimum was needed, 14 levels for every leaf written since, 6-8 % of a replay's
/// time with five pipelines.)
/// Limits: leaves are bounded by the partition indexes, so by keys_max; the levels above them
/// add a seventh, and each level is padded to a whole line of time_max.
class WatermarkTree {
  public:
    WatermarkTree() = default;
    // Its level pointers point into its own storage: moved (a moved vector keeps its memory),
    // never copied.
    WatermarkTree(const WatermarkTree&) = delete;
    WatermarkTree& operator=(const WatermarkTree&) = delete;
    WatermarkTree(WatermarkTree&&) = default;
    WatermarkTree& operator=(WatermarkTree&&) = default;

    /// Sets index's value.
    TM_HOT void set(uint32_t index, int64_t value) {
        if (index >= capacity_) grow(index);
        size_t i = index;
        int64_t* node = level(0) + i;
        const int64_t old = *node;
        if (value == old) return;
        *node = value;
        if (value < old) {
            // A fall writes the path while the parent held more.
            for (size_t k = 1; k < levels_; ++k) {
                i /= fan;
                int64_t& parent = level(k)[i];
                if (parent <= value) return;
                parent = value;
            }
            return;
        }
        rise_above(i, old);
    }

    /// Sets index's value from `old`, which the caller knows it holds (index was set to it
    /// last), to `value`. A rise then reads the leaf's group only when the parent holds `old`
    /// (the parent's level is an eighth of the leaves', and mostly in cache): below it,
    /// another child holds less, and nothing above the leaf changes. What set() does, without
    /// waiting for the leaf's line in most events.
    TM_HOT void raise(uint32_t index, int64_t old, int64_t value) {
        if (value <= old || index >= capacity_) return set(index, value);
        level(0)[index] = value;
        if (level(1)[index / fan] < old) return;
        rise_above(index, old);
    }

    /// A hint, no effect: starts to load index's leaf, which a set() will write.
    void prefetch(uint32_t index) const {
        if (index < capacity_) __builtin_prefetch(level(0) + index);
    }

    /// The minimum over partitions that are not idle (time_max when none).
    int64_t minimum() const { return capacity_ == 0 ? time_max : level(levels_ - 1)[0]; }

  private:
    static constexpr size_t fan = 8;  // one cache line of int64_t
    // 8^11 > 2^32: enough levels for any uint32_t index.
    static constexpr size_t levels_max = 12;

    TM_HOT static int64_t group_minimum(const int64_t* g) {
        const int64_t a = std::min(std::min(g[0], g[1]), std::min(g[2], g[3]));
        const int64_t b = std::min(std::min(g[4], g[5]), std::min(g[6], g[7]));
        return std::min(a, b);
    }

    // After leaf i rose from `old`: a parent changes only where `old` was its group's minimum
    // and no sibling holds as little; then every child is above `old`, and the parent takes
    // their minimum and rises in its turn.
    TM_HOT void rise_above(size_t i, int64_t old) {
        for (size_t k = 0; k + 1 < levels_; ++k) {
            const int64_t low = group_minimum(level(k) + (i & ~(fan - 1)));
            if (low <= old) return;
            i /= fan;
            level(k + 1)[i] = low;
        }
    }

    TM_HOT int64_t* level(size_t k) { return level_[k]; }
    TM_HOT const int64_t* level(size_t k) const { return level_[k]; }

    void grow(uint32_t index);

    // Every level, leaves first, each starting on a cache line and padded to a multiple of
    // `fan` with time_max; the last level is the root alone. level_[k] points at level k.
    std::vector<int64_t> storage_;
    std::array<int64_t*, levels_max> level_{};
    size_t levels_ = 0;
    size_t capacity_ = 0;  // leaves
};

}  // namespace tidemark::core::detail
