// One pipeline running inside the engine (internal): its keys, partitions, watermarks, timers and
// windows. core/engine.h is the contract; the member functions live in the file of their job:
//   core/engine.cpp               the step loop (advance, process) and the counters
//   core/engine/partitions.cpp    partitions: creation, idleness, forgetting, the clock
//   core/engine/keys.cpp          keys: creation, removal, the partition they count in
//   core/engine/timers.cpp        when keys are due, and firing them in (due, key) order
//   core/engine/emit.cpp          results, too-late and refused events
//   core/engine/late_report.cpp   per-window too-late tallies for the consumer (late.report)
//   core/engine/slices.{h,cpp}    tumbling and hopping windows
//   core/engine/sessions.{h,cpp}  session windows
//   core/engine/checkpoint.cpp    incremental checkpoints and restore
//   core/engine/state_codec.cpp   the stored form of each unit of state
// Members that the per-event path calls are defined at the end of this header (and in
// slices.h, sessions.h): they must be inlinable wherever the per-event path is compiled.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/aggregate.h"
#include "core/emission.h"
#include "core/engine.h"
#include "core/engine/idle_queue.h"
#include "core/engine/name_table.h"
#include "core/engine/timers.h"
#include "core/engine/types.h"
#include "core/engine/watermark_tree.h"
#include "core/event.h"
#include "core/pipeline.h"
#include "core/result.h"

namespace tidemark::core::detail {

// Storage keys: prefix, then 'A' pipeline meta | 'K' key (length-prefixed) 'm' meta or 'u'
// unit start (sortable) | 'P' partition name.
std::string state_key_prefix(std::string_view pipeline);

// Idle partitions by the ingest time at which their watermark reaches their earliest timer.
struct DeadlineLess {
    bool operator()(const std::pair<int64_t, Partition*>& a,
                    const std::pair<int64_t, Partition*>& b) const {
        if (a.first != b.first) return a.first < b.first;
        return a.second->name < b.second->name;
    }
};

// The order of the per-window too-late table and of the list health shows: most too-late
// events first, then the earlier window (start, then end: sessions of different keys may share
// a start), so that it is a function of the counts alone.
inline bool too_late_rank(const TooLateWindow& a, const TooLateWindow& b) {
    if (a.too_late != b.too_late) return a.too_late > b.too_late;
    if (a.start_ms != b.start_ms) return a.start_ms < b.start_ms;
    return a.end_ms < b.end_ms;
}

// Everything one pipeline keeps and does. See Engine for the contract.
class PipelineRun {
  public:
    PipelineRun(const std::string& node_id, const PipelineSpec& spec, uint32_t index);

    const PipelineSpec& spec() const { return spec_; }

    // See Engine::advance. Inline: most clock steps only move the clock (step_is_quiet).
    void advance(int64_t now_ms, EmissionSink& sink);
    void process(const Event& event, EmissionSink& sink);
    // The rounds of Engine::prefetch for a key whose name hashes to `hash`: its hash slot; its
    // state; its newest window and its partition, keeping the state for the next process()
    // (see prefound_). Scope partition keys a composite name (see process): those are left.
    void prefetch_slot(uint64_t hash) const;
    void prefetch_key(uint64_t hash) const;
    void prefetch_window(std::string_view key, uint64_t hash);
    // prefetch_window's loads for the first key stored under `hash`, not compared by name and
    // not kept for process() (Engine::prefetch_ahead, for a record ahead).
    void prefetch_key_window(uint64_t hash) const;
    // The round after prefetch_key_window's, once the window and partition it loads are in:
    // the window's quantile sketch and the partition's leaf of low_tree_.
    void prefetch_key_state(uint64_t hash) const;
    bool keys_composite() const { return scope_partition_; }
    const PipelineStats& stats();

    void checkpoint(StateWriter& w);
    // The transaction that took the last checkpoint did not commit: what it held is marked
    // changed again, so the next checkpoint writes it (with everything changed since).
    void checkpoint_failed();

