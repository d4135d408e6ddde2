// The engine's idle queue (internal): which active partition goes idle next.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/engine/types.h"

namespace tidemark::core::detail {

// A place in the idle queue: the partition's last ingest time when the entry was placed. It
// is the partition's own while that is still its `queued_ms` (and it is active); any other is
// dropped when it comes first.
struct ActivityEntry {
    int64_t last_ingest_ms;
    Partition* partition;
};

/// Active partitions, by last ingest time: which go idle at which instant.
///
/// Operation: an active partition has a place (its `queued_ms`), set at its first event and
/// renewed by an event at least half an idle timeout later, so an event costs one comparison
/// and a partition reporting steadily gets a new place every half timeout. Places are appended
/// to a FIFO, whose times never decrease since ingest time does not; one that cannot be (its
/// time is older than the FIFO's last) goes to a heap, which an engine fed in ingest order uses
/// only for a partition that went silent within half a timeout of its place. A front that is
/// due but older than its partition's last ingest time is moved to that time. Before issue 31
/// this was one heap whose stale front was moved on every idle check: each partition once per
/// idle timeout, at O(log n) cache misses (8 % of a five-pipeline replay's time).
/// Limits: an entry lives about one idle timeout after its time and a partition gets one at
/// most every half timeout, so about three per live partition: ~3 x keys_max. Partitions that
/// go idle at one instant do so in index order, as they did.
class IdleQueue {
  public:
    /// What the stats count per partition: the entries of a partition reporting steadily.
    static constexpr size_t bytes_per_partition = 2 * sizeof(ActivityEntry);

    explicit IdleQueue(int64_t idle_timeout_ms);

    void clear();

    /// `p` became active, its last ingest time set.
    void push(Partition* p) { place(p); }

    /// `p`, active, saw an event (its last ingest time set).
    TM_HOT void touched(Partition* p) {
        if (p->last_ingest_ms >= sat_add(p->queued_ms, renew_ms_)) place(p);
    }

    /// No partition goes idle before this instant (the earliest entry's time + the idle
    /// timeout; its partition may have seen events since). time_max when none is active.
    TM_HOT int64_t idle_bound_ms() const {
        int64_t first = head_ < in_order_.size() ? in_order_[head_].last_ingest_ms : time_max;
        if (!out_of_order_.empty()) first = std::min(first, out_of_order_.front().last_ingest_ms);
        return sat_add(first, idle_timeout_ms_);
    }

    /// The earliest instant at or before `now_ms` at which active partitions go idle, and
    /// every partition that does then (last ingest time + idle timeout), into `out` in index
    /// order, out of the queue (push them again when they come back). `out` is left empty
    /// when none is due.
    void take_due(int64_t now_ms, std::vector<Partition*>& out);

  private:
    static bool own(const ActivityEntry& e) {
        return !e.partition->idle && e.partition->queued_ms == e.last_ingest_ms;
    }
    static bool later(const ActivityEntry& a, const ActivityEntry& b) {
        return a.last_ingest_ms > b.last_ingest_ms;
    }
    void place(Partition* p);
    int64_t settle(int64_t now_ms);
    void pop_in_order();
    void pop_out_of_order();

    int64_t idle_timeout_ms_;
    int64_t renew_ms_;
    std::vector<ActivityEntry> in_order_;  // from head_: a FIFO, times non-decreasing
    size_t head_ = 0;
    std::vector<ActivityEntry> out_of_order_;  // a binary heap, earliest first
};

}  // namespace tidemark::core::detail
