// Session windows (internal): the due time that the timers compute, and the per-event fast
// path, inlined where they are.
#pragma once

#include <algorithm>

#include "core/engine/pipeline_run.h"

namespace tidemark::core::detail {

inline int64_t PipelineRun::session_due(const KeyState& k) const {
    int64_t due = time_max;
    for (const Unit& u : k.units)
        due = std::min(due, u.fired ? sat_add(u.end, lateness_ms_) : u.end);
    return due;
}

// Most events fall inside their key's newest session, which has not fired, and keep it under
// max_duration (issue 31): the session grows in place and nothing else changes, which is
// what session_event_slow does for such an event, without its general span search. The
// session's end does not move earlier (its latest event does not), so the key's due time
// does not either, and its timer, which may ring early, never late, stays where it is.
// Everything else (no key yet, the event before, after or across sessions, at the
// max_duration cut, a fired session, an event that would fire its session at once because
// the watermark is past its end) takes the slow path. Always inlined into process().
TM_HOT void PipelineRun::session_event(KeyState* k, std::string_view key, Partition* p, Domain& d,
                                       int64_t t, const Event& event, EmissionSink& sink) {
    if (k && !k->units.empty()) [[likely]] {
        Unit& u = k->units.back();
        const int64_t last_ms = std::max(u.last_ms, t);
        if (u.start <= t && t < u.end && !u.fired &&
            last_ms - u.start < spec_.window.max_duration_ms) [[likely]] {
            const int64_t end = std::min(sat_add(last_ms, spec_.window.gap_ms),
                                         sat_add(u.start, spec_.window.max_duration_ms));
            // end > watermark: neither too late nor late (lateness is never negative).
            if (end > d.watermark) [[likely]] {
                if (!scope_partition_) set_key_partition(*k, p);
                mark_dirty(*k);
                const bool moved_earlier = end < u.end;
                u.end = end;
                u.last_ms = last_ms;
                aggs_.add(u.state, event.fields.data(), t, event.order);
                u.dirty = true;
                if (moved_earlier || k->due_ms == time_max) reschedule(*k);
                return;
            }
        }
    }
    session_event_slow(k, key, p, d, t, event, sink);
}

}  // namespace tidemark::core::detail
