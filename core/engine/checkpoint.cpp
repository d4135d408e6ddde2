#include <algorithm>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "core/bytes.h"
#include "core/engine/pipeline_run.h"

namespace tidemark::core::detail {

void PipelineRun::checkpoint(StateWriter& w) {
    std::string value;
    // What the previous checkpoint wrote is taken as committed (see checkpoint_failed).
    pending_erased_.clear();
    pending_keys_.clear();
    pending_partitions_.clear();
    pending_remembered_.clear();
    pending_full_ = !tracking_;
    if (!tracking_) {
        // First checkpoint: everything that exists.
        keys_.for_each([&](KeyState& k) { write_key(w, k, true, value); });
        for (Partition* p : partition_list_)
            if (p) write_partition(w, *p, value);
        for (auto& [hash, r] : remembered_)
            write_remembered(w, hash, r, value);
        dirty_remembered_.clear();
        tracking_ = true;
    } else {
        for (const std::string& key : erased_)
            w.erase(key);
        for (KeyState* k : dirty_keys_) {
            // A listed object whose key was removed is free (its erasure is in erased_) or
            // holds a key created since, which is written whole as any new key is.
            if (find_key(k->key) == k) {
                write_key(w, *k, false, value);
                pending_keys_.push_back(k->key);
            }
        }
        for (const uint64_t hash : dirty_remembered_)
            if (auto it = remembered_.find(hash); it != remembered_.end())
                write_remembered(w, hash, it->second, value);
        pending_remembered_ = std::move(dirty_remembered_);
        dirty_remembered_.clear();
    }
    for (Partition* p : dirty_partitions_) {
        if (p->forgotten) {
            release_partition(p);  // its erasure is in erased_
            continue;
        }
        if (!pending_full_) {
            write_partition(w, *p, value);
            pending_partitions_.push_back(p->name);
        }
        p->dirty = false;
    }
    pending_erased_ = std::move(erased_);
    erased_.clear();
    // Every listed object comes off the list, free ones included, whichever checkpoint this is:
    // a first checkpoint that failed leaves objects listed behind it, and the next is a full one.
    for (KeyState* k : dirty_keys_)
        k->dirty = false;
    dirty_keys_.clear();
    dirty_partitions_.clear();
    // The meta record (watermark, counters) changes with every record: always written. The
    // too-late tallies only when they changed (or everything is written).
    late_pending_ =
        late_dirty_ ||
        (pending_full_ && (!late_tallies_.empty() || late_reports_ || too_late_unreported_));
    if (late_pending_) write_late(w, value);
    late_dirty_ = false;
    write_meta(w, value);
}

// The transaction that took the last checkpoint did not commit: what it held is marked
// changed again, so the next checkpoint writes it (with everything changed since).
// Erasures go first, as they did: a key erased then and written since is written after.
void PipelineRun::checkpoint_failed() {
    if (pending_full_) {
        tracking_ = false;  // the next one writes everything again
    } else {
        pending_erased_.insert(pending_erased_.end(), erased_.begin(), erased_.end());
        erased_ = std::move(pending_erased_);
        for (const std::string& name : pending_keys_) {
            KeyState* k = find_key(name);
            if (!k) continue;  // removed since: its erasure is in erased_
            k->meta_dirty = true;
            for (Unit& u : k->units)
                u.dirty = true;
            mark_dirty(*k);
        }
        for (const std::string& name : pending_partitions_)
            if (Partition* p = find_partition(name)) mark_dirty(p);
        for (const uint64_t hash : pending_remembered_)
            if (remembered_.count(hash)) mark_remembered_dirty(hash);
    }
    if (late_pending_) late_dirty_ = true;
    late_pending_ = false;
    pending_erased_.clear();
    pending_keys_.clear();
    pending_partitions_.clear();
    pending_remembered_.clear();
    pending_full_ = false;
}

Result<void> PipelineRun::restore_entry(std::string_view rest, std::string_view value) {
    if (rest.empty()) return fail("empty state key");
    const char type = rest[0];
    rest.remove_prefix(1);
    if (type == 'A') return read_meta(value);
    if (type == 'P') return read_partition(rest, value);
    if (type == 'F') return read_remembered(rest, value);
    if (type == 'L') return rest.empty() ? read_late(value) : fail("damaged too-late tallies key");
    if (type == 'K') {
        std::string_view key;
        if (!bytes::get_str(rest, key) || rest.empty()) return fail("damaged key record");
        KeyState* k = find_key(key);
        if (!k) k = create_key(key, nullptr, global_);
        const char sub = rest[0];
        rest.remove_prefix(1);
        if (sub == 'm') return read_key_meta(*k, value);
        if (sub == 'w' || sub == 'u') {
            int64_t key_start;
            if (!bytes::get_i64_sortable(rest, key_start) || !rest.empty())
                return fail("damaged window key of '" + k->key + "'");
            return read_unit(*k, value, key_start, sub == 'u');
        }
        return fail("unknown key record type");
    }
    return fail("unknown state record type");
}

// The windows of a restored key fit this definition (checked once the stored definition is
// known to be this one): within the stored time bound; on the slice grid for tumbling and hopping;
// for sessions, no longer than max_duration and not overlapping. A damaged store must be refused,
// not trip an assertion on the first event.
bool PipelineRun::on_grid(int64_t start, int64_t step) const {
    int64_t from_offset = 0;
    return !__builtin_sub_overflow(start, offset_ms_, &from_offset) && from_offset % step == 0;
}

Result<void> PipelineRun::check_units(const KeyState& k) const {
    for (size_t i = 0; i < k.units.size(); ++i) {
        const Unit& u = k.units[i];
        const int64_t span = u.end - u.start;  // > 0 and no overflow: read_unit checked
        const bool fits = stored_time_fits(u.start) && stored_time_fits(u.end) &&
                          (session_ ? span <= spec_.window.max_duration_ms &&
                                          (i == 0 || k.units[i - 1].end <= u.start)
                                    : span == slice_ms_ && on_grid(u.start, slice_ms_));
        if (!fits) return fail("damaged window bounds of '" + k.key + "'");
    }
    return check_fired(k);
}

// The key's fired windows and the time it fired through, as a tumbling or hopping run left
// them: time_min or a time within the stored bound (a watermark: not always a window end);
// fired windows on the grid, ascending, each a window of this size, holding one value per
// aggregate when retractions keep them. Sessions keep neither. A damaged value would otherwise
// overflow in next_fire() or emit a correction of a window that never was, with the wrong
// number of values.
Result<void> PipelineRun::check_fired(const KeyState& k) const {
    bool fits = true;
    if (session_) {
        fits = k.fired.empty() && k.fired_through_ms == time_min;
    } else {
        fits = k.fired_through_ms == time_min || stored_time_fits(k.fired_through_ms);
        const size_t arity = retract_ ? aggs_.specs().size() : 0;
        for (size_t i = 0; fits && i < k.fired.size(); ++i) {
            const Fired& f = k.fired[i];
            fits = stored_time_fits(f.start) && stored_time_fits(f.end) &&
                   f.end - f.start == size_ms_ && on_grid(f.start, advance_ms_) &&
                   f.values.size() == arity && (i == 0 || k.fired[i - 1].end < f.end);
        }
    }
    if (!fits) return fail("damaged fired windows of '" + k.key + "'");
    return {};
}

Result<void> PipelineRun::restore_finish() {
    if (!meta_seen_ && (!keys_.empty() || !partitions_.empty()))
        return fail("state of pipeline '" + spec_.name + "' has no meta record");
    if (meta_seen_ && (fingerprint_seen_ != state_fingerprint(spec_) || scope_mismatch_ ||
                       (scope_seen_ >= 0 && scope_seen_ != static_cast<int>(scope_partition_))))
        return fail("the stored state of pipeline '" + spec_.name +
                    "' was written under another definition of its window, aggregates, "
                    "fields or watermark scope");
    // Activity list in order of last ingest; the min-tree over active partitions.
    std::vector<Partition*> active;
    for (Partition* p : partition_list_)
        if (!p->idle) active.push_back(p);
    std::sort(active.begin(), active.end(), [](const Partition* a, const Partition* b) {
        if (a->last_ingest_ms != b->last_ingest_ms) return a->last_ingest_ms < b->last_ingest_ms;
        return a->index < b->index;
    });
    for (Partition* p : active) {
        activity_.push(p);
        ++active_;
        if (!scope_partition_) low_set(*p, candidate_of(*p));
    }
    std::vector<KeyState*> keys;
    keys_.for_each([&](KeyState& k) { keys.push_back(&k); });
    for (KeyState* k : keys) {
        if (!k->partition) return fail("key record without its partition");
        if (auto fits = check_units(*k); !fits) return fits;
        k->domain = scope_partition_ ? k->partition->domain.get() : &global_;
        units_total_ += k->units.size();
        fired_total_ += k->fired.size();
        reschedule(*k);
    }
    if (scope_partition_)
        for (Partition* p : partition_list_)
            if (p->idle) schedule_idle(p);
    // The store holds exactly what was restored: from here on, checkpoints write changes
    // and erasures. (Writing everything again instead would record no erasures until then,
    // and a second crash would bring back windows already purged or merged.)
    tracking_ = true;
    // Windows read from the old encoding: their records are replaced by the next checkpoint.
    if (!legacy_units_.empty()) {
        erased_.insert(erased_.end(), std::make_move_iterator(legacy_units_.begin()),
                       std::make_move_iterator(legacy_units_.end()));
        legacy_units_.clear();
        for (KeyState* k : keys)
            if (std::any_of(k->units.begin(), k->units.end(),
                            [](const Unit& u) { return u.dirty; }))
                mark_dirty(*k);
    }
    // A store written before partitions were forgotten may hold idle ones without keys.
    std::vector<Partition*> unused;
    for (Partition* p : partition_list_)
        if (p && p->idle && p->keys == 0) unused.push_back(p);
    for (Partition* p : unused)
        maybe_forget(p);
    return {};
}

}  // namespace tidemark::core::detail
