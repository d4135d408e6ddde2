// Mergeable aggregates over a window: count, sum, min, max, mean, first, last, variance, stddev,
// quantile.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
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
    double relative_error = 0.01;
    uint32_t buckets_max = 1024;
};

/// The doubles of one aggregate state: up to inline_max of them in place, more on the heap.
///
/// Operation: a vector of double for what AggregateState needs (assign, index, iterate,
/// compare). In place, a window's values sit next to the window itself: the engine's per-event
/// update then touches no other cache line, and a new window allocates nothing. count, mean
/// and max together take four.
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
    size_t heap_capacity() const { return heap_ ? capacity_ : 0; }
    double* data() { return heap_ ? heap_ : inline_; }
    const double* data() const { return heap_ ? heap_ : inline_; }
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
    void resize_uninitialized(size_t n) {
        if (n > capacity_) {
            release();
            heap_ = new double[n];
            capacity_ = static_cast<uint32_t>(n);
        }
        size_ = static_cast<uint32_t>(n);
    }
    void copy_from(const SlotValues& other) {
        resize_uninitialized(other.size_);
        std::copy(other.begin(), other.end(), data());
    }
    void take_from(SlotValues& other) {
        if (other.heap_) {
            heap_ = other.heap_;
            capacity_ = other.capacity_;
            other.heap_ = nullptr;
            other.capacity_ = inline_max;
        } else {
            std::copy(other.inline_, other.inline_ + other.size_, inline_);
        }
        size_ = other.size_;
        other.size_ = 0;
    }
    void release() {
        delete[] heap_;
        heap_ = nullptr;
        capacity_ = inline_max;
    }

    // What data() reads first, so that a state at the end of a cache line's first 24 bytes
    // keeps heap_ and the values in that line (see engine.cpp's Unit).
    double* heap_ = nullptr;  // when more than inline_max were asked for
    double inline_[inline_max] = {};
    uint32_t size_ = 0;
    uint32_t capacity_ = inline_max;
};

/// The state of every aggregate of one window (or slice, or session).
///
/// Operation: `values` is a flat array whose layout AggregateSet decides (a few doubles per
/// aggregate); `sketches` holds one sketch per quantile aggregate. Created once per window;
/// updating it allocates nothing unless a quantile sketch opens a new bucket.
struct AggregateState {
    SlotValues values;
    std::vector<QuantileSketch> sketches;
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

    void encode(const AggregateState& state, std::string& out) const;
    bool decode(std::string_view& in, AggregateState& state) const;

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
    uint32_t slots_ = 0;
    QuantileOptions quantile_;
};

}  // namespace tidemark::core
