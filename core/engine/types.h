// The engine's state types (internal): window units, fired windows, keys, partitions and the
// watermark domains they close on, shared by the files of core/engine/.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/aggregate.h"

// The per-event path calls these small helpers several times per event, across the files of
// core/engine/; -O2 does not always inline them on its own.
#define TM_HOT inline __attribute__((always_inline))

namespace tidemark::core::detail {

inline constexpr int64_t time_min = std::numeric_limits<int64_t>::min();
inline constexpr int64_t time_max = std::numeric_limits<int64_t>::max();
// A time read back from the store beyond +-2^62 ms is damage: event times are years 0-9999
// (under 2^48 ms), watermarks and ingest times no further, and the window arithmetic
// (t - size, t + advance + size) has room past the bound without overflow.
inline constexpr int64_t stored_time_abs_max = int64_t{1} << 62;
constexpr bool stored_time_fits(int64_t t) {
    return t >= -stored_time_abs_max && t <= stored_time_abs_max;
}

TM_HOT int64_t sat_add(int64_t a, int64_t b) {
    int64_t sum;
    if (__builtin_add_overflow(a, b, &sum)) return b > 0 ? time_max : time_min;
    return sum;
}

using Values = std::vector<std::optional<double>>;

struct KeyState;
struct Partition;

// One unit of window state: a slice (tumbling, hopping) or a session.
// The engine keeps one per open window, so its size is the state's size per window (issue 16:
// 80 bytes, not the 128 of a cache-line-aligned unit with its own vector of values). What an
// event touches (bounds, dirty, the aggregate values in place) is the first 64 bytes.
struct Unit {
    int64_t start = 0;
    int64_t end = 0;
    bool dirty = true;
    // The store holds this window's record (a checkpoint wrote it, or it was restored): only
    // then does removing the window cost an erasure. A backfill creates and purges most of its
    // windows between two checkpoints, and erasing those made its checkpoints slow (issue 13).
    // True after a write whose transaction failed is harmless (one erasure of nothing); false
    // while the record is stored would leave it behind, so it is cleared only where the
    // window gets a new record key (a new window, a session whose start moved).
    bool persisted = false;
    // Sessions only: whether the session fired, and its last revision. A fired session's
    // state changes only with a re-emission, so a retract cancels results(state) as it was
    // before the event that changed it: no copy of the values is kept.
    bool fired = false;
    uint32_t revision = 0;
    AggregateState state;
    // Sessions only: the latest event time in the session. A session always ends after it and
    // spans less than max_duration from its start (see session_event).
    int64_t last_ms = 0;
};

// Units are inserted one window at a time: grow the vector by half, not double, so that a
// key's windows carry a quarter of slack on average rather than half. Per window, not per
// event; a key keeps its capacity once it reached its steady number of windows.
inline void reserve_one_more(std::vector<Unit>& units) {
    if (units.size() == units.capacity()) units.reserve(units.size() + units.size() / 2 + 1);
}

// A tumbling/hopping window that fired and is kept until its lateness horizon.
struct Fired {
    int64_t start = 0;
    int64_t end = 0;
    uint32_t revision = 0;
    Values values;  // retract mode only: what the next retract cancels
};

// A key's timer. Entries are removed lazily: one whose key has since moved its timer (or was
// removed, or reused by another key of another domain) no longer matches the key's due_ms and
// domain, and is dropped when it comes to the front.
struct TimerEntry {
    int64_t due_ms;
    KeyState* key;
};

// A watermark and the windows that close on it: the pipeline's (scope global) or one
// partition's (scope partition).
struct Domain {
    int64_t watermark = time_min;
    bool idle = false;  // every partition of the domain is idle: the watermark follows ingest time
    int64_t idle_since_ms = 0;
    int64_t idle_base_ms = 0;
    // A binary min-heap on due time only: keys due at the same time are put in key order when
    // they fire (see fire_due_slow), so inserting compares no key. Limits: at most
    // 2 * timers_live + 16 entries (compact_timers), and timers_live <= keys <= keys_max.
    std::vector<TimerEntry> timers;
    uint64_t timers_live = 0;  // keys of this domain whose due_ms is set
    // Scope partition: the partition's position in PipelineRun::idle_deadlines_.
    int64_t idle_deadline_ms = time_max;
};

// The first cache line is what an event touches, and the name it is compared by.
struct alignas(64) Partition {
    int64_t max_event_ms = time_min;
    int64_t last_ingest_ms = time_min;
    int64_t queued_ms = time_min;  // its place in the idle queue (IdleQueue); time_min: none
    bool idle = true;              // until its first event
    bool dirty = false;
    bool persisted = false;  // the store holds its record: see Unit::persisted
    // Forgotten (idle, no live key) while still on the dirty list: the object is reused only
    // after the next checkpoint has walked that list.
    bool forgotten = false;
    uint32_t index = 0;
    std::string name;
    uint32_t keys = 0;               // live keys whose partition this is: it is forgotten only at 0
    std::unique_ptr<Domain> domain;  // scope partition only
};

// The fields an event touches come first, so that they share one cache line.
struct alignas(64) KeyState {
    Partition* partition = nullptr;  // scope partition: the owner; scope global: the last seen
    std::vector<Unit> units;         // sorted by start
    std::string key;
    Domain* domain = nullptr;
    std::vector<Fired> fired;             // sorted by end
    int64_t fired_through_ms = time_min;  // every window ending at or before this has fired
    int64_t due_ms = time_max;            // position in domain->timers, time_max when absent
    bool dirty = false;           // on the dirty list until the next checkpoint, even if freed
    bool meta_dirty = true;       // fired_through, fired windows or partition changed since written
    bool meta_persisted = false;  // the store holds its meta record: see Unit::persisted
};

inline std::string_view name_of(const KeyState& k) {
    return k.key;
}
inline std::string_view name_of(const Partition& p) {
    return p.name;
}

}  // namespace tidemark::core::detail