    void set_clock(bool trusted, int64_t now_ms);  // see Engine::set_clock
    void resume(int64_t now_ms);                   // see Engine::resume
    bool clock_trusted() const { return clock_trusted_; }

    Result<void> restore_entry(std::string_view rest, std::string_view value);
    Result<void> restore_finish();

  private:
    // A forgotten partition's start, see remembered_ below.
    struct Remembered {
        int64_t lead_ms = 0;
        bool persisted = false;  // the store holds its record
        bool dirty = false;      // on dirty_remembered_
    };
    bool step_is_quiet(int64_t now_ms) const;
    void step(int64_t now_ms, EmissionSink& sink);

    // --- partitions (partitions.cpp) ---------------------------------------------------------
    Partition* find_partition(std::string_view name) const;
    Partition* create_partition(std::string_view name);
    Partition* open_partition(std::string_view name, int64_t event_ms, int64_t ingest_ms);
    void go_idle(Partition* p, int64_t idle_at);
    void catch_up_idle(Partition& p, EmissionSink& sink);
    int64_t new_partition_watermark(std::string_view name) const;
    static uint64_t remembered_hash(std::string_view name);
    void remember_forgotten(std::string_view name, int64_t lead_ms);
    void drop_remembered(uint64_t hash);
    void mark_remembered_dirty(uint64_t hash);
    void maybe_forget(Partition* p);
    void reap_partitions();
    void release_partition(Partition* p);
    void touch_partition(Partition* p, int64_t event_ms, int64_t ingest_ms);
    void mark_dirty(Partition* p);
    void hold_idle_watermarks();
    void restart_silence(int64_t now_ms);
    void schedule_idle(Partition* p);

    // --- watermarks --------------------------------------------------------------------------
    int64_t candidate_of(const Partition& p) const;
    void low_set(Partition& p, int64_t value);
    static int64_t idle_watermark(const Domain& d, int64_t now_ms);
    void raise_watermark(Domain& d, int64_t candidate);

    // --- keys (keys.cpp) ---------------------------------------------------------------------
    KeyState* find_key(std::string_view key) const;
    KeyState* take_prefound(std::string_view key);
    KeyState* admit_key(KeyState* k, std::string_view key, Partition* p, Domain& d,
                        const Event& event, int64_t t, EmissionSink& sink);
    KeyState* create_key(std::string_view key, Partition* p, Domain& d);
    void remove_key(KeyState* k);
    // A key's partition: counted, so that a partition is forgotten only when no key is in it.
    void set_key_partition(KeyState& k, Partition* p);
    void move_key_partition(KeyState& k, Partition* p);  // the rare part, k.partition != p
    void mark_dirty(KeyState& k);

    // --- timers (timers.cpp) -----------------------------------------------------------------
    int64_t compute_due(const KeyState& k) const;
    void reschedule(KeyState& k);
    void fire_due(Domain& d, EmissionSink& sink);
    void sort_by_key(std::vector<KeyState*>& keys);
    void fire_due_slow(Domain& d, EmissionSink& sink);

    // --- emissions (emit.cpp) ----------------------------------------------------------------
    void emit(EmissionSink& sink, const KeyState& k, int64_t start, int64_t end, EmissionKind kind,
              uint32_t revision, ClosedBy closed_by, const Values& values, int64_t watermark);
    void count_too_late_window(int64_t start, int64_t end);

    // --- too-late tallies for the consumer (late_report.cpp) ---------------------------------
    void tally_too_late(int64_t start, int64_t end);
    void report_late(int64_t previous_ms, int64_t now_ms, EmissionSink& sink);
    void write_late(StateWriter& w, std::string& value);
    Result<void> read_late(std::string_view in);
    void too_late(EmissionSink& sink, std::string_view key, const Event& event, int64_t t,
                  int64_t start, int64_t end, int64_t watermark);
    // An event the limits turned away: counted, and kept as side output where the pipeline
    // keeps too-late events, so that nothing is dropped without a trace.
    enum class Limit { keys, open_windows, key_bytes };
    void refuse(EmissionSink& sink, std::string_view key, const Event& event, int64_t t,
                Limit limit, int64_t watermark);
    void side_output(EmissionSink& sink, std::string_view key, const Event& event, int64_t t,
                     int64_t start, int64_t end, int64_t watermark, std::string reason);
    bool event_too_late(const KeyState* k, int64_t t, int64_t wm) const;
    std::pair<int64_t, int64_t> new_event_window(int64_t t) const;

