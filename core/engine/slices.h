// Tumbling and hopping windows (internal): the per-event part, inlined where process() is
// compiled, and the due times that the timers compute. A window of `size` every `advance` is
// the merge of slices of gcd(size, advance); a tumbling window is one slice.
#pragma once

#include <algorithm>
#include <iterator>

#include "core/engine/pipeline_run.h"
#include "core/time_math.h"

namespace tidemark::core::detail {

inline int64_t PipelineRun::slice_start(int64_t t) const {
    return floor_to(t, slice_ms_, offset_ms_);
}
// The latest window start at or before t, and the earliest window start whose window holds t.
inline int64_t PipelineRun::last_window_start(int64_t t) const {
    return floor_to(t, advance_ms_, offset_ms_);
}
inline int64_t PipelineRun::first_window_start(int64_t t) const {
    return floor_to(t - size_ms_, advance_ms_, offset_ms_) + advance_ms_;
}

// The earliest window end after fired_through whose window holds a slice.
inline int64_t PipelineRun::next_fire(const KeyState& k) const {
    for (const Unit& u : k.units) {
        int64_t end = first_window_start(u.start) + size_ms_;
        if (end <= k.fired_through_ms) {
            end = floor_to(k.fired_through_ms - size_ms_, advance_ms_, offset_ms_) + advance_ms_ +
                  size_ms_;
            if (end - size_ms_ > u.start) continue;  // every window of this slice fired
        }
        return end;
    }
    return time_max;
}

inline int64_t PipelineRun::slice_purge_at(const Unit& u) const {
    return sat_add(last_window_start(u.start) + size_ms_, lateness_ms_);
}

inline int64_t PipelineRun::slice_due(const KeyState& k) const {
    int64_t due = next_fire(k);
    if (!k.units.empty()) due = std::min(due, slice_purge_at(k.units.front()));
    if (!k.fired.empty()) due = std::min(due, sat_add(k.fired.front().end, lateness_ms_));
    return due;
}

// The window starts of slice [s, s + slice_ms): as last_window_start / first_window_start of
// any t in it, since advance and size are multiples of the slice. Without a division when
// the slice is as long as the advance (every tumbling and most hopping windows).
inline int64_t PipelineRun::slice_last_window_start(int64_t s) const {
    return advance_ms_ == slice_ms_ ? s : floor_to(s, advance_ms_, offset_ms_);
}
inline int64_t PipelineRun::slice_first_window_start(int64_t s) const {
    return advance_ms_ == slice_ms_ ? s - size_ms_ + advance_ms_
                                    : floor_to(s - size_ms_, advance_ms_, offset_ms_) + advance_ms_;
}

// Always inlined into process(), its only caller, as it was when both were one function.
TM_HOT void PipelineRun::slice_event(KeyState* k, std::string_view key, Partition* p, Domain& d,
                                     int64_t t, const Event& event, EmissionSink& sink) {
    const int64_t wm = d.watermark;
    // Most events land in the key's newest slice: then its bounds give the slice start.
    Unit* newest = k && !k->units.empty() ? &k->units.back() : nullptr;
    const bool in_newest = newest && t >= newest->start && t < newest->end;
    const int64_t s = in_newest ? newest->start : slice_start(t);
    const int64_t last_start = slice_last_window_start(s);
    if (wm != time_min && sat_add(last_start + size_ms_, lateness_ms_) <= wm) {
        too_late(sink, key, event, t, last_start, last_start + size_ms_, wm);
        return;
    }
    k = admit_key(k, key, p, d, event, t, sink);
    if (!k) return;
    Unit* unit = in_newest ? newest : nullptr;
    bool created = false;
    if (!unit) {
        auto it = k->units.end();
        while (it != k->units.begin() && std::prev(it)->start > s)
            --it;
        if (it != k->units.begin() && std::prev(it)->start == s) {
            unit = &*std::prev(it);
        } else {
            if (units_total_ + fired_total_ >= spec_.limits.open_windows_max) {
                refuse(sink, key, event, t, Limit::open_windows, wm);
                if (k->units.empty() && k->fired.empty()) remove_key(k);
                return;
            }
            Unit u;
            u.start = s;
            u.end = s + slice_ms_;
            u.state = fresh_;
            const auto at = it - k->units.begin();
            reserve_one_more(k->units);
            unit = &*k->units.insert(k->units.begin() + at, std::move(u));
            ++units_total_;
            created = true;
        }
    }
    aggs_.add(unit->state, event.fields.data(), t, event.order);
    unit->dirty = true;
    mark_dirty(*k);
    const bool late = wm != time_min && slice_first_window_start(s) + size_ms_ <= wm;
    if (late) {
        if (refire_late(*k, t, wm, sink)) ++stats_.late_updated;
        k->fired_through_ms = std::max(k->fired_through_ms, wm);
        k->meta_dirty = true;
        reschedule(*k);
    } else if (created) {
        reschedule(*k);
    }
}

}  // namespace tidemark::core::detail
