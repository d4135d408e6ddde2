// Where a SketchList's heap block comes from (core/aggregate.h): this thread's stack of freed
// blocks of its size, or the heap.
#include <new>
#include <vector>

#include "core/aggregate.h"

namespace tidemark::core {

namespace {

// This thread's freed sketch blocks, one stack of pointers per count of sketches, in arrays of
// their own: a block taken from the top is not read before it is written (docs/DECISIONS.md).
// Each array is reserved to the bound at the first block of its size taken from the heap, one
// pointer for each block the bound allows (docs/CONFIG.md counts them), so that a free never
// allocates.
struct SketchBlockPool {
    std::vector<std::byte*> free[SketchList::pooled_sketches_max];
    size_t bytes = 0;

    ~SketchBlockPool();
};

// Trivially destroyed, so still readable while other thread-locals and statics are destroyed
// after the pool: a block freed then goes to the heap.
thread_local bool sketch_block_pool_gone = false;
thread_local SketchBlockPool sketch_block_pool;

}  // namespace

std::byte* SketchList::allocate_block(size_t n) {
    const size_t bytes = header_bytes + n * sizeof(QuantileSketch);
    if (n <= pooled_sketches_max && !sketch_block_pool_gone) {
        SketchBlockPool& pool = sketch_block_pool;
        std::vector<std::byte*>& blocks = pool.free[n - 1];
        if (!blocks.empty()) {
            std::byte* block = blocks.back();
            blocks.pop_back();
            pool.bytes -= bytes;
            return block;
        }
        if (blocks.capacity() == 0) blocks.reserve(pool_bytes_max / bytes);  // may throw, as new
    }
    return static_cast<std::byte*>(::operator new(bytes, block_alignment));
}

void SketchList::free_block(std::byte* block, size_t n) noexcept {
    const size_t bytes = header_bytes + n * sizeof(QuantileSketch);
    if (n <= pooled_sketches_max && !sketch_block_pool_gone) {
        SketchBlockPool& pool = sketch_block_pool;
        std::vector<std::byte*>& blocks = pool.free[n - 1];
        // Within the bound there is always room in the array (bytes >= size x a block's bytes),
        // unless its reservation failed: then the block goes to the heap.
        if (pool.bytes + bytes <= pool_bytes_max && blocks.size() < blocks.capacity()) {
            blocks.push_back(block);
            pool.bytes += bytes;
            return;
        }
    }
    ::operator delete(block, block_alignment);
}

size_t SketchList::pooled_bytes() {
    return sketch_block_pool_gone ? 0 : sketch_block_pool.bytes;
}

SketchBlockPool::~SketchBlockPool() {
    sketch_block_pool_gone = true;
    for (const std::vector<std::byte*>& blocks : free) {
        for (std::byte* block : blocks)
            ::operator delete(block, SketchList::block_alignment);
    }
}

}  // namespace tidemark::core