    // --- tumbling and hopping (slices.h, slices.cpp) -----------------------------------------
    int64_t slice_start(int64_t t) const;
    int64_t last_window_start(int64_t t) const;
    int64_t first_window_start(int64_t t) const;
    int64_t next_fire(const KeyState& k) const;
    int64_t slice_purge_at(const Unit& u) const;
    int64_t slice_due(const KeyState& k) const;
    const AggregateState* window_state(const KeyState& k, int64_t start, int64_t end);
    void slice_due_reached(KeyState& k, int64_t due, Domain& d, EmissionSink& sink);
    int64_t slice_last_window_start(int64_t s) const;
    int64_t slice_first_window_start(int64_t s) const;
    void slice_event(KeyState* k, std::string_view key, Partition* p, Domain& d, int64_t t,
                     const Event& event, EmissionSink& sink);
    bool refire_late(KeyState& k, int64_t t, int64_t wm, EmissionSink& sink);

    // --- sessions (sessions.h, sessions.cpp) -------------------------------------------------
    // The sessions of a key that an event at t joins: [first, last) in start order, and the
    // session it makes: [start, end) holding events up to last_ms (its own when it joins none:
    // t + gap, cut at max_duration and where the next session starts). That window decides
    // whether the event is too late: an event can overlap a session and join none (the span
    // would pass max_duration), and a merge cut at max_duration can end before the sessions
    // it joins did, past its horizon.
    struct SessionSpan {
        size_t first = 0;
        size_t last = 0;
        int64_t start = 0;
        int64_t last_ms = 0;
        int64_t end = 0;
    };
    int64_t session_due(const KeyState& k) const;
    void session_due_reached(KeyState& k, int64_t due, Domain& d, EmissionSink& sink);
    SessionSpan session_span(const KeyState* k, int64_t t, int64_t t_end) const;
    bool session_too_late(const KeyState* k, int64_t t, int64_t wm) const;
    void session_event(KeyState* k, std::string_view key, Partition* p, Domain& d, int64_t t,
                       const Event& event, EmissionSink& sink);
    void session_event_slow(KeyState* k, std::string_view key, Partition* p, Domain& d, int64_t t,
                            const Event& event, EmissionSink& sink);
    void session_merge(KeyState& k, SessionSpan span, int64_t start, int64_t end, int64_t last_ms,
                       bool late, int64_t t, const Event& event, int64_t wm, EmissionSink& sink);

    // --- state encoding (state_codec.cpp) ----------------------------------------------------
    std::string partition_key(std::string_view name) const;
    std::string remembered_key(uint64_t hash) const;
    void write_remembered(StateWriter& w, uint64_t hash, Remembered& r, std::string& value);
    Result<void> read_remembered(std::string_view rest, std::string_view value);
    std::string meta_key(std::string_view key) const;
    std::string unit_key(std::string_view key, int64_t start, char type = 'w') const;
    void write_key(StateWriter& w, KeyState& k, bool all, std::string& value);
    void put_unit(const Unit& u, std::string& out) const;
    Result<void> read_key_meta(KeyState& k, std::string_view in);
    Result<void> read_unit(KeyState& k, std::string_view in, int64_t key_start, bool legacy);
    bool read_compact_unit(Unit& u, std::string_view in);
    bool read_legacy_unit(Unit& u, std::string_view in);
    Result<void> check_units(const KeyState& k) const;
    Result<void> check_fired(const KeyState& k) const;
    bool on_grid(int64_t start, int64_t step) const;
    void write_partition(StateWriter& w, Partition& p, std::string& value);
    Result<void> read_partition(std::string_view name, std::string_view in);
    void write_meta(StateWriter& w, std::string& value);
    Result<void> read_meta(std::string_view in);

