// Mergeable aggregates over a window: count, sum, min, max, mean, first, last, variance, stddev,
// quantile.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/quantile.h"
#include "core/result.h"

namespace tidemark::core {

enum class AggregateFn { count, sum, min, max, mean, first, last, variance, stddev, quantile };

/// "count" -> AggregateFn::count; an unknown name is an error that lists the known ones.
Result<AggregateFn> parse_aggregate_fn(std::string_view name);
std::string_view aggregate_fn_name(AggregateFn fn);

struct AggregateSpec {
    std::string name;  // the key in the result's "values"
    AggregateFn fn = AggregateFn::count;
    int field = -1;  // index into Event::fields; -1 only for count (counts events)
    double q = 0.5;  // quantile only
};

struct QuantileOptions {
    double relative_error = QuantileSketch::relative_error_default;
    uint32_t buckets_max = QuantileSketch::buckets_max_default;
};

/// The doubles of one aggregate state: up to inline_max of them in place, more on the heap.
///
/// Operation: a vector of double for what AggregateState needs (assign, index, iterate,
/// compare). In place, a window's values sit next to the window itself: the engine's per-event
/// update then touches no other cache line, and a new window allocates nothing. count, mean
/// and max together take four.
/// Limits: the heap pointer shares the bytes of the values in place (40 bytes in all, the
/// engine keeps one per open window): the size says which of the two is live, and the heap
/// block is exactly `size` doubles, so a different size reallocates. Every state of one
/// AggregateSet has the same size.
class SlotValues {
  public:
    static constexpr uint32_t inline_max = 4;

    SlotValues() = default;
    SlotValues(const SlotValues& other) { copy_from(other); }
    SlotValues(SlotValues&& other) noexcept { take_from(other); }
    SlotValues& operator=(const SlotValues& other) {
        if (this != &other) copy_from(other);
        return *this;
    }
    SlotValues& operator=(SlotValues&& other) noexcept {
        if (this != &other) {
            release();
            take_from(other);
        }
        return *this;
    }
    ~SlotValues() { release(); }

    void assign(size_t n, double value) {
        resize_uninitialized(n);
        std::fill(data(), data() + n, value);
    }
    size_t size() const { return size_; }
    /// Doubles held on the heap (0 while in place).
    size_t heap_capacity() const { return on_heap() ? size_ : 0; }
    double* data() { return on_heap() ? heap_ : inline_; }
    const double* data() const { return on_heap() ? heap_ : inline_; }
    double* begin() { return data(); }
    double* end() { return data() + size_; }
    const double* begin() const { return data(); }
    const double* end() const { return data() + size_; }
    double& operator[](size_t i) { return data()[i]; }
    double operator[](size_t i) const { return data()[i]; }
    bool operator==(const SlotValues& other) const {
        return size_ == other.size_ && std::equal(begin(), end(), other.begin());
    }

  private:
    bool on_heap() const { return size_ > inline_max; }
    void resize_uninitialized(size_t n) {
        if (n == size_) return;
        release();
        if (n > inline_max) heap_ = new double[n];
        size_ = static_cast<uint32_t>(n);
    }
    void copy_from(const SlotValues& other) {
        resize_uninitialized(other.size_);
        std::copy(other.begin(), other.end(), data());
    }
    void take_from(SlotValues& other) {
        if (other.on_heap())
            heap_ = other.heap_;
        else
            std::copy(other.inline_, other.inline_ + other.size_, inline_);
        size_ = other.size_;
        other.size_ = 0;
    }
    void release() {
        if (on_heap()) delete[] heap_;
        size_ = 0;
    }

    union {
        double inline_[inline_max] = {};
        double* heap_;  // when size_ > inline_max
    };
    uint32_t size_ = 0;
};

/// The quantile sketches of one aggregate state: one pointer, null for the (common) pipelines
/// without a quantile aggregate, so that their windows do not carry an empty list each.
///
/// Operation: the sketches sit in one heap block behind a small header that holds their count,
/// so a window's sketch is one pointer away from the window and a new window allocates once
/// (issue 31: a vector behind a pointer was two hops and two allocations, before the sketch's
/// own buckets). Every state of one AggregateSet has the same number of sketches: a copy between
/// two of them copies sketch by sketch into the block already there, keeping each sketch's
/// bucket capacity (the engine copies into a scratch state).
/// Concurrency: none; a plain value type.
class SketchList {
  public:
    SketchList() = default;
    SketchList(const SketchList& other) { *this = other; }
    SketchList(SketchList&& other) noexcept : block_(std::exchange(other.block_, nullptr)) {}
    SketchList& operator=(const SketchList& other) {
        if (this == &other) return *this;
        if (size() == other.size()) {
            std::copy(other.begin(), other.end(), begin());
        } else {
            release();
            construct(other.size(), [&](QuantileSketch* at) {
                std::uninitialized_copy(other.begin(), other.end(), at);
            });
        }
        return *this;
    }
    SketchList& operator=(SketchList&& other) noexcept {
        if (this != &other) {
            release();
            block_ = std::exchange(other.block_, nullptr);
        }
        return *this;
    }
    ~SketchList() { release(); }

