// Mergeable aggregates over a window: count, sum, min, max, mean, first, last, variance, stddev,
// quantile.
#pragma once

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

/// The state of every aggregate of one window (or slice, or session).
///
/// Operation: `values` is a flat array whose layout AggregateSet decides (a few doubles per
/// aggregate); `sketches` holds one sketch per quantile aggregate. Created once per window;
/// updating it allocates nothing unless a quantile sketch opens a new bucket.
struct AggregateState {
    std::vector<double> values;
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
    void add(AggregateState& state, const double* fields, int64_t event_ms, uint64_t order) const;
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
    std::vector<AddOp> add_ops_;
    // The common case, every aggregate one of count/sum/min/max/mean over one field (at most
    // one of each): add() is then a few straight-line updates. -1 marks an absent aggregate.
    struct SimplePlan {
        bool usable = false;
        uint32_t field = 0;
        int32_t count_events = -1, count = -1, sum = -1, min = -1, max = -1, mean = -1;
    };
    SimplePlan simple_;
    std::vector<AggregateSpec> specs_;
    std::vector<uint32_t> offsets_;   // first slot in `values` of each spec
    std::vector<int32_t> sketch_of_;  // index in `sketches` of each spec, -1 when none
    uint32_t slots_ = 0;
    QuantileOptions quantile_;
};

}  // namespace tidemark::core