    uint32_t index_ = 0;  // in the engine's pipeline list
    std::string node_id_;
    PipelineSpec spec_;
    AggregateSet aggs_;
    std::string prefix_;
    bool session_;
    bool scope_partition_;
    int64_t lateness_ms_;
    bool retract_;
    int64_t size_ms_ = 0, offset_ms_ = 0, advance_ms_ = 0, slice_ms_ = 0;
    size_t unit_bytes_ = 0;

    NameTable<KeyState> keys_;
    uint64_t keys_changed_ = 0;  // keys created or removed, ever: see prefound_
    // The key's state Engine::prefetch found for the next process(), while no key was created
    // or removed since (keys_changed_ then): that process() takes it instead of hashing the
    // name and probing the table again, after comparing the name (issue 31).
    struct Prefound {
        KeyState* key = nullptr;
        uint64_t keys_changed = 0;
    };
    Prefound prefound_;
    // KeyStates and Partitions are allocated pool_chunk at a time (they are cache-line
    // aligned, and an aligned allocation is slow): one allocation per chunk, not per key.
    static constexpr size_t pool_chunk = 64;
    // Every KeyState allocated, live or free: a removed key's state (and the capacity of its
    // vectors) is reused by the next new key. Bounded by the most keys live at once (keys_max),
    // rounded up to a chunk.
    std::vector<std::unique_ptr<KeyState[]>> key_chunks_;
    std::vector<KeyState*> free_keys_;
    NameTable<Partition> partitions_;
    std::vector<std::unique_ptr<Partition[]>> partition_chunks_;  // never freed: keys_max
    std::vector<Partition*> partition_list_;                      // by index
    Domain global_;
    IdleQueue activity_;  // active partitions, see advance()
    uint64_t active_ = 0;
    WatermarkTree low_tree_;  // scope global: the minimum candidate of the active partitions
    std::set<std::pair<int64_t, Partition*>, DeadlineLess> idle_deadlines_;
    // Forgotten partitions: their objects and min-tree indexes, reused by new ones (both
    // bounded by the most partitions live at once, so by keys_max).
    std::vector<Partition*> free_partitions_;
    std::vector<Partition*> retired_partitions_;  // forgotten this step, see maybe_forget
    std::vector<uint32_t> free_indexes_;
    size_t partitions_allocated_ = 0;
    // Scope partition: where a partition that is not live starts (new_partition_watermark).
    // A forgotten one's (watermark - ingest time) when it went, by remembered_hash of its name,
    // at most keys_max of them; the lowest given up first into forgotten_floor_ms_, the
    // (absolute) watermark below which no partition starts. time_min before any was given up.
    std::unordered_map<uint64_t, Remembered> remembered_;
    // What one costs: its hash-map node and bucket, and its node in remembered_by_lead_.
    static constexpr uint64_t remembered_bytes = 96;
    std::set<std::pair<int64_t, uint64_t>> remembered_by_lead_;  // (lead, hash): eviction order
    std::vector<uint64_t> dirty_remembered_;
    std::vector<uint64_t> pending_remembered_;  // what the last checkpoint wrote of them
    int64_t forgotten_floor_ms_ = time_min;
    std::vector<Partition*> went_idle_;       // advance()'s batch; bounded by keys_max
    std::vector<Partition*> due_partitions_;  // advance()'s batch; bounded by keys_max
    int64_t now_ms_ = time_min;
    uint64_t units_total_ = 0;
    uint64_t fired_total_ = 0;
    PipelineStats stats_;
    // Too-late counts per window, in too_late_rank order (most first, then the earlier window),
    // at most too_late_windows_max: a window with one too-late event is let go (or not taken)
    // when the table is full, never one with more (count_too_late_window). Kept in the meta
    // record; stats() shows the first too_late_windows_shown.
    static constexpr size_t too_late_windows_max = 256;
    std::vector<TooLateWindow> too_late_windows_;

