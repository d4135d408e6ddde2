// The engine's watermark min-tree (internal): the global watermark's candidate, the minimum over
// the partitions that are not idle.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/engine/types.h"

namespace tidemark::core::detail {

/// The minimum of one value per partition index (a partition's max event time - delay; idle
/// ones as time_max).
///
/// Operation: a tournament tree kept up to date on every change, from the leaf up to the first
/// node whose minimum the change leaves as it was (the nodes above it cannot change either).
/// A partition's value rises with its events and only a subtree's minimum passes a rise on
/// (a node that holds less than the old value stops it at one comparison), so most events
/// stop one or two levels up; a stream that always raises the minimum costs
/// the tree's height. (Before issue 31 the paths were brought up to date when the minimum was
/// needed, each whole: with 10 k partitions reporting in turn the one at the minimum reports
/// next, so that was every few dozen events, 14 levels for every leaf written since, 6-8 % of
/// a replay's time with five pipelines.)
/// Limits: leaves are bounded by the partition indexes, so by keys_max.
class WatermarkTree {
  public:
    /// Sets index's value.
    TM_HOT void set(uint32_t index, int64_t value) {
        if (index >= capacity_) grow(index);
        size_t i = capacity_ + index;
        const int64_t old = tree_[i];
        tree_[i] = value;
        if (value < old) {
            for (i /= 2; i >= 1 && tree_[i] > value; i /= 2)
                tree_[i] = value;
            return;
        }
        // A rise changes the nodes whose minimum was the old value, up to the first one that
        // another subtree holds at or below it.
        for (i /= 2; i >= 1 && tree_[i] == old; i /= 2) {
            const int64_t low = std::min(tree_[2 * i], tree_[2 * i + 1]);
            if (low == old) break;
            tree_[i] = low;
        }
    }

    /// A hint, no effect: starts to load index's leaf, which a set() will write.
    void prefetch(uint32_t index) const {
        if (index < capacity_) __builtin_prefetch(&tree_[capacity_ + index]);
    }

    /// The minimum over partitions that are not idle (time_max when none).
    int64_t minimum() const { return capacity_ == 0 ? time_max : tree_[1]; }

  private:
    void grow(uint32_t index);

    std::vector<int64_t> tree_;  // tree_[1] is the root, leaves from capacity_
    size_t capacity_ = 0;
};

}  // namespace tidemark::core::detail