    /// n copies of `sketch`, in place of what the list held.
    void assign(size_t n, const QuantileSketch& sketch) {
        release();
        construct(n, [&](QuantileSketch* at) { std::uninitialized_fill_n(at, n, sketch); });
    }
    size_t size() const { return block_ ? *reinterpret_cast<const size_t*>(block_) : 0; }
    bool empty() const { return size() == 0; }
    QuantileSketch& operator[](size_t i) { return begin()[i]; }
    const QuantileSketch& operator[](size_t i) const { return begin()[i]; }
    QuantileSketch* begin() { return block_ ? sketches(block_) : nullptr; }
    QuantileSketch* end() { return begin() + size(); }
    const QuantileSketch* begin() const { return block_ ? sketches(block_) : nullptr; }
    const QuantileSketch* end() const { return begin() + size(); }
    /// A hint, no effect: starts to load the block's first sketch (its head and buckets held in
    /// place), for an event some records ahead (issue 31).
    void prefetch() const {
        if (!block_) return;
        __builtin_prefetch(block_ + header_bytes);
        __builtin_prefetch(block_ + header_bytes + 63);
    }
    /// Bytes on the heap besides the sketches' own (the block's header).
    size_t overhead_bytes() const { return block_ ? header_bytes : 0; }
    /// What a list of n sketches keeps besides them.
    static size_t overhead_bytes(size_t n) { return n > 0 ? header_bytes : 0; }
    bool operator==(const SketchList& other) const {
        return size() == other.size() && std::equal(begin(), end(), other.begin());
    }

    /// A block holds the count, then the sketches at their alignment.
    static constexpr std::align_val_t block_alignment{
        std::max(alignof(size_t), alignof(QuantileSketch))};
    /// Freed blocks of up to this many sketches wait on a stack of this thread's for the next
    /// block of their size, pool_bytes_max bytes of blocks in all, plus an array of pointers
    /// reserved to that bound for each size (allocate_block() says why).
    static constexpr size_t pooled_sketches_max = 4;
    static constexpr size_t pool_bytes_max = size_t{2} << 20;
    /// The bytes of freed blocks this thread keeps.
    static size_t pooled_bytes();

  private:
    static constexpr size_t header_bytes = std::max(sizeof(size_t), alignof(QuantileSketch));

    static QuantileSketch* sketches(std::byte* block) {
        return std::launder(reinterpret_cast<QuantileSketch*>(block + header_bytes));
    }
    static const QuantileSketch* sketches(const std::byte* block) {
        return std::launder(reinterpret_cast<const QuantileSketch*>(block + header_bytes));
    }
    // A block for n sketches, filled by `fill` (which constructs all n or throws).
    template <class Fill>
    void construct(size_t n, Fill fill) {
        if (n == 0) return;
        std::byte* block = allocate_block(n);
        try {
            fill(sketches(block));
        } catch (...) {
            free_block(block, n);
            throw;
        }
        *reinterpret_cast<size_t*>(block) = n;
        block_ = block;
    }
    void release() {
        if (!block_) return;
        const size_t n = size();
        std::destroy_n(begin(), n);
        free_block(std::exchange(block_, nullptr), n);
    }
    // The heap block of n sketches. Blocks of up to pooled_sketches_max sketches that are freed
    // wait on a stack of this thread's (at most pool_bytes_max in all) for the next one of their
    // size: a window's block is freed when it closes and one of the same size allocated when a
    // new one opens, ten thousand at once at a window boundary, and through malloc that walk
    // grew to 5-7 % of a month's backfill (issue 31).
    static std::byte* allocate_block(size_t n);
    static void free_block(std::byte* block, size_t n) noexcept;

