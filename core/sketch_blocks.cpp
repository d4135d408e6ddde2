// Where a SketchList's heap block comes from (core/aggregate.h): this thread's list of freed
// blocks of its size, or the heap.
#include <cstring>
#include <new>

#include "core/aggregate.h"

namespace tidemark::core {

namespace {

// This thread's freed sketch blocks, one list per count of sketches, linked through the word
// that holds a live block's count.
struct SketchBlockPool {
    std::byte* free[SketchList::pooled_sketches_max] = {};
    size_t bytes = 0;

    ~SketchBlockPool();
};

// Trivially destroyed, so still readable while other thread-locals and statics are destroyed
// after the pool: a block freed then goes to the heap.
thread_local bool sketch_block_pool_gone = false;
thread_local SketchBlockPool sketch_block_pool;

std::byte* next_of(std::byte* block) {
    std::byte* next;
    std::memcpy(&next, block, sizeof next);
    return next;
}

}  // namespace

std::byte* SketchList::allocate_block(size_t n) {
    const size_t bytes = header_bytes + n * sizeof(QuantileSketch);
    if (n <= pooled_sketches_max && !sketch_block_pool_gone) {
        SketchBlockPool& pool = sketch_block_pool;
        if (std::byte* block = pool.free[n - 1]) {
            pool.free[n - 1] = next_of(block);
            pool.bytes -= bytes;
            return block;
        }
    }
    return static_cast<std::byte*>(::operator new(bytes, block_alignment));
}

void SketchList::free_block(std::byte* block, size_t n) {
    const size_t bytes = header_bytes + n * sizeof(QuantileSketch);
    if (n <= pooled_sketches_max && !sketch_block_pool_gone) {
        SketchBlockPool& pool = sketch_block_pool;
        if (pool.bytes + bytes <= pool_bytes_max) {
            std::memcpy(block, &pool.free[n - 1], sizeof(std::byte*));
            pool.free[n - 1] = block;
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
    for (std::byte*& head : free) {
        while (head) {
            std::byte* next = next_of(head);
            ::operator delete(head, SketchList::block_alignment);
            head = next;
        }
    }
}

}  // namespace tidemark::core
