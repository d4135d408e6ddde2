// The engine's idle queue (internal): which active partition goes idle next.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/engine/types.h"

namespace tidemark::core::detail {

// An active partition's place in the idle queue: `last_ingest_ms` is the partition's last
// ingest time when the entry was (re)placed, never later than the partition's own.
struct ActivityEntry {
    int64_t last_ingest_ms;
    uint32_t index;
    Partition* partition;
};

/// Active partitions, earliest (last ingest, index) first.
///
/// Operation: a binary heap (std::push_heap / pop_heap, as the timers). An event only writes
/// its partition's last ingest time; the partition's entry is brought up to date when it comes
/// to the front (next_idle_at), so most clock steps cost one comparison.
/// Limits: one entry per active partition (so at most keys_max); (last ingest, index) is unique
/// per entry, so the order in which partitions leave does not depend on the heap's layout.
class IdleQueue {
  public:
    bool empty() const { return entries_.empty(); }
    void clear() { entries_.clear(); }

    // `p` is active and not in the queue.
    void push(Partition* p) {
        entries_.push_back({p->last_ingest_ms, p->index, p});
        std::push_heap(entries_.begin(), entries_.end(), later);
    }

    Partition* front() const { return entries_.front().partition; }

    void pop() {
        std::pop_heap(entries_.begin(), entries_.end(), later);
        entries_.pop_back();
    }

    /// The ingest time at which the front partition goes idle, if that is at or before `now_ms`
    /// (else time_max). Entries whose partition saw records since they were placed are moved
    /// only when they come due: an entry is never later than its partition, so one that is not
    /// due says that no partition is.
    TM_HOT int64_t next_idle_at(int64_t now_ms, int64_t idle_timeout_ms) {
        while (!entries_.empty()) {
            const ActivityEntry& front = entries_.front();
            if (sat_add(front.last_ingest_ms, idle_timeout_ms) > now_ms) return time_max;
            if (front.partition->last_ingest_ms == front.last_ingest_ms)
                return sat_add(front.last_ingest_ms, idle_timeout_ms);
            Partition* p = front.partition;
            pop();
            push(p);
        }
        return time_max;
    }

  private:
    static bool later(const ActivityEntry& a, const ActivityEntry& b) {
        if (a.last_ingest_ms != b.last_ingest_ms) return a.last_ingest_ms > b.last_ingest_ms;
        return a.index > b.index;
    }

    std::vector<ActivityEntry> entries_;
};

}  // namespace tidemark::core::detail