    std::byte* block_ = nullptr;
};

/// The state of every aggregate of one window (or slice, or session).
///
/// Operation: `values` is a flat array whose layout AggregateSet decides (a few doubles per
/// aggregate); `sketches` holds one sketch per quantile aggregate. Created once per window;
/// updating it allocates nothing unless a quantile sketch opens a new bucket.
struct AggregateState {
    SlotValues values;
    SketchList sketches;
    bool operator==(const AggregateState&) const = default;
};

/// The aggregates of one pipeline: how to create, update, merge, read and encode their state.
///
/// Operation: first/last pick by event time, ties broken by `order` (log order): the state stores
/// (event_ms, order, value) so merges in any order give the same answer. variance and stddev are
/// the population variance by Welford's update and Chan's merge. Every aggregate skips a field
/// that is missing (NaN); count without a field counts events, with a field counts values.
/// Concurrency: immutable after construction; share it freely.
/// Limits: results of an aggregate that saw no value are nullopt (JSON null).
class AggregateSet {
  public:
    AggregateSet() = default;
    AggregateSet(std::vector<AggregateSpec> specs, QuantileOptions quantile);

    const std::vector<AggregateSpec>& specs() const { return specs_; }
    /// A fresh, empty state.
    AggregateState make() const;
    void add(AggregateState& state, const double* fields, int64_t event_ms, uint64_t order) const {
        // The size of state.values is checked where states are made and decoded, not here:
        // it would be one more cache line per event (see SlotValues).
        if (simple_add_)
            simple_add_(simple_, state.values.data(), fields);
        else
            add_general(state, fields, event_ms, order);
    }
    void merge(AggregateState& into, const AggregateState& from) const;
    /// One value per spec, in spec order.
    void results(const AggregateState& state, std::vector<std::optional<double>>& out) const;
    /// Bytes the state occupies in memory, for the state-size figures and budget checks.
    size_t bytes(const AggregateState& state) const;
    /// Bytes of a fresh state: the per-window cost used to refuse configs that cannot fit.
    size_t bytes_per_window() const;

    /// How a state is stored: `fixed` (little-endian u32 shape and f64 values, the engine's
    /// state up to store format 4), `compact` (varint shape, values by put_f64_compact).
    enum class StateEncoding { fixed, compact };
    void encode(const AggregateState& state, std::string& out,
                StateEncoding encoding = StateEncoding::compact) const;
    bool decode(std::string_view& in, AggregateState& state,
                StateEncoding encoding = StateEncoding::compact) const;

  private:
    // add() runs for every event: it walks this compact list, built once from specs_, instead
    // of the specs themselves.
    enum class AddKind : uint8_t {
        count_events,
        count,
        sum,
        min,
        max,
        mean,
        first,
        last,
        moments,
        quantile
    };
    struct AddOp {
        AddKind kind;
        uint32_t slot;    // first slot in `values`
        uint32_t field;   // index into the fields (unused by count_events)
        uint32_t sketch;  // index in `sketches` (quantile only)
    };
    void add_general(AggregateState& state, const double* fields, int64_t event_ms,
                     uint64_t order) const;
    std::vector<AddOp> add_ops_;

  public:
    // The common case, every aggregate one of count/sum/min/max/mean over one field (at most
    // one of each): add() is then a few straight-line updates. -1 marks an absent aggregate.
    struct SimplePlan {
        bool usable = false;
        uint32_t field = 0;
        int32_t count_events = -1, count = -1, sum = -1, min = -1, max = -1, mean = -1;
        // Bits of the aggregates present, which select the compiled update.
        static constexpr unsigned has_count_events = 1, has_count = 2, has_sum = 4, has_min = 8,
                                  has_max = 16, has_mean = 32;
    };
    using SimpleAdd = void (*)(const SimplePlan&, double* values, const double* fields);

  private:
    static AddKind add_kind(AggregateFn fn);
    void plan_simple();  // fills simple_ and simple_add_ from add_ops_
    SimplePlan simple_;
    SimpleAdd simple_add_ = nullptr;  // set when simple_.usable
    std::vector<AggregateSpec> specs_;
    std::vector<uint32_t> offsets_;   // first slot in `values` of each spec
    std::vector<int32_t> sketch_of_;  // index in `sketches` of each spec, -1 when none
    uint32_t sketches_ = 0;           // quantile aggregates: the sketches of every state
    uint32_t slots_ = 0;
    QuantileOptions quantile_;
};

}  // namespace tidemark::core
