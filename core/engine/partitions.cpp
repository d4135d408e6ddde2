#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "core/engine/pipeline_run.h"
#include "core/hash.h"

namespace tidemark::core::detail {

// Indexes of forgotten partitions are reused (lowest first is not needed: any fixed rule
// gives the same layout in a replay), so the min-tree stays as large as the most
// partitions live at once, never as the most ever seen.
Partition* PipelineRun::create_partition(std::string_view name) {
    Partition* p;
    if (!free_partitions_.empty()) {
        p = free_partitions_.back();
        free_partitions_.pop_back();
    } else {
        if (partitions_allocated_ % pool_chunk == 0)
            partition_chunks_.push_back(std::make_unique<Partition[]>(pool_chunk));
        p = &partition_chunks_.back()[partitions_allocated_ % pool_chunk];
        ++partitions_allocated_;
    }
    uint32_t index;
    if (!free_indexes_.empty()) {
        index = free_indexes_.back();
        free_indexes_.pop_back();
    } else {
        index = static_cast<uint32_t>(partition_list_.size());
        partition_list_.push_back(nullptr);
    }
    p->name = std::string(name);
    p->index = index;
    p->forgotten = false;
    p->persisted = false;
    if (scope_partition_) p->domain = std::make_unique<Domain>();
    partitions_.insert(p, hash_name(p->name));
    partition_list_[index] = p;
    return p;
}

// process()'s new partition, active before the event's window logic runs: new, it is idle and
// holds no key, so a key created for the event and removed again (open_windows_max) would
// forget it mid-event, and the event's touch would then revive a forgotten partition (on the
// dirty list and in the idle queue once back in the pool: released twice, reused while
// listed). process()'s own touch then finds it active and changes nothing more. Out of
// line: the per-event path stays as it is.
Partition* PipelineRun::open_partition(std::string_view name, int64_t event_ms, int64_t ingest_ms) {
    Partition* p = create_partition(name);
    if (scope_partition_) {
        p->domain->watermark = new_partition_watermark(name);
        drop_remembered(remembered_hash(name));  // live again; it is remembered anew when it goes
    }
    touch_partition(p, event_ms, ingest_ms);
    return p;
}

void PipelineRun::go_idle(Partition* p, int64_t idle_at) {
    p->idle = true;
    mark_dirty(p);
    --active_;
    if (scope_partition_) {
        Domain& d = *p->domain;
        d.idle = true;
        d.idle_since_ms = idle_at;
        d.idle_base_ms = d.watermark;
        schedule_idle(p);
    } else {
        low_set(*p, time_max);
    }
}

// Scope partition: an idle partition's watermark brought to the clock, and what it reaches
// fired (closed_by idle). Keys emptied by the firing are removed, and so may the partition
// be (then `p.forgotten`).
void PipelineRun::catch_up_idle(Partition& p, EmissionSink& sink) {
    Domain& d = *p.domain;
    TM_ASSERT(d.idle);
    const int64_t before = d.watermark;
    raise_watermark(d, idle_watermark(d, now_ms_));
    if (d.watermark != before) mark_dirty(&p);
    fire_due(d, sink);
}

// Scope partition: where a partition that is not live starts. A forgotten one that comes back
// starts where its own watermark would be had it stayed, idle, moving with ingest time (its
// lead over the clock when it was forgotten): it cannot reopen windows it already had results
// for (their ids are taken). Any other starts at the floor: time_min, or past the watermark of
// a forgotten partition whose record had to go (more than keys_max remembered). So one
// device's clock decides its own start only: never another's, until more than max_keys others
// were forgotten after it (issue 24: a single maximum lead made every new device start minutes
// in the future after one fast device was forgotten, for good).
int64_t PipelineRun::new_partition_watermark(std::string_view name) const {
    const auto it = remembered_.find(remembered_hash(name));
    if (it == remembered_.end()) return forgotten_floor_ms_;
    return std::max(forgotten_floor_ms_, sat_add(now_ms_, it->second.lead_ms));
}

// Stable across builds and restarts (stored): core/hash.h's FNV-1a, mixed.
uint64_t PipelineRun::remembered_hash(std::string_view name) {
    return hash::mix(hash::fnv1a_str(hash::fnv_offset, name));
}

void PipelineRun::remember_forgotten(std::string_view name, int64_t lead_ms) {
    const uint64_t h = remembered_hash(name);
    auto [it, added] = remembered_.try_emplace(h);
    if (!added) {
        if (lead_ms <= it->second.lead_ms) return;  // two names, one hash: the later start
        remembered_by_lead_.erase({it->second.lead_ms, h});
    }
    it->second.lead_ms = lead_ms;
    remembered_by_lead_.insert({lead_ms, h});
    mark_remembered_dirty(h);
    if (remembered_.size() <= spec_.limits.keys_max) return;
    // The lowest lead goes: the floor it raises holds back only events older than where that
    // partition would start, and the fewest of them.
    const auto [low_lead_ms, low] = *remembered_by_lead_.begin();
    forgotten_floor_ms_ = std::max(forgotten_floor_ms_, sat_add(now_ms_, low_lead_ms));
    drop_remembered(low);
    ++stats_.forgotten_evicted;
}

void PipelineRun::drop_remembered(uint64_t hash) {
    const auto it = remembered_.find(hash);
    if (it == remembered_.end()) return;
    remembered_by_lead_.erase({it->second.lead_ms, hash});
    if (tracking_ && it->second.persisted) erased_.push_back(remembered_key(hash));
    remembered_.erase(it);
}

void PipelineRun::mark_remembered_dirty(uint64_t hash) {
    Remembered& r = remembered_.at(hash);
    if (r.dirty) return;
    r.dirty = true;
    dirty_remembered_.push_back(hash);
}

// A partition that is idle and holds no live key is state no longer needed: it goes, so
// max_keys bounds what is live, not what was ever seen.
void PipelineRun::maybe_forget(Partition* p) {
    if (p->forgotten || !p->idle || p->keys != 0) return;
    TM_ASSERT(find_partition(p->name) == p);
    if (scope_partition_) {
        Domain& d = *p->domain;
        TM_ASSERT(d.timers_live == 0);
        if (d.idle_deadline_ms != time_max) {
            idle_deadlines_.erase({d.idle_deadline_ms, p});
            d.idle_deadline_ms = time_max;
        }
        const int64_t watermark = std::max(d.watermark, idle_watermark(d, now_ms_));
        int64_t lead;
        if (watermark != time_min && !__builtin_sub_overflow(watermark, now_ms_, &lead))
            remember_forgotten(p->name, lead);
    }
    if (tracking_ && p->persisted) erased_.push_back(partition_key(p->name));
    partitions_.erase(p->name, hash_name(p->name));
    partition_list_[p->index] = nullptr;
    free_indexes_.push_back(p->index);
    ++stats_.partitions_forgotten;
    p->forgotten = true;
    // Reused only at the next step (a domain being fired must outlive the firing) or,
    // when on the dirty list, once the next checkpoint has walked it.
    if (!p->dirty) retired_partitions_.push_back(p);
}

// Returns forgotten partitions to the pool; only at the start of a clock step (see
// maybe_forget): until then a new partition takes a fresh object, which is as right.
void PipelineRun::reap_partitions() {
    for (Partition* p : retired_partitions_) {
        // Marked dirty since it was forgotten, it is on the dirty list as well, and the
        // checkpoint would release it a second time.
        TM_ASSERT(!p->dirty);
        release_partition(p);
    }
    retired_partitions_.clear();
}

void PipelineRun::release_partition(Partition* p) {
    TM_ASSERT(p->forgotten);
    p->max_event_ms = time_min;
    p->last_ingest_ms = time_min;
    p->idle = true;
    p->dirty = false;
    p->persisted = false;
    p->keys = 0;
    p->queued_ms = time_min;
    p->domain.reset();
    free_partitions_.push_back(p);
}

// Scope partition: when an idle partition's watermark (which follows ingest time) will
// reach its earliest timer, as an ingest time.
void PipelineRun::schedule_idle(Partition* p) {
    Domain& d = *p->domain;
    if (p->domain->idle_deadline_ms != time_max) {
        idle_deadlines_.erase({p->domain->idle_deadline_ms, p});
        p->domain->idle_deadline_ms = time_max;
    }
    if (!d.idle) return;
    const int64_t due = timer_front(d);
    if (due == time_max) return;
    // May be at or before now (a partition that went idle during a long clock step): the
    // deadline loop of advance() runs after the idle transitions and takes it then.
    p->domain->idle_deadline_ms = sat_add(d.idle_since_ms, due - d.idle_base_ms);
    idle_deadlines_.insert({p->domain->idle_deadline_ms, p});
}

// See Engine::set_clock.
void PipelineRun::set_clock(bool trusted, int64_t now_ms) {
    if (trusted == clock_trusted_) return;
    if (!trusted) {
        hold_idle_watermarks();
        clock_trusted_ = false;
        return;
    }
    // The step from the unsynchronised clock to the real one is not time that passed.
    clock_trusted_ = true;
    restart_silence(now_ms);
}

// See Engine::resume.
void PipelineRun::resume(int64_t now_ms) {
    if (clock_trusted_) hold_idle_watermarks();
    restart_silence(now_ms);
}

// Idle watermarks take what ingest time gave them up to the last record, and stop there.
// What that reaches fires at the next step (fire_due, or the deadline set by
// restart_silence).
void PipelineRun::hold_idle_watermarks() {
    if (global_.idle) raise_watermark(global_, idle_watermark(global_, now_ms_));
    if (!scope_partition_) return;
    for (Partition* p : partition_list_) {
        if (!p || !p->domain->idle) continue;
        const int64_t before = p->domain->watermark;
        raise_watermark(*p->domain, idle_watermark(*p->domain, now_ms_));
        if (p->domain->watermark != before) mark_dirty(p);
    }
}

// The time since the last record is not taken as time that passed: every partition's
// silence so far is kept and moved to end at now, and idle watermarks go on from where
// they were. (Restarting the silence instead would line up partitions that were about to
// go idle one after the other, and change which windows the minimum closes.)
void PipelineRun::restart_silence(int64_t now_ms) {
    int64_t gap_ms;
    if (now_ms_ == time_min || __builtin_sub_overflow(now_ms, now_ms_, &gap_ms)) gap_ms = 0;
    std::vector<Partition*> active;
    for (Partition* p : partition_list_) {
        if (!p) continue;
        mark_dirty(p);
        if (!p->idle) {
            p->last_ingest_ms = std::min(sat_add(p->last_ingest_ms, gap_ms), now_ms);
            active.push_back(p);
        } else if (scope_partition_) {
            Domain& d = *p->domain;
            d.idle_base_ms = d.watermark;
            d.idle_since_ms = now_ms;
        }
    }
    std::sort(active.begin(), active.end(), [](const Partition* a, const Partition* b) {
        if (a->last_ingest_ms != b->last_ingest_ms) return a->last_ingest_ms < b->last_ingest_ms;
        return a->index < b->index;
    });
    activity_.clear();
    for (Partition* p : active)
        activity_.push(p);
    if (global_.idle) {
        global_.idle_base_ms = global_.watermark;
        global_.idle_since_ms = now_ms;
    }
    now_ms_ = now_ms;  // back, too, when a synchronised clock is behind the old one
    stats_.ingest_ms = now_ms;
    if (scope_partition_)
        for (Partition* p : partition_list_)
            if (p && p->idle) schedule_idle(p);
}

}  // namespace tidemark::core::detail