    // late.report: one tally per window with too-late events, by (start, end), at most
    // late_tallies_max. When full, a new window takes the place of the reported tally whose
    // last too-late event is the oldest; when every tally has events not yet reported (that
    // many windows got too-late events within one report interval), the new window's event
    // is not tallied and is counted (too_late_unreported). Kept in the 'L' record.
    struct LateTally {
        int64_t start_ms = 0;
        int64_t end_ms = 0;
        int64_t since_ms = 0;   // ingest time of its first too-late event
        uint64_t too_late = 0;  // its too-late events
        uint64_t reported = 0;  // too_late as last reported; 0: never
        int64_t last_ms = 0;    // ingest time of its latest too-late event: eviction order
    };
    static constexpr size_t late_tallies_max = 256;
    std::vector<LateTally> late_tallies_;
    uint64_t too_late_unreported_ = 0;
    uint64_t late_reports_ = 0;
    bool late_dirty_ = false;    // the 'L' record changed since the last checkpoint
    bool late_pending_ = false;  // the last checkpoint wrote it (see checkpoint_failed)
    LateReport late_report_;     // reused for every report

    bool tracking_ = false;
    // The key objects changed since the last checkpoint, each listed once (KeyState::dirty): a
    // key removed while listed leaves its object listed, and a new key that reuses the object
    // is not listed again. So the list is bounded by the key objects (keys_max, rounded up to
    // a chunk), where a list of names grew by one for every key created between two
    // checkpoints: a backfill creates a key for each of its windows (issue 31).
    std::vector<KeyState*> dirty_keys_;
    std::vector<Partition*> dirty_partitions_;
    std::vector<std::string> erased_;
    // Records of the old window encoding read by the restore: the first checkpoint erases
    // them (and writes their windows in the new one). Bounded by the restored windows.
    std::vector<std::string> legacy_units_;
    bool meta_seen_ = false;
    uint64_t fingerprint_seen_ = 0;
    int scope_seen_ = -1;          // -1: a meta record written before the scope was stored
    bool clock_trusted_ = true;    // see Engine::set_clock
    bool scope_mismatch_ = false;  // a partition record of the other scope was restored
    // What the last checkpoint wrote, until the next one (or checkpoint_failed) settles it.
    std::vector<std::string> pending_erased_;
    std::vector<std::string> pending_keys_;
    std::vector<std::string> pending_partitions_;
    bool pending_full_ = false;

