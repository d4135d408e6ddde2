// The engine's watermark min-tree (internal): the global watermark's candidate, the minimum over
// the partitions that are not idle.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "core/engine/types.h"

namespace tidemark::core::detail {

/// The minimum of one value per partition index (a partition's max event time - delay; idle
/// ones as time_max).
///
/// Operation: a tournament tree. A changed leaf is written at once but its path to the root
/// only when the minimum is needed; the minimum is needed only when no partition is known to be
/// at or below the watermark: the witness names one until it moves up (or goes idle).
/// Limits: leaves and the dirty list are bounded by the partition indexes, so by keys_max.
class WatermarkTree {
  public:
    /// Sets index's value; `watermark` is the domain's, to tell whether the witness moved up.
    TM_HOT void set(uint32_t index, int64_t value, int64_t watermark) {
        if (index >= capacity_) grow(index);
        tree_[capacity_ + index] = value;
        // Leaves whose paths are out of date; past a sixteenth of the leaves the whole tree is
        // rebuilt instead, so the list stops there.
        if (dirty_.size() <= capacity_ / 16) dirty_.push_back(index);
        if (index == witness_ && value > watermark) witness_ = no_witness;
    }

    /// Whether no partition is known to be at or below the watermark (see minimum()).
    bool witness_lost() const { return witness_ == no_witness; }

    /// The minimum over partitions that are not idle (time_max when none); names the partition
    /// holding it as the new witness.
    int64_t minimum();

  private:
    static constexpr uint32_t no_witness = std::numeric_limits<uint32_t>::max();

    void grow(uint32_t index);

    std::vector<int64_t> tree_;  // tree_[1] is the root, leaves from capacity_
    size_t capacity_ = 0;
    std::vector<uint32_t> dirty_;  // at most capacity_ / 16 + 1
    uint32_t witness_ = no_witness;
};

}  // namespace tidemark::core::detail
