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
// due, else time_max.
int64_t IdleQueue::settle(int64_t now_ms) {
    const auto due = [&](const ActivityEntry& e) {
        return sat_add(e.last_ingest_ms, idle_timeout_ms_) <= now_ms;
    };
    int64_t first = time_max;
    while (head_ < in_order_.size()) {
        const ActivityEntry e = in_order_[head_];
        if (head_ + 8 < in_order_.size()) __builtin_prefetch(in_order_[head_ + 8].partition);
        if (!own(e)) {
            pop_in_order();
        } else if (!due(e)) {
            break;
        } else if (e.partition->last_ingest_ms != e.last_ingest_ms) {
            pop_in_order();
            place(e.partition);
        } else {
            first = e.last_ingest_ms;
            break;
        }
    }
    while (!out_of_order_.empty()) {
        const ActivityEntry e = out_of_order_.front();
        if (!own(e)) {
            pop_out_of_order();
        } else if (!due(e)) {
            break;
        } else if (e.partition->last_ingest_ms != e.last_ingest_ms) {
            pop_out_of_order();
            place(e.partition);
        } else {
            first = std::min(first, e.last_ingest_ms);
            break;
        }
    }
    return first;
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