    AggregateState fresh_;
    AggregateState scratch_;
    Values values_;
    Values previous_values_;  // a fired session's results before a late event changed it
    std::string composite_;
    Emission emission_;
    std::vector<KeyState*> due_keys_;  // fire_due_slow's batch; bounded by keys_max
    struct RankedKey {
        uint64_t rank;
        KeyState* key;
    };
    std::vector<RankedKey> sort_scratch_;  // sort_by_key's; bounded by keys_max
    uint64_t id_seed_ = 0;                 // emission_id_seed(node, pipeline name, version)
};

// --- the per-event path -----------------------------------------------------------------------

inline Partition* PipelineRun::find_partition(std::string_view name) const {
    return partitions_.find(name, hash_name(name));
}

TM_HOT KeyState* PipelineRun::find_key(std::string_view key) const {
    return keys_.find(key, hash_name(key));
}

inline void PipelineRun::mark_dirty(Partition* p) {
    if (tracking_ && !p->dirty) {
        p->dirty = true;
        dirty_partitions_.push_back(p);
    }
}

inline void PipelineRun::mark_dirty(KeyState& k) {
    if (tracking_ && !k.dirty) {
        k.dirty = true;
        dirty_keys_.push_back(&k);
    }
}

inline int64_t PipelineRun::candidate_of(const Partition& p) const {
    return sat_add(p.max_event_ms, -spec_.watermark.delay_ms);
}

TM_HOT void PipelineRun::low_set(Partition& p, int64_t value) {
    low_tree_.set(p.index, value);
}

inline int64_t PipelineRun::idle_watermark(const Domain& d, int64_t now_ms) {
    return sat_add(d.idle_base_ms, now_ms - d.idle_since_ms);
}

// A watermark never moves back.
inline void PipelineRun::raise_watermark(Domain& d, int64_t candidate) {
    if (candidate != time_max && candidate > d.watermark) d.watermark = candidate;
}

// Per event: the partition's place in activity_ is renewed every half idle timeout (see
// IdleQueue), its leaf of low_tree_ written with the path above it that changes.
TM_HOT void PipelineRun::touch_partition(Partition* p, int64_t event_ms, int64_t ingest_ms) {
    mark_dirty(p);
    p->last_ingest_ms = ingest_ms;
    const int64_t before = candidate_of(*p);
    const bool raised = event_ms > p->max_event_ms;
    if (raised) p->max_event_ms = event_ms;
    if (p->idle) {
        p->idle = false;
        ++active_;
        activity_.push(p);
        if (!scope_partition_) low_set(*p, candidate_of(*p));
    } else {
        activity_.touched(p);
        // An active partition's leaf holds its candidate (scope global): the tree is told
        // the old value instead of reading it.
        if (raised && !scope_partition_) low_tree_.raise(p->index, before, candidate_of(*p));
    }
}

// Scope global: called for every event (a key moves with the partition it was last seen in).
TM_HOT void PipelineRun::set_key_partition(KeyState& k, Partition* p) {
    if (k.partition != p) move_key_partition(k, p);
}

// The key's state, created on its first accepted event; nullptr (and counted) past keys_max.
inline KeyState* PipelineRun::admit_key(KeyState* k, std::string_view key, Partition* p, Domain& d,
                                        const Event& event, int64_t t, EmissionSink& sink) {
    if (!k) {
        if (keys_.size() >= spec_.limits.keys_max) {
            refuse(sink, key, event, t, Limit::keys, d.watermark);
            return nullptr;
        }
        k = create_key(key, p, d);
    }
    if (!scope_partition_) set_key_partition(*k, p);
    return k;
}

// The state Engine::prefetch found for `key`, if it is still the table's (no key created or
// removed since, and the name is the same); else the table's lookup.
TM_HOT KeyState* PipelineRun::take_prefound(std::string_view key) {
    KeyState* k = prefound_.key;
    prefound_.key = nullptr;
    if (k && prefound_.keys_changed == keys_changed_ && same_name(k->key, key)) return k;
    return find_key(key);
}

// Nothing for a clock step to do but move the clock: no partition can go idle yet, none
// waits to be released, no tally to report, and no watermark follows ingest time.
TM_HOT bool PipelineRun::step_is_quiet(int64_t now_ms) const {
    if (!retired_partitions_.empty() || !late_tallies_.empty()) return false;
    if (activity_.idle_bound_ms() <= now_ms) return false;
    if (!clock_trusted_) return true;
    if (scope_partition_) return idle_deadlines_.empty() || idle_deadlines_.begin()->first > now_ms;
    return !global_.idle;
}

TM_HOT void PipelineRun::advance(int64_t now_ms, EmissionSink& sink) {
    if (now_ms <= now_ms_) return;
    if (step_is_quiet(now_ms)) {
        now_ms_ = now_ms;
        stats_.ingest_ms = now_ms;
        return;
    }
    step(now_ms, sink);
}

TM_HOT void PipelineRun::fire_due(Domain& d, EmissionSink& sink) {
    // The front may be stale (then due no later than the real front): the slow path sorts
    // that out.
    if (!d.timers.empty() && d.timers.front().due_ms <= d.watermark) fire_due_slow(d, sink);
}

}  // namespace tidemark::core::detail
