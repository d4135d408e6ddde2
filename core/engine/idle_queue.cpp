#include "core/engine/idle_queue.h"

#include <algorithm>

#include "core/result.h"

namespace tidemark::core::detail {

IdleQueue::IdleQueue(int64_t idle_timeout_ms)
    : idle_timeout_ms_(idle_timeout_ms), renew_ms_(std::max<int64_t>(1, idle_timeout_ms / 2)) {
    TM_ASSERT(idle_timeout_ms > 0);
}

void IdleQueue::clear() {
    in_order_.clear();
    head_ = 0;
    out_of_order_.clear();
}

// Two entries of one partition may hold the same time (a partition reused, or ingest time
// going back): either serves, and acting on it (going idle, moving) ends the other.
void IdleQueue::place(Partition* p) {
    p->queued_ms = p->last_ingest_ms;
    const ActivityEntry e{p->last_ingest_ms, p};
    if (head_ == in_order_.size() || in_order_.back().last_ingest_ms <= e.last_ingest_ms) {
        in_order_.push_back(e);
    } else {
        out_of_order_.push_back(e);
        std::push_heap(out_of_order_.begin(), out_of_order_.end(), later);
    }
}

void IdleQueue::pop_in_order() {
    ++head_;
    if (head_ == in_order_.size()) {
        in_order_.clear();
        head_ = 0;
    } else if (head_ >= 1024 && 2 * head_ >= in_order_.size()) {
        // Amortised: what is moved is at most what was popped since the last move.
        in_order_.erase(in_order_.begin(), in_order_.begin() + static_cast<ptrdiff_t>(head_));
        head_ = 0;
    }
}

void IdleQueue::pop_out_of_order() {
    std::pop_heap(out_of_order_.begin(), out_of_order_.end(), later);
    out_of_order_.pop_back();
}

// Drops the fronts that are no partition's own, due or not (so that the next step with work
// is when a partition's own place comes due, not every entry a renewal left behind), and moves
// the due ones that are older than their partition; returns the earlier front's time if it is
// due, else time_max. A place moved from the heap can land in the FIFO (with ingest time fed
// in order it never does: a later event renews a moved place): then the FIFO is looked at again.
int64_t IdleQueue::settle(int64_t now_ms) {
    // One structure's front: its time if due and its partition's last record, else time_max.
    const auto settle_front = [&](auto has_front, auto front, auto pop) {
        while (has_front()) {
            const ActivityEntry e = front();
            if (!own(e)) {
                pop();
                continue;
            }
            if (sat_add(e.last_ingest_ms, idle_timeout_ms_) > now_ms) break;
            if (e.partition->last_ingest_ms == e.last_ingest_ms) return e.last_ingest_ms;
            pop();
            place(e.partition);
        }
        return time_max;
    };
    for (;;) {
        const int64_t in_order =
            settle_front([&] { return head_ < in_order_.size(); },
                         [&] {
                             if (head_ + 8 < in_order_.size())
                                 __builtin_prefetch(in_order_[head_ + 8].partition);
                             return in_order_[head_];
                         },
                         [&] { pop_in_order(); });
        const size_t in_order_size = in_order_.size();
        const int64_t out_of_order =
            settle_front([&] { return !out_of_order_.empty(); },
                         [&] { return out_of_order_.front(); }, [&] { pop_out_of_order(); });
        if (in_order_.size() == in_order_size) return std::min(in_order, out_of_order);
    }
}

void IdleQueue::take_due(int64_t now_ms, std::vector<Partition*>& out) {
    out.clear();
    if (idle_bound_ms() > now_ms) return;
    const int64_t first = settle(now_ms);
    if (first == time_max) return;
    // Every active partition whose last ingest time is `first`: each has an entry of its own,
    // and settle() brings every one of them to a front in turn.
    while (settle(now_ms) == first) {
        const bool in_order = head_ < in_order_.size() &&
                              in_order_[head_].last_ingest_ms == first && own(in_order_[head_]);
        Partition* p = in_order ? in_order_[head_].partition : out_of_order_.front().partition;
        if (in_order)
            pop_in_order();
        else
            pop_out_of_order();
        p->queued_ms = time_min;
        out.push_back(p);
    }
    std::sort(out.begin(), out.end(),
              [](const Partition* a, const Partition* b) { return a->index < b->index; });
}

}  // namespace tidemark::core::detail
