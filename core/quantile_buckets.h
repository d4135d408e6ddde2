// The positive buckets of a quantile sketch: sorted (index, count) pairs, the first few held in
// place.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "core/result.h"

namespace tidemark::core {

/// One bucket of a QuantileSketch: the values in (gamma^(index-1), gamma^index], counted.
struct QuantileBucket {
    int32_t index = 0;
    uint64_t count = 0;
    bool operator==(const QuantileBucket&) const = default;
};

/// A vector of buckets that holds up to `inline_max` of them in place.
///
/// Operation: the engine keeps one sketch per open window, and a window of a sparse device
/// (a reading a minute in a 5 m window) has a few values: their buckets then live in the sketch
/// itself, which lives in the window's one block (SketchList), so an event's add reads no other
/// cache line and a new window allocates nothing for them (issue 31: the three pointer hops and
/// three allocations of a window's sketch made a pipeline with a quantile twice as slow as one
/// without, at 10 % more instructions). More buckets go to the heap, as a std::vector's would.
/// Only the positive buckets are held so (telemetry is mostly positive): each bucket held in
/// place is 16 bytes more in every window's sketch, and in the map budget's estimate of it.
/// Concurrency: none; a plain value type.
/// Limits: at most UINT32_MAX buckets (a sketch keeps at most buckets_max + 1).
class QuantileBuckets {
  public:
    static constexpr uint32_t inline_max = 3;

    QuantileBuckets() = default;
    QuantileBuckets(const QuantileBuckets& other) { assign(other); }
    QuantileBuckets(QuantileBuckets&& other) noexcept { take(other); }
    QuantileBuckets& operator=(const QuantileBuckets& other) {
        if (this != &other) assign(other);
        return *this;
    }
    QuantileBuckets& operator=(QuantileBuckets&& other) noexcept {
        if (this != &other) {
            release();
            take(other);
        }
        return *this;
    }
    ~QuantileBuckets() { release(); }

    size_t size() const { return size_; }
    size_t capacity() const { return capacity_; }
    bool empty() const { return size_ == 0; }
    /// Buckets held on the heap (0 while in place).
    size_t heap_capacity() const { return on_heap() ? capacity_ : 0; }

    QuantileBucket* begin() { return data(); }
    QuantileBucket* end() { return data() + size_; }
    const QuantileBucket* begin() const { return data(); }
    const QuantileBucket* end() const { return data() + size_; }
    QuantileBucket& operator[](size_t i) { return data()[i]; }
    const QuantileBucket& operator[](size_t i) const { return data()[i]; }
    const QuantileBucket& front() const { return data()[0]; }
    const QuantileBucket& back() const { return data()[size_ - 1]; }

    /// Room for n buckets, exactly (when more than the capacity).
    void reserve(size_t n) {
        if (n > capacity_) move_to(n);
    }
    /// Inserts before `at`; grows by doubling (at least to 8) when full. Returns the new bucket.
    QuantileBucket* insert(const QuantileBucket* at, QuantileBucket bucket) {
        const size_t position = static_cast<size_t>(at - data());
        TM_ASSERT(position <= size_);
        if (size_ == capacity_) reserve(std::max<size_t>(8, 2 * size_));
        QuantileBucket* p = data() + position;
        std::copy_backward(p, end(), end() + 1);
        *p = bucket;
        ++size_;
        return p;
    }
    void push_back(QuantileBucket bucket) { insert(end(), bucket); }
    /// Drops the first n buckets.
    void erase_front(size_t n) {
        TM_ASSERT(n <= size_);
        if (n == 0) return;  // std::copy onto its own first element is undefined
        std::copy(begin() + n, end(), begin());
        size_ -= static_cast<uint32_t>(n);
    }
    void clear() { size_ = 0; }
    /// Gives back heap capacity beyond the size (in place again when the buckets fit).
    void shrink_to_fit() {
        if (on_heap() && capacity_ > size_) move_to(size_);
    }

    bool operator==(const QuantileBuckets& other) const {
        return std::equal(begin(), end(), other.begin(), other.end());
    }

  private:
    bool on_heap() const { return capacity_ > inline_max; }
    QuantileBucket* data() { return on_heap() ? heap_ : inline_; }
    const QuantileBucket* data() const { return on_heap() ? heap_ : inline_; }

    // Moves the buckets into storage for max(n, inline_max) of them (n >= size).
    void move_to(size_t n) {
        TM_ASSERT(n >= size_ && n <= UINT32_MAX);
        if (n <= inline_max) {
            if (!on_heap()) return;
            QuantileBucket* heap = heap_;
            std::copy(heap, heap + size_, inline_);
            delete[] heap;
            capacity_ = inline_max;
            return;
        }
        auto* heap = new QuantileBucket[n];
        std::copy(begin(), end(), heap);
        release_heap();
        heap_ = heap;
        capacity_ = static_cast<uint32_t>(n);
    }
    void assign(const QuantileBuckets& other) {
        if (other.size_ > capacity_) {
            size_ = 0;  // nothing of this store is kept: move_to copies none of it
            move_to(other.size_);
        }
        std::copy(other.begin(), other.end(), data());
        size_ = other.size_;
    }
    void take(QuantileBuckets& other) {
        if (other.on_heap())
            heap_ = other.heap_;
        else
            std::copy(other.inline_, other.inline_ + other.size_, inline_);
        size_ = other.size_;
        capacity_ = other.capacity_;
        other.size_ = 0;
        other.capacity_ = inline_max;
    }
    void release_heap() {
        if (on_heap()) delete[] heap_;
    }
    void release() {
        release_heap();
        size_ = 0;
        capacity_ = inline_max;
    }

    uint32_t size_ = 0;
    uint32_t capacity_ = inline_max;
    union {
        QuantileBucket inline_[inline_max] = {};
        QuantileBucket* heap_;
    };
};

}  // namespace tidemark::core
