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
}

}  // namespace tidemark::core::detail
