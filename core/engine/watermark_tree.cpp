#include "core/engine/watermark_tree.h"

#include <algorithm>
#include <utility>

namespace tidemark::core::detail {

void WatermarkTree::grow(uint32_t index) {
    size_t capacity = std::max<size_t>(16, capacity_);
    while (capacity <= index)
        capacity *= 2;
    std::vector<int64_t> grown(2 * capacity, time_max);
    for (size_t i = 0; i < capacity_; ++i)
        grown[capacity + i] = tree_[capacity_ + i];
    for (size_t i = capacity - 1; i >= 1; --i)
        grown[i] = std::min(grown[2 * i], grown[2 * i + 1]);
    tree_ = std::move(grown);
    capacity_ = capacity;
    dirty_.clear();  // every path was just rebuilt
}

int64_t WatermarkTree::minimum() {
    if (capacity_ == 0) return time_max;
    const size_t n = capacity_;
    if (dirty_.size() * 16 > n) {
        for (size_t i = n - 1; i >= 1; --i)
            tree_[i] = std::min(tree_[2 * i], tree_[2 * i + 1]);
    } else {
        for (const uint32_t index : dirty_)
            for (size_t i = (n + index) / 2; i >= 1; i /= 2)
                tree_[i] = std::min(tree_[2 * i], tree_[2 * i + 1]);
    }
    dirty_.clear();
    const int64_t low = tree_[1];
    if (low == time_max) return low;
    size_t i = 1;
    while (i < n)
        i = tree_[2 * i] == low ? 2 * i : 2 * i + 1;
    witness_ = static_cast<uint32_t>(i - n);
    return low;
}

}  // namespace tidemark::core::detail
