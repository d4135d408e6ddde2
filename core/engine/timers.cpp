#include "core/engine/timers.h"

#include <algorithm>
#include <functional>

#include "core/engine/sessions.h"
#include "core/engine/slices.h"

namespace tidemark::core::detail {

void compact_timers(Domain& d) {
    std::erase_if(d.timers, [&](const TimerEntry& e) { return !timer_valid(d, e); });
    std::sort(d.timers.begin(), d.timers.end(), [](const TimerEntry& a, const TimerEntry& b) {
        return a.due_ms != b.due_ms ? a.due_ms < b.due_ms : std::less<>{}(a.key, b.key);
    });
    d.timers.erase(std::unique(d.timers.begin(), d.timers.end(),
                               [](const TimerEntry& a, const TimerEntry& b) {
                                   return a.due_ms == b.due_ms && a.key == b.key;
                               }),
                   d.timers.end());
    std::make_heap(d.timers.begin(), d.timers.end(), timer_later);
    TM_ASSERT(d.timers.size() == d.timers_live);
}

int64_t timer_front(Domain& d) {
    while (!d.timers.empty() && !timer_valid(d, d.timers.front())) {
        std::pop_heap(d.timers.begin(), d.timers.end(), timer_later);
        d.timers.pop_back();
    }
    return d.timers.empty() ? time_max : d.timers.front().due_ms;
}

int64_t PipelineRun::compute_due(const KeyState& k) const {
    return session_ ? session_due(k) : slice_due(k);
}

// Timers may ring early, never late: when a key's due moves later (a session grows), its
// entry stays where it is and fire_due() moves it when it rings, so the common case costs no
// heap update. `due_ms` is the entry's position, not necessarily the key's real due.
void PipelineRun::reschedule(KeyState& k) {
    const int64_t due = compute_due(k);
    if (k.due_ms != time_max && due >= k.due_ms) return;
    timer_cancel(k);
    if (due == time_max) return;
    timer_add(k, due);
    if (scope_partition_ && k.domain->idle && timer_front(*k.domain) == due)
        schedule_idle(k.partition);
}

// Sorts keys as std::string's operator< does and drops duplicates. Keys of one stream
// mostly share a prefix ("device-"): each is given the 8 bytes that follow the prefix
// common to all, big-endian, so that most comparisons are of one integer.
void PipelineRun::sort_by_key(std::vector<KeyState*>& keys) {
    if (keys.size() < 2) return;
    std::string_view first = keys.front()->key;
    size_t common = first.size();
    for (const KeyState* k : keys) {
        const std::string_view name = k->key;
        size_t i = 0;
        const size_t n = std::min(common, name.size());
        while (i < n && name[i] == first[i])
            ++i;
        common = i;
    }
    sort_scratch_.clear();
    for (KeyState* k : keys) {
        const std::string_view name = std::string_view(k->key).substr(common);
        uint64_t rank = 0;
        for (size_t i = 0; i < 8; ++i)
            rank = (rank << 8) | (i < name.size() ? static_cast<uint8_t>(name[i]) : 0);
        sort_scratch_.push_back({rank, k});
    }
    std::sort(sort_scratch_.begin(), sort_scratch_.end(),
              [](const RankedKey& a, const RankedKey& b) {
                  if (a.rank != b.rank) return a.rank < b.rank;
                  return a.key->key < b.key->key;
              });
    keys.clear();
    for (const RankedKey& r : sort_scratch_)
        if (keys.empty() || keys.back() != r.key) keys.push_back(r.key);
}

// Fires in (due, key) order: every key due at the earliest time, sorted by key, then the
// next time. Firing a key only moves that key's own timer, and to a later time.
void PipelineRun::fire_due_slow(Domain& d, EmissionSink& sink) {
    for (;;) {
        const int64_t due = timer_front(d);
        if (due > d.watermark) break;
        due_keys_.clear();
        while (!d.timers.empty() && d.timers.front().due_ms == due) {
            const TimerEntry e = d.timers.front();
            std::pop_heap(d.timers.begin(), d.timers.end(), timer_later);
            d.timers.pop_back();
            if (timer_valid(d, e)) due_keys_.push_back(e.key);
        }
        sort_by_key(due_keys_);
        // Off the timers before any fires, so that the heap and timers_live agree while
        // firing reschedules (and may compact).
        for (KeyState* k : due_keys_) {
            TM_ASSERT(k->due_ms == due && k->domain == &d);
            timer_cancel(*k);
        }
        for (KeyState* k : due_keys_) {
            const int64_t real_due = compute_due(*k);
            if (real_due > due) {  // rang early: move it to where it belongs
                if (real_due != time_max) timer_add(*k, real_due);
                continue;
            }
            TM_ASSERT(real_due == due);
            if (session_)
                session_due_reached(*k, due, d, sink);
            else
                slice_due_reached(*k, due, d, sink);
            if (k->units.empty() && k->fired.empty())
                remove_key(k);
            else
                reschedule(*k);
        }
    }
}

}  // namespace tidemark::core::detail
