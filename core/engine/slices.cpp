#include <algorithm>
#include <cstddef>
#include <utility>

#include "core/engine/slices.h"

namespace tidemark::core::detail {

// The aggregate state of window [start, end): the slice itself for tumbling windows, the
// merge of its slices for hopping ones.
const AggregateState* PipelineRun::window_state(const KeyState& k, int64_t start, int64_t end) {
    if (slice_ms_ == size_ms_) {
        for (const Unit& u : k.units)
            if (u.start == start) return &u.state;
        return nullptr;
    }
    scratch_ = fresh_;
    bool any = false;
    for (const Unit& u : k.units) {
        if (u.start < start) continue;
        if (u.start >= end) break;
        aggs_.merge(scratch_, u.state);
        any = true;
    }
    return any ? &scratch_ : nullptr;
}

void PipelineRun::slice_due_reached(KeyState& k, int64_t due, Domain& d, EmissionSink& sink) {
    k.meta_dirty = true;
    const int64_t fire_end = next_fire(k);
    TM_ASSERT(fire_end >= due);
    if (fire_end == due) {
        const int64_t start = due - size_ms_;
        const AggregateState* state = window_state(k, start, due);
        TM_ASSERT(state != nullptr);
        aggs_.results(*state, values_);
        emit(sink, k, start, due, EmissionKind::final_result, 0,
             d.idle ? ClosedBy::idle : ClosedBy::watermark, values_, d.watermark);
        k.fired_through_ms = due;
        if (lateness_ms_ > 0) {
            Fired f{start, due, 0, {}};
            if (retract_) f.values = values_;
            k.fired.push_back(std::move(f));
            ++fired_total_;
        }
    }
    size_t n = 0;
    while (n < k.units.size() && slice_purge_at(k.units[n]) <= due) {
        if (tracking_ && k.units[n].persisted) erased_.push_back(unit_key(k.key, k.units[n].start));
        ++n;
    }
    k.units.erase(k.units.begin(), k.units.begin() + static_cast<std::ptrdiff_t>(n));
    units_total_ -= n;
    size_t m = 0;
    while (m < k.fired.size() && sat_add(k.fired[m].end, lateness_ms_) <= due)
        ++m;
    k.fired.erase(k.fired.begin(), k.fired.begin() + static_cast<std::ptrdiff_t>(m));
    fired_total_ -= m;
    mark_dirty(k);
}

// A late event inside the horizon: every window holding it that already closed is emitted
// again, as the next revision (or as its first result if it had none when it closed).
bool PipelineRun::refire_late(KeyState& k, int64_t t, int64_t wm, EmissionSink& sink) {
    bool any = false;
    bool missed = false;
    for (int64_t ws = first_window_start(t); ws <= last_window_start(t); ws += advance_ms_) {
        const int64_t end = ws + size_ms_;
        if (end > wm) break;
        if (sat_add(end, lateness_ms_) <= wm) {
            // Hopping: too late for this window, on time for a later one that holds t.
            count_too_late_window(ws, end);
            missed = true;
            continue;
        }
        const AggregateState* state = window_state(k, ws, end);
        TM_ASSERT(state != nullptr);
        aggs_.results(*state, values_);
        auto f = std::lower_bound(k.fired.begin(), k.fired.end(), end,
                                  [](const Fired& a, int64_t e) { return a.end < e; });
        if (f != k.fired.end() && f->end == end) {
            if (retract_)
                emit(sink, k, ws, end, EmissionKind::retract, f->revision, ClosedBy::late,
                     f->values, wm);
            ++f->revision;
            emit(sink, k, ws, end, EmissionKind::update, f->revision, ClosedBy::late, values_, wm);
            if (retract_) f->values = values_;
        } else {
            emit(sink, k, ws, end, EmissionKind::final_result, 0, ClosedBy::late, values_, wm);
            Fired nf{ws, end, 0, {}};
            if (retract_) nf.values = values_;
            k.fired.insert(f, std::move(nf));
            ++fired_total_;
        }
        any = true;
    }
    if (missed) ++stats_.too_late_partial;
    return any;
}

}  // namespace tidemark::core::detail
