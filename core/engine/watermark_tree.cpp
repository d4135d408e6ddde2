#include "core/engine/watermark_tree.h"

#include <cstddef>
#include <utility>

namespace tidemark::core::detail {

void WatermarkTree::grow(uint32_t index) {
    size_t capacity = std::max<size_t>(16, capacity_);
    while (capacity <= index)
        capacity *= 2;
    // The levels' sizes: each a group's minimum of the one below, down to the root alone.
    std::array<size_t, levels_max> sizes{};
    size_t levels = 0;
    for (size_t n = capacity;; n = (n + fan - 1) / fan) {
        sizes[levels++] = n;
        if (n == 1) break;
    }
    std::array<size_t, levels_max> offsets{};
    size_t total = 0;
    for (size_t k = 0; k < levels; ++k) {
        offsets[k] = total;
        total += (sizes[k] + fan - 1) / fan * fan;
    }
    // fan - 1 spare entries, so that the first level can start on a cache line (the vector's
    // data is 8-byte aligned at least). The alignment is for speed only.
    std::vector<int64_t> grown(total + fan - 1, time_max);
    const auto address = reinterpret_cast<uintptr_t>(grown.data());
    const size_t align = ((64 - address % 64) % 64) / sizeof(int64_t);
    int64_t* base = grown.data() + align;
    for (size_t i = 0; i < capacity_; ++i)
        base[i] = level(0)[i];
    for (size_t k = 1; k < levels; ++k)
        for (size_t i = 0; i < sizes[k]; ++i)
            base[offsets[k] + i] = group_minimum(base + offsets[k - 1] + i * fan);
    storage_ = std::move(grown);  // a moved vector keeps its memory: base still points into it
    for (size_t k = 0; k < levels; ++k)
        level_[k] = base + offsets[k];
    levels_ = levels;
    capacity_ = capacity;
}

}  // namespace tidemark::core::detail
