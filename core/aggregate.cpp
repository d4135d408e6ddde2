#include "core/aggregate.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <utility>

#include "core/bytes.h"

namespace tidemark::core {

namespace {

struct FnInfo {
    AggregateFn fn;
    std::string_view name;
    uint32_t slots;  // doubles in AggregateState::values
};

// Slot layouts, chosen so that a fresh state needs no "seen" flag and holds no NaN (so that
// AggregateState::operator== means what it says):
//   count     [n]
//   sum       [sum]                 -0.0 until a value is seen (see add_sum)
//   min/max   [m]                   +inf / -inf until a value is seen
//   mean      [n, sum]
//   first     [event_ms, order, v]  event_ms = +inf until a value is seen
//   last      [event_ms, order, v]  event_ms = -inf until a value is seen
//   variance  [n, mean, M2]         (and stddev)
//   quantile  []                    one sketch
// event_ms and order are stored as doubles: exact up to 2^53, i.e. for any epoch-ms time and any
// log offset below 9 PB.
constexpr std::array<FnInfo, 10> fn_infos = {{
    {AggregateFn::count, "count", 1},
    {AggregateFn::sum, "sum", 1},
    {AggregateFn::min, "min", 1},
    {AggregateFn::max, "max", 1},
    {AggregateFn::mean, "mean", 2},
    {AggregateFn::first, "first", 3},
    {AggregateFn::last, "last", 3},
    {AggregateFn::variance, "variance", 3},
    {AggregateFn::stddev, "stddev", 3},
    {AggregateFn::quantile, "quantile", 0},
}};

const FnInfo& info(AggregateFn fn) {
    const auto i = static_cast<size_t>(fn);
    TM_ASSERT(i < fn_infos.size() && fn_infos[i].fn == fn);
    return fn_infos[i];
}

constexpr double infinity = std::numeric_limits<double>::infinity();
constexpr double sum_empty = -0.0;

bool is_sum_empty(double sum) {
    return sum == 0 && std::signbit(sum);
}

// -0.0 is the one double that leaves every other unchanged when added, so it marks "no value
// yet" in a single slot; adding +0.0 to each value first turns a -0.0 input into +0.0 so that
// the marker never comes back once a value is seen. (A sum of only -0.0 values reads as 0.)
void add_sum(double& sum, double value) {
    sum += value + 0.0;
}

// Ties between -0.0 and +0.0 are broken by sign so that the result does not depend on order.
bool less_for_min(double value, double current) {
    return value < current || (value == current && std::signbit(value) && !std::signbit(current));
}
bool greater_for_max(double value, double current) {
    return value > current || (value == current && !std::signbit(value) && std::signbit(current));
}

// Welford's update of (n, mean, M2).
void add_moments(double* slot, double value) {
    slot[0] += 1;
    const double delta = value - slot[1];
    slot[1] += delta / slot[0];
    slot[2] += delta * (value - slot[1]);
}

// Chan et al.'s pairwise combination of (n, mean, M2).
void merge_moments(double* into, const double* from) {
    if (from[0] == 0) return;
    if (into[0] == 0) {
        into[0] = from[0];
        into[1] = from[1];
        into[2] = from[2];
        return;
    }
    const double n = into[0] + from[0];
    const double delta = from[1] - into[1];
    into[1] += delta * (from[0] / n);
    into[2] += from[2] + delta * delta * (into[0] * from[0] / n);
    into[0] = n;
}

// (event_ms, order) pairs: does `a` come before `b`?
bool earlier(const double* a, const double* b) {
    return a[0] < b[0] || (a[0] == b[0] && a[1] < b[1]);
}

void copy3(double* into, const double* from) {
    into[0] = from[0];
    into[1] = from[1];
    into[2] = from[2];
}

}  // namespace

// The common case, compiled once per combination of aggregates present (SimplePlan::mask):
// straight-line updates with no test of which aggregates exist, in the order of the loop in
// add_general() (each aggregate has its own slots, so the order does not change the result).
template <unsigned Mask>
void add_simple(const AggregateSet::SimplePlan& plan, double* values, const double* fields) {
    using P = AggregateSet::SimplePlan;
    if constexpr ((Mask & P::has_count_events) != 0) values[plan.count_events] += 1;
    if constexpr ((Mask & ~P::has_count_events) != 0) {
        const double value = fields[plan.field];
        if (!std::isfinite(value)) return;
        if constexpr ((Mask & P::has_count) != 0) values[plan.count] += 1;
        if constexpr ((Mask & P::has_sum) != 0) add_sum(values[plan.sum], value);
        if constexpr ((Mask & P::has_min) != 0)
            if (less_for_min(value, values[plan.min])) values[plan.min] = value;
        if constexpr ((Mask & P::has_max) != 0)
            if (greater_for_max(value, values[plan.max])) values[plan.max] = value;
        if constexpr ((Mask & P::has_mean) != 0) {
            values[plan.mean] += 1;
            values[plan.mean + 1] += value;
        }
    }
}

template <size_t... I>
constexpr std::array<AggregateSet::SimpleAdd, sizeof...(I)> make_simple_adds(
    std::index_sequence<I...>) {
    return {&add_simple<static_cast<unsigned>(I)>...};
}

constexpr auto simple_adds = make_simple_adds(std::make_index_sequence<64>{});

Result<AggregateFn> parse_aggregate_fn(std::string_view name) {
    std::string known;
    for (const FnInfo& fn : fn_infos) {
        if (fn.name == name) return fn.fn;
        if (!known.empty()) known += ", ";
        known += fn.name;
    }
    return fail("unknown aggregate function \"" + std::string(name) + "\": use one of " + known);
}

std::string_view aggregate_fn_name(AggregateFn fn) {
    return info(fn).name;
}

AggregateSet::AddKind AggregateSet::add_kind(AggregateFn fn) {
    switch (fn) {
        case AggregateFn::count:
            return AddKind::count;
        case AggregateFn::sum:
            return AddKind::sum;
        case AggregateFn::min:
            return AddKind::min;
        case AggregateFn::max:
            return AddKind::max;
        case AggregateFn::mean:
            return AddKind::mean;
        case AggregateFn::first:
            return AddKind::first;
        case AggregateFn::last:
            return AddKind::last;
        case AggregateFn::variance:
        case AggregateFn::stddev:
            return AddKind::moments;
        case AggregateFn::quantile:
            return AddKind::quantile;
    }
    TM_ASSERT(false);
    return AddKind::count;
}

AggregateSet::AggregateSet(std::vector<AggregateSpec> specs, QuantileOptions quantile)
    : specs_(std::move(specs)), quantile_(quantile) {
    for (const AggregateSpec& spec : specs_) {
        TM_ASSERT(spec.field >= 0 || (spec.field == -1 && spec.fn == AggregateFn::count));
        offsets_.push_back(slots_);
        AddOp op{AddKind::count_events, slots_, 0, 0};
        slots_ += info(spec.fn).slots;
        if (spec.fn == AggregateFn::quantile) {
            TM_ASSERT(spec.q >= 0 && spec.q <= 1);
            op.sketch = sketches_;
            sketch_of_.push_back(static_cast<int32_t>(sketches_++));
        } else {
            sketch_of_.push_back(-1);
        }
        if (spec.field >= 0) {
            op.field = static_cast<uint32_t>(spec.field);
            op.kind = add_kind(spec.fn);
        }
        add_ops_.push_back(op);
    }
    plan_simple();
}

void AggregateSet::plan_simple() {
    simple_.usable = true;
    bool field_seen = false;
    for (const AddOp& op : add_ops_) {
        int32_t* slot = nullptr;
        switch (op.kind) {
            case AddKind::count_events:
                slot = &simple_.count_events;
                break;
            case AddKind::count:
                slot = &simple_.count;
                break;
            case AddKind::sum:
                slot = &simple_.sum;
                break;
            case AddKind::min:
                slot = &simple_.min;
                break;
            case AddKind::max:
                slot = &simple_.max;
                break;
            case AddKind::mean:
                slot = &simple_.mean;
                break;
            default:
                break;
        }
        if (!slot || *slot >= 0) {
            simple_.usable = false;
            break;
        }
        *slot = static_cast<int32_t>(op.slot);
        if (op.kind == AddKind::count_events) continue;
        if (field_seen && op.field != simple_.field) {
            simple_.usable = false;
            break;
        }
        field_seen = true;
        simple_.field = op.field;
    }
    if (!simple_.usable) return;
    unsigned mask = 0;
    if (simple_.count_events >= 0) mask |= SimplePlan::has_count_events;
    if (simple_.count >= 0) mask |= SimplePlan::has_count;
    if (simple_.sum >= 0) mask |= SimplePlan::has_sum;
    if (simple_.min >= 0) mask |= SimplePlan::has_min;
    if (simple_.max >= 0) mask |= SimplePlan::has_max;
    if (simple_.mean >= 0) mask |= SimplePlan::has_mean;
    simple_add_ = simple_adds[mask];
}

AggregateState AggregateSet::make() const {
    AggregateState state;
    state.values.assign(slots_, 0.0);
    if (sketches_ > 0)
        state.sketches.assign(sketches_,
                              QuantileSketch(quantile_.relative_error, quantile_.buckets_max));
    for (size_t i = 0; i < specs_.size(); ++i) {
        double* slot = state.values.data() + offsets_[i];
        switch (specs_[i].fn) {
            case AggregateFn::sum:
                slot[0] = sum_empty;
                break;
            case AggregateFn::min:
                slot[0] = infinity;
                break;
            case AggregateFn::max:
                slot[0] = -infinity;
                break;
            case AggregateFn::first:
                slot[0] = infinity;
                break;
            case AggregateFn::last:
                slot[0] = -infinity;
                break;
            default:
                break;
        }
    }
    return state;
}

void AggregateSet::add_general(AggregateState& state, const double* fields, int64_t event_ms,
                               uint64_t order) const {
    TM_ASSERT(state.values.size() == slots_);
    double* const values = state.values.data();
    for (const AddOp& op : add_ops_) {
        double* slot = values + op.slot;
        if (op.kind == AddKind::count_events) {
            slot[0] += 1;
            continue;
        }
        const double value = fields[op.field];
        // Missing fields are NaN; infinities are skipped too, since they would poison sums and
        // moments for the rest of the window and JSON cannot carry them.
        if (!std::isfinite(value)) continue;
        switch (op.kind) {
            case AddKind::count_events:
            case AddKind::count:
                slot[0] += 1;
                break;
            case AddKind::sum:
                add_sum(slot[0], value);
                break;
            case AddKind::min:
                if (less_for_min(value, slot[0])) slot[0] = value;
                break;
            case AddKind::max:
                if (greater_for_max(value, slot[0])) slot[0] = value;
                break;
            case AddKind::mean:
                slot[0] += 1;
                slot[1] += value;
                break;
            case AddKind::first:
            case AddKind::last: {
                const double candidate[3] = {static_cast<double>(event_ms),
                                             static_cast<double>(order), value};
                const bool replace =
                    op.kind == AddKind::first ? earlier(candidate, slot) : earlier(slot, candidate);
                if (replace) copy3(slot, candidate);
                break;
            }
            case AddKind::moments:
                add_moments(slot, value);
                break;
            case AddKind::quantile:
                state.sketches[op.sketch].add(value);
                break;
        }
    }
}

void AggregateSet::merge(AggregateState& into, const AggregateState& from) const {
    TM_ASSERT(into.values.size() == slots_ && from.values.size() == slots_);
    TM_ASSERT(into.sketches.size() == from.sketches.size());
    for (size_t i = 0; i < specs_.size(); ++i) {
        double* slot = into.values.data() + offsets_[i];
        const double* other = from.values.data() + offsets_[i];
        switch (specs_[i].fn) {
            case AggregateFn::count:
                slot[0] += other[0];
                break;
            case AggregateFn::sum:
                if (!is_sum_empty(other[0])) slot[0] += other[0];
                break;
            case AggregateFn::min:
                if (less_for_min(other[0], slot[0])) slot[0] = other[0];
                break;
            case AggregateFn::max:
                if (greater_for_max(other[0], slot[0])) slot[0] = other[0];
                break;
            case AggregateFn::mean:
                slot[0] += other[0];
                slot[1] += other[1];
                break;
            case AggregateFn::first:
                if (earlier(other, slot)) copy3(slot, other);
                break;
            case AggregateFn::last:
                if (earlier(slot, other)) copy3(slot, other);
                break;
            case AggregateFn::variance:
            case AggregateFn::stddev:
                merge_moments(slot, other);
                break;
            case AggregateFn::quantile: {
                const auto s = static_cast<size_t>(sketch_of_[i]);
                into.sketches[s].merge(from.sketches[s]);
                break;
            }
        }
    }
}

void AggregateSet::results(const AggregateState& state,
                           std::vector<std::optional<double>>& out) const {
    TM_ASSERT(state.values.size() == slots_);
    out.clear();
    for (size_t i = 0; i < specs_.size(); ++i) {
        const double* slot = state.values.data() + offsets_[i];
        std::optional<double> result;
        switch (specs_[i].fn) {
            case AggregateFn::count:
                result = slot[0];
                break;
            case AggregateFn::sum:
                if (!is_sum_empty(slot[0])) result = slot[0];
                break;
            case AggregateFn::min:
            case AggregateFn::max:
                if (std::isfinite(slot[0])) result = slot[0];
                break;
            case AggregateFn::mean:
                if (slot[0] > 0) result = slot[1] / slot[0];
                break;
            case AggregateFn::first:
            case AggregateFn::last:
                if (std::isfinite(slot[0])) result = slot[2];
                break;
            case AggregateFn::variance:
            case AggregateFn::stddev:
                if (slot[0] > 0) {
                    // M2 can round a hair below zero when every value is equal.
                    const double variance = std::max(0.0, slot[2] / slot[0]);
                    result = specs_[i].fn == AggregateFn::variance ? variance : std::sqrt(variance);
                }
                break;
            case AggregateFn::quantile: {
                const QuantileSketch& sketch = state.sketches[static_cast<size_t>(sketch_of_[i])];
                if (!sketch.empty()) result = sketch.quantile(specs_[i].q);
                break;
            }
        }
        out.push_back(result);
    }
}

size_t AggregateSet::bytes(const AggregateState& state) const {
    size_t total = sizeof(AggregateState) + state.values.heap_capacity() * sizeof(double);
    for (const QuantileSketch& sketch : state.sketches)
        total += sketch.bytes();
    return total + state.sketches.overhead_bytes();
}

size_t AggregateSet::bytes_per_window() const {
    const size_t heap_slots = slots_ > SlotValues::inline_max ? slots_ : 0;
    return sizeof(AggregateState) + heap_slots * sizeof(double) +
           sketches_ * sizeof(QuantileSketch) + SketchList::overhead_bytes(sketches_);
}

void AggregateSet::encode(const AggregateState& state, std::string& out,
                          StateEncoding encoding) const {
    TM_ASSERT(state.values.size() == slots_);
    // The shape goes first so that state written under another aggregate list is refused.
    if (encoding == StateEncoding::compact) {
        bytes::put_varint(out, slots_);
        bytes::put_varint(out, state.sketches.size());
        for (double value : state.values)
            bytes::put_f64_compact(out, value);
    } else {
        bytes::put_u32(out, slots_);
        bytes::put_u32(out, static_cast<uint32_t>(state.sketches.size()));
        for (double value : state.values)
            bytes::put_f64(out, value);
    }
    for (const QuantileSketch& sketch : state.sketches)
        sketch.encode(out);
}

bool AggregateSet::decode(std::string_view& in, AggregateState& state,
                          StateEncoding encoding) const {
    AggregateState fresh = make();
    uint64_t slots = 0;
    uint64_t sketches = 0;
    if (encoding == StateEncoding::compact) {
        if (!bytes::get_varint(in, slots) || !bytes::get_varint(in, sketches)) return false;
    } else {
        uint32_t slots32 = 0, sketches32 = 0;
        if (!bytes::get_u32(in, slots32) || !bytes::get_u32(in, sketches32)) return false;
        slots = slots32;
        sketches = sketches32;
    }
    if (slots != slots_ || sketches != fresh.sketches.size()) return false;
    for (double& value : fresh.values) {
        const bool ok = encoding == StateEncoding::compact ? bytes::get_f64_compact(in, value)
                                                           : bytes::get_f64(in, value);
        if (!ok) return false;
    }
    for (QuantileSketch& sketch : fresh.sketches) {
        if (!sketch.decode(in)) return false;
        // A sketch made with other parameters could not be merged with this pipeline's.
        if (sketch.relative_error() != quantile_.relative_error ||
            sketch.buckets_max() != quantile_.buckets_max) {
            return false;
        }
    }
    state = std::move(fresh);
    return true;
}

}  // namespace tidemark::core
