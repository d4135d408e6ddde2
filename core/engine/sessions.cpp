#include <algorithm>
#include <cstddef>
#include <utility>

#include "core/engine/sessions.h"

namespace tidemark::core::detail {

void PipelineRun::session_due_reached(KeyState& k, int64_t due, Domain& d, EmissionSink& sink) {
    for (Unit& u : k.units) {
        if (u.fired || u.end != due) continue;
        aggs_.results(u.state, values_);
        emit(sink, k, u.start, u.end, EmissionKind::final_result, 0,
             d.idle ? ClosedBy::idle : ClosedBy::watermark, values_, d.watermark);
        u.fired = true;
        u.revision = 0;
        u.dirty = true;
    }
    size_t kept = 0;
    for (size_t i = 0; i < k.units.size(); ++i) {
        Unit& u = k.units[i];
        if (u.fired && sat_add(u.end, lateness_ms_) <= due) {
            if (tracking_ && u.persisted) erased_.push_back(unit_key(k.key, u.start));
            --units_total_;
            continue;
        }
        if (kept != i) k.units[kept] = std::move(u);
        ++kept;
    }
    k.units.resize(kept);
    mark_dirty(k);
}

// The sessions this event overlaps, [first, last) in start order: a key's sessions never
// overlap one another, so their ends are in order too. Every event of a session lies inside it,
// and a session spans less than max_duration: join all it overlaps if that fits; else the one
// holding t (it always fits); else the first one if that fits; else a session of its own, cut
// where the next one starts. Inlined: it runs for every event of a session pipeline.
TM_HOT PipelineRun::SessionSpan PipelineRun::session_span(const KeyState* k, int64_t t,
                                                          int64_t t_end) const {
    const int64_t max_duration = spec_.window.max_duration_ms;
    SessionSpan span;
    span.start = span.last_ms = t;
    span.end = std::min(t_end, sat_add(t, max_duration));
    if (!k) return span;
    const auto& units = k->units;
    // Most events fall inside their key's newest session (issue 31's fast path): it is the one
    // they join, every older session ends before it starts, and none comes after it.
    if (!units.empty()) {
        const Unit& newest = units.back();
        const int64_t last_ms = std::max(newest.last_ms, t);
        if (newest.start <= t && t < newest.end && last_ms - newest.start < max_duration) {
            span.first = units.size() - 1;
            span.last = units.size();
            span.start = newest.start;
            span.last_ms = last_ms;
            span.end = std::min(sat_add(last_ms, spec_.window.gap_ms),
                                sat_add(newest.start, max_duration));
            return span;
        }
    }
    size_t& first = span.first;
    size_t& last = span.last;
    while (first < units.size() && units[first].end <= t)
        ++first;
    last = first;
    while (last < units.size() && units[last].start < t_end)
        ++last;
    const auto fits = [&](size_t a, size_t b) {
        int64_t low = std::min(t, units[a].start), high = t;
        for (size_t i = a; i < b; ++i)
            high = std::max(high, units[i].last_ms);
        return high - low < max_duration;
    };
    if (first != last && !fits(first, last)) {
        if (units[first].start <= t || fits(first, first + 1))
            last = first + 1;
        else
            last = first;
    }
    for (size_t i = first; i < last; ++i) {
        span.start = std::min(span.start, units[i].start);
        span.last_ms = std::max(span.last_ms, units[i].last_ms);
    }
    span.end =
        std::min(sat_add(span.last_ms, spec_.window.gap_ms), sat_add(span.start, max_duration));
    if (last < units.size()) span.end = std::min(span.end, units[last].start);
    return span;
}

// Too late when the session the event would make is past its horizon (see SessionSpan).
bool PipelineRun::session_too_late(const KeyState* k, int64_t t, int64_t wm) const {
    const SessionSpan span = session_span(k, t, sat_add(t, spec_.window.gap_ms));
    return sat_add(span.end, lateness_ms_) <= wm;
}

// Every event the fast path of session_event (sessions.h) does not take.
void PipelineRun::session_event_slow(KeyState* k, std::string_view key, Partition* p, Domain& d,
                                     int64_t t, const Event& event, EmissionSink& sink) {
    const int64_t wm = d.watermark;
    const int64_t gap = spec_.window.gap_ms;
    const int64_t t_end = sat_add(t, gap);
    const SessionSpan span = session_span(k, t, t_end);
    const size_t first = span.first, last = span.last;
    const int64_t start = span.start, last_ms = span.last_ms, end = span.end;
    if (wm != time_min && sat_add(end, lateness_ms_) <= wm) {
        too_late(sink, key, event, t, start, end, wm);
        return;
    }
    k = admit_key(k, key, p, d, event, t, sink);
    if (!k) return;
    if (first == last && units_total_ + fired_total_ >= spec_.limits.open_windows_max) {
        refuse(sink, key, event, t, Limit::open_windows, wm);
        if (k->units.empty()) remove_key(k);
        return;
    }
    auto& units = k->units;
    TM_ASSERT(start <= t && t <= last_ms && last_ms < end);
    const bool late = end <= wm;
    mark_dirty(*k);

    // One open session grows: in place, no new window identity has been published yet.
    if (last == first + 1 && !units[first].fired) {
        Unit& u = units[first];
        if (u.start != start) {
            // Its record is under its start: the new start is a record not yet written.
            if (tracking_ && u.persisted) erased_.push_back(unit_key(k->key, u.start));
            u.persisted = false;
        }
        u.start = start;
        u.end = end;
        u.last_ms = last_ms;
        aggs_.add(u.state, event.fields.data(), t, event.order);
        u.dirty = true;
        if (late) {
            aggs_.results(u.state, values_);
            emit(sink, *k, start, end, EmissionKind::final_result, 0, ClosedBy::late, values_, wm);
            u.fired = true;
            ++stats_.late_updated;
        }
        reschedule(*k);
        return;
    }
    // The same window as before: update it in place.
    if (last == first + 1 && units[first].start == start && units[first].end == end) {
        Unit& u = units[first];
        // What the consumer holds of a fired session: its results before this event.
        if (u.fired && retract_) aggs_.results(u.state, previous_values_);
        u.last_ms = last_ms;
        aggs_.add(u.state, event.fields.data(), t, event.order);
        u.dirty = true;
        if (u.fired) {
            aggs_.results(u.state, values_);
            if (retract_)
                emit(sink, *k, u.start, u.end, EmissionKind::retract, u.revision, ClosedBy::late,
                     previous_values_, wm);
            ++u.revision;
            emit(sink, *k, u.start, u.end, EmissionKind::update, u.revision, ClosedBy::late,
                 values_, wm);
            ++stats_.late_updated;
        }
        return;
    }
    session_merge(*k, span, start, end, last_ms, late, t, event, wm, sink);
}

// A new or merged window: every fired session it absorbs no longer exists.
void PipelineRun::session_merge(KeyState& k, SessionSpan span, int64_t start, int64_t end,
                                int64_t last_ms, bool late, int64_t t, const Event& event,
                                int64_t wm, EmissionSink& sink) {
    const size_t first = span.first, last = span.last;
    auto& units = k.units;
    Unit merged;
    merged.start = start;
    merged.end = end;
    merged.last_ms = last_ms;
    merged.state = fresh_;
    for (size_t i = first; i < last; ++i) {
        Unit& u = units[i];
        aggs_.merge(merged.state, u.state);
        if (u.fired) {
            // A fired session's state changes only with a re-emission, so its results are
            // what the consumer holds: the retract carries them in both correction modes.
            aggs_.results(u.state, values_);
            emit(sink, k, u.start, u.end, EmissionKind::retract, u.revision, ClosedBy::merge,
                 values_, wm);
        }
        if (tracking_ && u.persisted) erased_.push_back(unit_key(k.key, u.start));
    }
    aggs_.add(merged.state, event.fields.data(), t, event.order);
    if (late) {
        aggs_.results(merged.state, values_);
        emit(sink, k, start, end, EmissionKind::final_result, 0, ClosedBy::late, values_, wm);
        merged.fired = true;
        ++stats_.late_updated;
    }
    units_total_ -= (last - first);
    units.erase(units.begin() + static_cast<std::ptrdiff_t>(first),
                units.begin() + static_cast<std::ptrdiff_t>(last));
    reserve_one_more(units);
    auto pos = std::lower_bound(units.begin(), units.end(), start,
                                [](const Unit& u, int64_t s) { return u.start < s; });
    units.insert(pos, std::move(merged));
    ++units_total_;
    reschedule(k);
}

}  // namespace tidemark::core::detail
