// Where a SketchList's heap block comes from (core/aggregate.h): this thread's stack of freed
// blocks of its size, or the heap.
#include <new>
#include <vector>

#include "core/aggregate.h"

namespace tidemark::core {

namespace {

// This thread's freed sketch blocks, one stack of pointers per count of sketches. The pointers
// sit in arrays of their own, not in the blocks: a block taken from the top is not read before
// it is written (a list linked through the blocks read a freed block's first word to find the
// next one, a load from memory the thread left long ago, once for every new window: issue 31).
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
        if (std::vector<std::byte*>& blocks = pool.free[n - 1]; !blocks.empty()) {
            std::byte* block = blocks.back();
            blocks.pop_back();
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
            std::vector<std::byte*>& blocks = pool.free[n - 1];
            try {
                // Room for as many blocks as the bound allows, once: at most 8 bytes a block
                // (110 KiB for blocks of one sketch), and no array grown by doubling.
                if (blocks.capacity() == 0) blocks.reserve(pool_bytes_max / bytes);
                blocks.push_back(block);
                pool.bytes += bytes;
                return;
            } catch (const std::bad_alloc&) {
                // called from destructors: without room for the pointer the block goes to the heap
            }
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
