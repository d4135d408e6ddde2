// The engine's timers (internal): per watermark domain, when each key is next due (a window to
// fire or purge).
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/engine/types.h"
#include "core/result.h"

namespace tidemark::core::detail {

// Domain::timers is a max-heap under this order, so its front is the earliest due.
inline bool timer_later(const TimerEntry& a, const TimerEntry& b) {
    return a.due_ms > b.due_ms;
}

inline bool timer_valid(const Domain& d, const TimerEntry& e) {
    return e.key->due_ms == e.due_ms && e.key->domain == &d;
}

// Drops the stale entries and the duplicates (a key that moved its timer away and back).
void compact_timers(Domain& d);

// The earliest due time of the domain, time_max when none.
int64_t timer_front(Domain& d);

// Sets the timer of `k`, which has none, in its domain.
inline void timer_add(KeyState& k, int64_t due) {
    Domain& d = *k.domain;
    TM_ASSERT(k.due_ms == time_max && due != time_max);
    if (d.timers.size() >= 2 * d.timers_live + 16) compact_timers(d);
    k.due_ms = due;
    ++d.timers_live;
    d.timers.push_back({due, &k});
    std::push_heap(d.timers.begin(), d.timers.end(), timer_later);
}

// The entry stays in the heap until it comes to the front.
inline void timer_cancel(KeyState& k) {
    if (k.due_ms == time_max) return;
    k.due_ms = time_max;
    TM_ASSERT(k.domain->timers_live > 0);
    --k.domain->timers_live;
}

}  // namespace tidemark::core::detail
