#include "core/engine.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <utility>

#include "core/bytes.h"

namespace tidemark::core {
namespace {

constexpr int64_t time_min = std::numeric_limits<int64_t>::min();
constexpr int64_t time_max = std::numeric_limits<int64_t>::max();
// Windows whose too-late counts are kept for health, newest first: a bound, not a log.
constexpr size_t too_late_windows_max = 256;

int64_t floor_div(int64_t a, int64_t b) {
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
    return q;
}
int64_t floor_to(int64_t t, int64_t step, int64_t offset) {
    return floor_div(t - offset, step) * step + offset;
}
// The per-event path calls these small helpers several times per event; -O2 does not always
// inline them on its own.
#define TM_HOT inline __attribute__((always_inline))

TM_HOT int64_t sat_add(int64_t a, int64_t b) {
    int64_t sum;
    if (__builtin_add_overflow(a, b, &sum)) return b > 0 ? time_max : time_min;
    return sum;
}

// Keys and partition names are short (device ids, topics): read them 8 bytes at a time with
// overlapping loads instead of a byte loop, and compare them the same way before memcmp.
TM_HOT uint64_t load_u64(const char* p) {
    uint64_t v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
TM_HOT uint64_t load_u32(const char* p) {
    uint32_t v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

__extension__ using uint128 = unsigned __int128;

// The 64x64->128 multiply-and-fold of wyhash: one multiply mixes two words.
TM_HOT uint64_t mum(uint64_t a, uint64_t b) {
    const uint128 r = static_cast<uint128>(a) * b;
    return static_cast<uint64_t>(r) ^ static_cast<uint64_t>(r >> 64);
}

TM_HOT uint64_t hash_name(std::string_view s) {
    constexpr uint64_t k0 = 0xa0761d6478bd642fULL, k1 = 0xe7037ed1a0b428dbULL,
                       k2 = 0x8ebc6af09c88c6e3ULL;
    const char* p = s.data();
    const size_t n = s.size();
    uint64_t seed = k0 ^ n;
    uint64_t a = 0, b = 0;
    if (n > 16) {
        size_t i = 0;
        for (; n - i > 16; i += 16)
            seed = mum(load_u64(p + i) ^ k1, load_u64(p + i + 8) ^ seed);
        a = load_u64(p + n - 16);
        b = load_u64(p + n - 8);
    } else if (n >= 8) {
        a = load_u64(p);
        b = load_u64(p + n - 8);
    } else if (n >= 4) {
        a = load_u32(p);
        b = load_u32(p + n - 4);
    } else if (n > 0) {
        const auto byte = [&](size_t i) {
            return static_cast<uint64_t>(static_cast<uint8_t>(p[i]));
        };
        a = (byte(0) << 16) | (byte(n / 2) << 8) | byte(n - 1);
    }
    return mum(k1 ^ n, mum(a ^ k1, b ^ seed ^ k2));
}

TM_HOT bool same_name(std::string_view a, std::string_view b) {
    const size_t n = a.size();
    if (n != b.size()) return false;
    if (n >= 8 && n <= 16)
        return load_u64(a.data()) == load_u64(b.data()) &&
               load_u64(a.data() + n - 8) == load_u64(b.data() + n - 8);
    return std::memcmp(a.data(), b.data(), n) == 0;
}

// The keys or partitions of one pipeline by name: open addressing with linear probing over
// (hash, pointer), so a lookup is one probe of a flat array and, on a hash match, one compare.
// Erasing shifts the following entries back, so no tombstones accumulate.
// Limits: at most half full (it doubles); holds what the pipeline bounds by keys_max. The
// table does not own the items. Its order is arbitrary: nothing that reaches output may
// depend on it.
template <class T>
class NameTable {
  public:
    size_t size() const { return size_; }
    bool empty() const { return size_ == 0; }

    TM_HOT T* find(std::string_view name, uint64_t hash) const {
        if (slots_.empty()) return nullptr;
        for (size_t i = hash & mask_;; i = (i + 1) & mask_) {
            const Slot& s = slots_[i];
            if (!s.item) return nullptr;
            if (s.hash == hash && same_name(name_of(*s.item), name)) return s.item;
        }
    }

    // `item->name` must not be in the table yet.
    void insert(T* item, uint64_t hash) {
        if (2 * (size_ + 1) > slots_.size()) grow();
        size_t i = hash & mask_;
        while (slots_[i].item)
            i = (i + 1) & mask_;
        slots_[i] = {hash, item};
        ++size_;
    }

    void erase(std::string_view name, uint64_t hash) {
        TM_ASSERT(!slots_.empty());
        size_t i = hash & mask_;
        while (!(slots_[i].hash == hash && same_name(name_of(*slots_[i].item), name))) {
            TM_ASSERT(slots_[i].item != nullptr);
            i = (i + 1) & mask_;
        }
        // Backward shift: move up every following entry whose home is at or before the hole.
        for (size_t j = (i + 1) & mask_; slots_[j].item; j = (j + 1) & mask_) {
            const size_t home = slots_[j].hash & mask_;
            if (((j - home) & mask_) >= ((j - i) & mask_)) {
                slots_[i] = slots_[j];
                i = j;
            }
        }
        slots_[i] = {};
        --size_;
    }

    template <class F>
    void for_each(F&& f) const {
        for (const Slot& s : slots_)
            if (s.item) f(*s.item);
    }

  private:
    struct Slot {
        uint64_t hash = 0;
        T* item = nullptr;
    };

    void grow() {
        std::vector<Slot> old = std::move(slots_);
        slots_.assign(std::max<size_t>(16, 2 * old.size()), Slot{});
        mask_ = slots_.size() - 1;
        for (const Slot& s : old) {
            if (!s.item) continue;
            size_t i = s.hash & mask_;
            while (slots_[i].item)
                i = (i + 1) & mask_;
            slots_[i] = s;
        }
    }

    std::vector<Slot> slots_;
    size_t mask_ = 0;
    size_t size_ = 0;
};

// One part of a composite key: a backslash before every backslash and '|', so that the '|'
// between partition and key is the only bare one.
void append_escaped(std::string& out, std::string_view part) {
    for (const char c : part) {
        if (c == '\\' || c == '|') out.push_back('\\');
        out.push_back(c);
    }
}

using Values = std::vector<std::optional<double>>;

void put_values(std::string& out, const Values& v) {
    bytes::put_u32(out, static_cast<uint32_t>(v.size()));
    for (const auto& x : v) {
        out.push_back(x ? 1 : 0);
        bytes::put_f64(out, x ? *x : 0.0);
    }
}
bool get_values(std::string_view& in, Values& v) {
    uint32_t n;
    if (!bytes::get_u32(in, n) || n > 100'000) return false;
    v.assign(n, std::nullopt);
    for (auto& x : v) {
        if (in.empty()) return false;
        const bool has = in[0] != 0;
        in.remove_prefix(1);
        double d;
        if (!bytes::get_f64(in, d)) return false;
        if (has) x = d;
    }
    return true;
}

struct KeyState;
struct Partition;

// One unit of window state: a slice (tumbling, hopping) or a session.
// Aligned so that what an event touches (bounds, dirty, the in-place aggregate values) is one
// cache line.
struct alignas(64) Unit {
    int64_t start = 0;
    int64_t end = 0;
    // Sessions only: the latest event time in the session. A session always ends after it and
    // spans less than max_duration from its start (see session_event).
    int64_t last_ms = 0;
    bool dirty = true;
    // Sessions only: whether the session fired, its last revision and (retract mode) values.
    bool fired = false;
    uint32_t revision = 0;
    AggregateState state;
    Values values;
};

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
    // Scope partition: the partition's position in Pipeline::idle_deadlines_.
    int64_t idle_deadline_ms = time_max;
};

// One cache line: what an event touches, and the name it is compared by.
struct alignas(64) Partition {
    int64_t max_event_ms = time_min;
    int64_t last_ingest_ms = time_min;
    bool idle = true;  // until its first event
    bool dirty = false;
    // Forgotten (idle, no live key) while still on the dirty list: the object is reused only
    // after the next checkpoint has walked that list.
    bool forgotten = false;
    uint32_t index = 0;
    uint32_t keys = 0;  // live keys whose partition this is: it is forgotten only at 0
    std::string name;
    std::unique_ptr<Domain> domain;  // scope partition only
};

// An active partition's place in the idle queue: `last_ingest_ms` is the partition's last
// ingest time when the entry was (re)placed, never later than the partition's own.
struct ActivityEntry {
    int64_t last_ingest_ms;
    uint32_t index;
    Partition* partition;
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
    bool dirty = false;
    bool meta_dirty = true;  // fired_through, fired windows or partition changed since written
};

std::string_view name_of(const KeyState& k) {
    return k.key;
}
std::string_view name_of(const Partition& p) {
    return p.name;
}

bool timer_later(const TimerEntry& a, const TimerEntry& b) {
    return a.due_ms > b.due_ms;
}

struct DeadlineLess {
    bool operator()(const std::pair<int64_t, Partition*>& a,
                    const std::pair<int64_t, Partition*>& b) const {
        if (a.first != b.first) return a.first < b.first;
        return a.second->name < b.second->name;
    }
};

// Storage keys: prefix, then 'A' pipeline meta | 'K' key (length-prefixed) 'm' meta or 'u'
// unit start (sortable) | 'P' partition name.
std::string key_prefix(std::string_view pipeline) {
    std::string out;
    out.push_back('\x01');
    bytes::put_str(out, pipeline);
    return out;
}

}  // namespace

// Everything one pipeline keeps and does. See Engine for the contract.
class Pipeline {
  public:
    Pipeline(const std::string& node_id, const PipelineSpec& spec)
        : node_id_(node_id),
          spec_(spec),
          aggs_(spec.aggregates, spec.quantile),
          prefix_(key_prefix(spec.name)),
          session_(spec.window.type == WindowType::session),
          scope_partition_(spec.watermark.scope == WatermarkScope::partition),
          lateness_ms_(spec.late.allowed_lateness_ms),
          retract_(spec.late.corrections == Corrections::retract) {
        const WindowSpec& w = spec.window;
        size_ms_ = w.size_ms;
        offset_ms_ = w.offset_ms;
        advance_ms_ = w.type == WindowType::hopping ? w.advance_ms : w.size_ms;
        if (!session_) slice_ms_ = std::gcd(size_ms_, advance_ms_);
        fresh_ = aggs_.make();
        scratch_ = fresh_;
        unit_bytes_ = aggs_.bytes_per_window() + sizeof(Unit);
        id_seed_ = emission_id_seed(node_id_, spec_.name);
    }

    const PipelineSpec& spec() const { return spec_; }

    void advance(int64_t now_ms, EmissionSink& sink) {
        if (now_ms <= now_ms_) return;
        reap_partitions();
        now_ms_ = now_ms;
        stats_.ingest_ms = now_ms;
        // Partitions go idle one ingest instant at a time, in the order of the instants, all
        // partitions of one instant together; after each instant the global watermark is the
        // minimum over those still active, so the windows that minimum reaches close then, and
        // an all-idle advance starts from it (not from a minimum taken before they went idle).
        for (;;) {
            const int64_t idle_at = next_idle_at(now_ms);
            if (idle_at > now_ms) break;
            went_idle_.clear();
            while (next_idle_at(now_ms) == idle_at) {
                went_idle_.push_back(activity_.front().partition);
                activity_pop();
            }
            for (Partition* p : went_idle_)
                go_idle(p, idle_at);
            if (!scope_partition_) {
                if (active_ == 0) {
                    global_.idle = true;
                    global_.idle_since_ms = idle_at;
                    global_.idle_base_ms = global_.watermark;
                } else {
                    raise_watermark(global_, global_low());
                    fire_due(global_, sink);
                }
            }
            // After the firing: keys it removed may have been the last of a partition.
            for (Partition* p : went_idle_)
                maybe_forget(p);
        }
        // With the gateway's clock unsynchronised, ingest time says nothing about how much
        // event time passed: idle watermarks stay where they are (set_clock).
        if (!clock_trusted_) return;
        if (scope_partition_) {
            // Idle partitions whose watermark (following ingest time) reaches a window fire in
            // partition-name order, whatever their deadlines: a restored engine rebuilds the
            // deadlines from exact timers, the running one may hold early ones.
            due_partitions_.clear();
            while (!idle_deadlines_.empty() && idle_deadlines_.begin()->first <= now_ms) {
                Partition* p = idle_deadlines_.begin()->second;
                idle_deadlines_.erase(idle_deadlines_.begin());
                p->domain->idle_deadline_ms = time_max;
                due_partitions_.push_back(p);
            }
            std::sort(due_partitions_.begin(), due_partitions_.end(),
                      [](const Partition* a, const Partition* b) { return a->name < b->name; });
            for (Partition* p : due_partitions_) {
                catch_up_idle(*p, sink);
                if (!p->forgotten && find_partition(p->name) == p) schedule_idle(p);
            }
        } else if (global_.idle) {
            raise_watermark(global_, idle_watermark(global_, now_ms));
            fire_due(global_, sink);
        }
    }

    void process(const Event& event, EmissionSink& sink) {
        TM_ASSERT(event.fields.size() == spec_.fields.size());
        if (event.ingest_ms > now_ms_) advance(event.ingest_ms, sink);
        ++stats_.events_in;
        int64_t t = event.event_ms;
        int64_t lag_ms;
        if (__builtin_sub_overflow(event.ingest_ms, t, &lag_ms))
            lag_ms = t > 0 ? time_min : time_max;
        stats_.lag_ms.add(lag_ms);
        // An unsynchronised clock cannot tell an event from the future from a clock behind.
        if (clock_trusted_ && t > sat_add(event.ingest_ms, spec_.watermark.max_future_ms)) {
            t = event.ingest_ms;
            ++stats_.clamped;
        }
        std::string_view part_name = event.partition.empty() ? event.key : event.partition;
        std::string_view key = event.key;
        if (scope_partition_ && part_name != event.key) {
            // A part holding '|' must not make two (partition, key) pairs one key.
            composite_.clear();
            append_escaped(composite_, part_name);
            composite_.push_back('|');
            append_escaped(composite_, event.key);
            key = composite_;
        }
        KeyState* k = find_key(key);
        // The key's partition is read anyway (touch_partition): comparing its name costs no
        // extra cache line.
        Partition* p = (k && k->partition && same_name(k->partition->name, part_name))
                           ? k->partition
                           : find_partition(part_name);
        if (scope_partition_ && p && p->domain->idle && clock_trusted_) {
            // An idle partition's watermark follows ingest time: bring it to now before the
            // event is judged (and fire what that reaches), as the clock would have.
            catch_up_idle(*p, sink);
            k = find_key(key);
            p = find_partition(part_name);
        }
        if (!p) {
            if (partitions_.size() >= spec_.limits.keys_max) {
                const int64_t wm = scope_partition_ ? new_partition_watermark() : global_.watermark;
                if (event_too_late(k, t, wm)) {
                    const auto [start, end] = new_event_window(t);
                    too_late(sink, key, event, t, start, end, wm);
                } else {
                    refuse(sink, key, event, t, Limit::keys, wm);
                }
                return;
            }
            p = create_partition(part_name);
            if (scope_partition_) p->domain->watermark = new_partition_watermark();
        }
        Domain& d = scope_partition_ ? *p->domain : global_;

        if (session_) {
            session_event(k, key, p, d, t, event, sink);
        } else {
            slice_event(k, key, p, d, t, event, sink);
        }
        touch_partition(p, t, event.ingest_ms);
        if (scope_partition_) {
            if (p->domain->idle_deadline_ms != time_max) {
                idle_deadlines_.erase({p->domain->idle_deadline_ms, p});
                p->domain->idle_deadline_ms = time_max;
            }
            d.idle = false;
            raise_watermark(d, sat_add(p->max_event_ms, -spec_.watermark.delay_ms));
        } else {
            global_.idle = false;
            // While a partition is known to be at or below the watermark, the minimum is too
            // and the watermark stays: the minimum is looked up only when that one moves up.
            if (low_witness_ == no_witness) raise_watermark(global_, global_low());
        }
        fire_due(d, sink);
        // An event refused for its window (max_open_windows) may leave a new partition with
        // no key; it is active now, and is forgotten when it goes idle.
    }

    const PipelineStats& stats() {
        stats_.keys = keys_.size();
        stats_.open_windows = units_total_ + fired_total_;
        stats_.state_bytes = units_total_ * unit_bytes_ +
                             fired_total_ * (sizeof(Fired) + 16 * spec_.aggregates.size()) +
                             keys_.size() * (sizeof(KeyState) + 48) +
                             partitions_.size() * (sizeof(Partition) + 48 + sizeof(ActivityEntry) +
                                                   2 * sizeof(int64_t));
        stats_.partitions_active = active_;
        stats_.partitions_idle = partitions_.size() - active_;
        if (scope_partition_) {
            // Idle partitions' watermarks follow ingest time: read as of the clock.
            int64_t wm = time_max;
            for (const Partition* p : partition_list_) {
                if (!p) continue;
                const Domain& d = *p->domain;
                wm = std::min(wm, d.idle && clock_trusted_
                                      ? std::max(d.watermark, idle_watermark(d, now_ms_))
                                      : d.watermark);
            }
            stats_.watermark_ms = wm == time_max ? time_min : wm;
        } else {
            stats_.watermark_ms =
                global_.idle && clock_trusted_
                    ? std::max(global_.watermark, idle_watermark(global_, now_ms_))
                    : global_.watermark;
        }
        return stats_;
    }

    const std::vector<std::pair<std::pair<int64_t, int64_t>, uint64_t>>& too_late_windows() const {
        return too_late_windows_;
    }

    // --- checkpoint -------------------------------------------------------------------------

    void checkpoint(StateWriter& w) {
        std::string value;
        // What the previous checkpoint wrote is taken as committed (see checkpoint_failed).
        pending_erased_.clear();
        pending_keys_.clear();
        pending_partitions_.clear();
        pending_full_ = !tracking_;
        if (!tracking_) {
            // First checkpoint: everything that exists.
            keys_.for_each([&](KeyState& k) { write_key(w, k, true, value); });
            for (Partition* p : partition_list_)
                if (p) write_partition(w, *p, value);
            tracking_ = true;
        } else {
            for (const std::string& key : erased_)
                w.erase(key);
            for (const std::string& name : dirty_keys_) {
                KeyState* k = find_key(name);
                if (k) write_key(w, *k, false, value);
            }
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
        pending_keys_ = std::move(dirty_keys_);
        erased_.clear();
        dirty_keys_.clear();
        dirty_partitions_.clear();
        // The meta record (watermark, counters) changes with every record: always written.
        write_meta(w, value);
    }

    // The transaction that took the last checkpoint did not commit: what it held is marked
    // changed again, so the next checkpoint writes it (with everything changed since).
    // Erasures go first, as they did: a key erased then and written since is written after.
    void checkpoint_failed() {
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
        }
        pending_erased_.clear();
        pending_keys_.clear();
        pending_partitions_.clear();
        pending_full_ = false;
    }

    // See Engine::set_clock.
    void set_clock(bool trusted, int64_t now_ms) {
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
    void resume(int64_t now_ms) {
        if (clock_trusted_) hold_idle_watermarks();
        restart_silence(now_ms);
    }

    // Idle watermarks take what ingest time gave them up to the last record, and stop there.
    // What that reaches fires at the next step (fire_due, or the deadline set by
    // restart_silence).
    void hold_idle_watermarks() {
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
    void restart_silence(int64_t now_ms) {
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
            if (a->last_ingest_ms != b->last_ingest_ms)
                return a->last_ingest_ms < b->last_ingest_ms;
            return a->index < b->index;
        });
        activity_.clear();
        for (Partition* p : active)
            activity_push(p);
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
    bool clock_trusted() const { return clock_trusted_; }

    Result<void> restore_entry(std::string_view rest, std::string_view value) {
        if (rest.empty()) return fail("empty state key");
        const char type = rest[0];
        rest.remove_prefix(1);
        if (type == 'A') return read_meta(value);
        if (type == 'P') return read_partition(rest, value);
        if (type == 'K') {
            std::string_view key;
            if (!bytes::get_str(rest, key) || rest.empty()) return fail("damaged key record");
            KeyState* k = find_key(key);
            if (!k) k = create_key(key, nullptr, global_);
            const char sub = rest[0];
            rest.remove_prefix(1);
            if (sub == 'm') return read_key_meta(*k, value);
            if (sub == 'u') return read_unit(*k, value);
            return fail("unknown key record type");
        }
        return fail("unknown state record type");
    }

    Result<void> restore_finish() {
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
            if (a->last_ingest_ms != b->last_ingest_ms)
                return a->last_ingest_ms < b->last_ingest_ms;
            return a->index < b->index;
        });
        for (Partition* p : active) {
            activity_push(p);
            ++active_;
            if (!scope_partition_) low_set(*p, candidate_of(*p));
        }
        std::vector<KeyState*> keys;
        keys_.for_each([&](KeyState& k) { keys.push_back(&k); });
        for (KeyState* k : keys) {
            if (!k->partition) return fail("key record without its partition");
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
        // A store written before partitions were forgotten may hold idle ones without keys.
        std::vector<Partition*> unused;
        for (Partition* p : partition_list_)
            if (p && p->idle && p->keys == 0) unused.push_back(p);
        for (Partition* p : unused)
            maybe_forget(p);
        return {};
    }

  private:
    // --- partitions and watermarks -----------------------------------------------------------

    Partition* find_partition(std::string_view name) const {
        return partitions_.find(name, hash_name(name));
    }

    // Indexes of forgotten partitions are reused (lowest first is not needed: any fixed rule
    // gives the same layout in a replay), so the min-tree stays as large as the most
    // partitions live at once, never as the most ever seen.
    Partition* create_partition(std::string_view name) {
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
        if (scope_partition_) p->domain = std::make_unique<Domain>();
        partitions_.insert(p, hash_name(p->name));
        partition_list_[index] = p;
        return p;
    }

    // The ingest time at which the front of the idle queue goes idle, if that is at or before
    // `now_ms` (else time_max). Entries whose partition saw records since they were placed are
    // moved only when they come due: an entry is never later than its partition, so one that is
    // not due says that no partition is, and most clock steps cost one comparison.
    int64_t next_idle_at(int64_t now_ms) {
        const int64_t idle_timeout = spec_.watermark.idle_timeout_ms;
        while (!activity_.empty()) {
            ActivityEntry& front = activity_.front();
            if (sat_add(front.last_ingest_ms, idle_timeout) > now_ms) return time_max;
            if (front.partition->last_ingest_ms == front.last_ingest_ms)
                return sat_add(front.last_ingest_ms, idle_timeout);
            front.last_ingest_ms = front.partition->last_ingest_ms;
            activity_sift_down(0);
        }
        return time_max;
    }

    void go_idle(Partition* p, int64_t idle_at) {
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
    void catch_up_idle(Partition& p, EmissionSink& sink) {
        Domain& d = *p.domain;
        TM_ASSERT(d.idle);
        const int64_t before = d.watermark;
        raise_watermark(d, idle_watermark(d, now_ms_));
        if (d.watermark != before) mark_dirty(&p);
        fire_due(d, sink);
    }

    // Scope partition: where a partition seen for the first time starts (new, or forgotten
    // and back). Past the watermark of the forgotten partition that was furthest ahead, kept
    // moving with ingest time as an idle one would: a device that returns after being
    // forgotten cannot reopen windows it already had results for (their ids are taken).
    int64_t new_partition_watermark() const {
        return forgotten_lead_ms_ == time_min ? time_min : sat_add(now_ms_, forgotten_lead_ms_);
    }

    // A partition that is idle and holds no live key is state no longer needed: it goes, so
    // max_keys bounds what is live, not what was ever seen.
    void maybe_forget(Partition* p) {
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
            if (watermark != time_min) {
                int64_t lead;
                if (__builtin_sub_overflow(watermark, now_ms_, &lead)) lead = time_min;
                forgotten_lead_ms_ = std::max(forgotten_lead_ms_, lead);
            }
        }
        if (tracking_) erased_.push_back(partition_key(p->name));
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
    void reap_partitions() {
        for (Partition* p : retired_partitions_)
            release_partition(p);
        retired_partitions_.clear();
    }

    void release_partition(Partition* p) {
        TM_ASSERT(p->forgotten);
        p->max_event_ms = time_min;
        p->last_ingest_ms = time_min;
        p->idle = true;
        p->dirty = false;
        p->keys = 0;
        p->domain.reset();
        free_partitions_.push_back(p);
    }

    std::string partition_key(std::string_view name) const {
        std::string key = prefix_;
        key.push_back('P');
        key.append(name);
        return key;
    }

    // A key's partition: counted, so that a partition is forgotten only when no key is in it.
    void set_key_partition(KeyState& k, Partition* p) {
        if (k.partition == p) return;
        Partition* old = k.partition;
        k.partition = p;
        // The key's meta record names its partition: a restore must see the move.
        k.meta_dirty = true;
        if (p) mark_dirty(k);
        if (p) ++p->keys;
        if (old) {
            TM_ASSERT(old->keys > 0);
            --old->keys;
            maybe_forget(old);
        }
    }

    // Per event: no list or tree moves. The partition's place in activity_ is brought up to
    // date when it reaches the front (see advance), its leaf of low_tree_ when the minimum is
    // needed (see global_low).
    TM_HOT void touch_partition(Partition* p, int64_t event_ms, int64_t ingest_ms) {
        mark_dirty(p);
        p->last_ingest_ms = ingest_ms;
        const bool raised = event_ms > p->max_event_ms;
        if (raised) p->max_event_ms = event_ms;
        if (p->idle) {
            p->idle = false;
            ++active_;
            activity_push(p);
            if (!scope_partition_) low_set(*p, candidate_of(*p));
        } else if (raised && !scope_partition_) {
            low_set(*p, candidate_of(*p));
        }
    }

    void mark_dirty(Partition* p) {
        if (tracking_ && !p->dirty) {
            p->dirty = true;
            dirty_partitions_.push_back(p);
        }
    }

    // --- the idle queue: a binary min-heap of (last ingest, index), one entry per active
    // partition (so bounded by keys_max) -----------------------------------------------------

    static bool activity_less(const ActivityEntry& a, const ActivityEntry& b) {
        if (a.last_ingest_ms != b.last_ingest_ms) return a.last_ingest_ms < b.last_ingest_ms;
        return a.index < b.index;
    }

    void activity_push(Partition* p) {
        activity_.push_back({p->last_ingest_ms, p->index, p});
        size_t i = activity_.size() - 1;
        while (i > 0) {
            const size_t parent = (i - 1) / 2;
            if (!activity_less(activity_[i], activity_[parent])) break;
            std::swap(activity_[i], activity_[parent]);
            i = parent;
        }
    }

    void activity_sift_down(size_t i) {
        const size_t n = activity_.size();
        for (;;) {
            size_t least = i;
            const size_t l = 2 * i + 1, r = l + 1;
            if (l < n && activity_less(activity_[l], activity_[least])) least = l;
            if (r < n && activity_less(activity_[r], activity_[least])) least = r;
            if (least == i) return;
            std::swap(activity_[i], activity_[least]);
            i = least;
        }
    }

    void activity_pop() {
        activity_.front() = activity_.back();
        activity_.pop_back();
        if (!activity_.empty()) activity_sift_down(0);
    }

    // --- the global watermark: the minimum candidate (max event - delay) over partitions that
    // are not idle. low_tree_ is a tournament tree over the candidates, idle ones as +inf; a
    // changed leaf is written at once but its path to the root only when the minimum is needed.
    // The minimum is needed only when no partition is known to be at or below the watermark:
    // low_witness_ names one until it moves up (or goes idle). Limits: leaves and dirty list
    // are bounded by the partitions, so by keys_max. --------------------------------------

    int64_t candidate_of(const Partition& p) const {
        return sat_add(p.max_event_ms, -spec_.watermark.delay_ms);
    }

    TM_HOT void low_set(Partition& p, int64_t value) {
        if (p.index >= low_capacity_) low_grow(p.index);
        low_tree_[low_capacity_ + p.index] = value;
        // Leaves whose paths are out of date; past a sixteenth of the leaves the whole tree is
        // rebuilt instead, so the list stops there.
        if (low_dirty_.size() <= low_capacity_ / 16) low_dirty_.push_back(p.index);
        if (p.index == low_witness_ && value > global_.watermark) low_witness_ = no_witness;
    }

    void low_grow(uint32_t index) {
        size_t capacity = std::max<size_t>(16, low_capacity_);
        while (capacity <= index)
            capacity *= 2;
        std::vector<int64_t> grown(2 * capacity, time_max);
        for (size_t i = 0; i < low_capacity_; ++i)
            grown[capacity + i] = low_tree_[low_capacity_ + i];
        for (size_t i = capacity - 1; i >= 1; --i)
            grown[i] = std::min(grown[2 * i], grown[2 * i + 1]);
        low_tree_ = std::move(grown);
        low_capacity_ = capacity;
        low_dirty_.clear();  // every path was just rebuilt
    }

    // The minimum over partitions that are not idle (time_max when none); names the partition
    // holding it as the new witness.
    int64_t global_low() {
        if (low_capacity_ == 0) return time_max;
        const size_t n = low_capacity_;
        if (low_dirty_.size() * 16 > n) {
            for (size_t i = n - 1; i >= 1; --i)
                low_tree_[i] = std::min(low_tree_[2 * i], low_tree_[2 * i + 1]);
        } else {
            for (const uint32_t index : low_dirty_)
                for (size_t i = (n + index) / 2; i >= 1; i /= 2)
                    low_tree_[i] = std::min(low_tree_[2 * i], low_tree_[2 * i + 1]);
        }
        low_dirty_.clear();
        const int64_t low = low_tree_[1];
        if (low == time_max) return low;
        size_t i = 1;
        while (i < n)
            i = low_tree_[2 * i] == low ? 2 * i : 2 * i + 1;
        low_witness_ = static_cast<uint32_t>(i - n);
        return low;
    }

    static int64_t idle_watermark(const Domain& d, int64_t now_ms) {
        return sat_add(d.idle_base_ms, now_ms - d.idle_since_ms);
    }

    // A watermark never moves back.
    void raise_watermark(Domain& d, int64_t candidate) {
        if (candidate != time_max && candidate > d.watermark) d.watermark = candidate;
    }

    // Scope partition: when an idle partition's watermark (which follows ingest time) will
    // reach its earliest timer, as an ingest time.
    void schedule_idle(Partition* p) {
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

    // --- keys and timers ---------------------------------------------------------------------

    TM_HOT KeyState* find_key(std::string_view key) const {
        return keys_.find(key, hash_name(key));
    }

    // The key's state, created on its first accepted event; nullptr (and counted) past keys_max.
    KeyState* admit_key(KeyState* k, std::string_view key, Partition* p, Domain& d,
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

    KeyState* create_key(std::string_view key, Partition* p, Domain& d) {
        KeyState* k;
        if (free_keys_.empty()) {
            key_chunks_.push_back(std::make_unique<KeyState[]>(pool_chunk));
            for (size_t i = pool_chunk; i-- > 0;)
                free_keys_.push_back(&key_chunks_.back()[i]);
        }
        k = free_keys_.back();
        free_keys_.pop_back();
        k->key.assign(key);
        k->partition = nullptr;
        set_key_partition(*k, p);
        k->domain = &d;
        keys_.insert(k, hash_name(key));
        return k;
    }

    void remove_key(KeyState* k) {
        TM_ASSERT(k->units.empty() && k->fired.empty());
        timer_cancel(*k);
        if (tracking_) erased_.push_back(meta_key(k->key));
        keys_.erase(k->key, hash_name(k->key));
        // Back to a fresh key's state, keeping the capacity of its vectors. Last: the
        // partition may be forgotten with it.
        k->domain = nullptr;
        k->fired_through_ms = time_min;
        k->due_ms = time_max;
        k->dirty = false;
        k->meta_dirty = true;
        free_keys_.push_back(k);
        set_key_partition(*k, nullptr);
    }

    void mark_dirty(KeyState& k) {
        if (tracking_ && !k.dirty) {
            k.dirty = true;
            dirty_keys_.push_back(k.key);
        }
    }

    int64_t compute_due(const KeyState& k) const {
        return session_ ? session_due(k) : slice_due(k);
    }

    // --- timers (Domain::timers) -------------------------------------------------------------

    static bool timer_valid(const Domain& d, const TimerEntry& e) {
        return e.key->due_ms == e.due_ms && e.key->domain == &d;
    }

    void timer_add(KeyState& k, int64_t due) {
        Domain& d = *k.domain;
        TM_ASSERT(k.due_ms == time_max && due != time_max);
        if (d.timers.size() >= 2 * d.timers_live + 16) compact_timers(d);
        k.due_ms = due;
        ++d.timers_live;
        d.timers.push_back({due, &k});
        std::push_heap(d.timers.begin(), d.timers.end(), timer_later);
    }

    // The entry stays in the heap until it comes to the front.
    void timer_cancel(KeyState& k) {
        if (k.due_ms == time_max) return;
        k.due_ms = time_max;
        TM_ASSERT(k.domain->timers_live > 0);
        --k.domain->timers_live;
    }

    // The earliest due time of the domain, time_max when none.
    int64_t timer_front(Domain& d) {
        while (!d.timers.empty() && !timer_valid(d, d.timers.front())) {
            std::pop_heap(d.timers.begin(), d.timers.end(), timer_later);
            d.timers.pop_back();
        }
        return d.timers.empty() ? time_max : d.timers.front().due_ms;
    }

    // Drops the stale entries and the duplicates (a key that moved its timer away and back).
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

    // Timers may ring early, never late: when a key's due moves later (a session grows), its
    // entry stays where it is and fire_due() moves it when it rings, so the common case costs no
    // heap update. `due_ms` is the entry's position, not necessarily the key's real due.
    void reschedule(KeyState& k) {
        const int64_t due = compute_due(k);
        if (k.due_ms != time_max && due >= k.due_ms) return;
        timer_cancel(k);
        if (due == time_max) return;
        timer_add(k, due);
        if (scope_partition_ && k.domain->idle && timer_front(*k.domain) == due)
            schedule_idle(k.partition);
    }

    TM_HOT void fire_due(Domain& d, EmissionSink& sink) {
        // The front may be stale (then due no later than the real front): the slow path sorts
        // that out.
        if (!d.timers.empty() && d.timers.front().due_ms <= d.watermark) fire_due_slow(d, sink);
    }

    // Sorts keys as std::string's operator< does and drops duplicates. Keys of one stream
    // mostly share a prefix ("device-"): each is given the 8 bytes that follow the prefix
    // common to all, big-endian, so that most comparisons are of one integer.
    void sort_by_key(std::vector<KeyState*>& keys) {
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
    void fire_due_slow(Domain& d, EmissionSink& sink) {
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

    // --- emissions -----------------------------------------------------------------------

    // One Emission reused for every record: its key and values keep their capacity, so an
    // emission allocates nothing once the longest key and the values have been seen.
    void emit(EmissionSink& sink, const KeyState& k, int64_t start, int64_t end, EmissionKind kind,
              uint32_t revision, ClosedBy closed_by, const Values& values, int64_t watermark) {
        Emission& e = emission_;
        e.kind = kind;
        e.revision = revision;
        e.key.assign(k.key);
        e.start_ms = start;
        e.end_ms = end;
        e.closed_by = closed_by;
        e.values.assign(values.begin(), values.end());
        e.watermark_ms = watermark;
        e.id = emission_id_from_seed(id_seed_, k.key, start, end, revision, kind);
        switch (kind) {
            case EmissionKind::final_result:
                ++stats_.emitted_final;
                break;
            case EmissionKind::update:
                ++stats_.emitted_update;
                break;
            case EmissionKind::retract:
                ++stats_.emitted_retract;
                break;
        }
        e.pipeline = index_;
        sink.emit(e);
    }

    // The per-window table of too-late counts (newest windows first, bounded).
    void count_too_late_window(int64_t start, int64_t end) {
        auto it =
            std::find_if(too_late_windows_.begin(), too_late_windows_.end(), [&](const auto& w) {
                return w.first == std::pair{start, end};
            });
        if (it != too_late_windows_.end()) {
            ++it->second;
        } else {
            too_late_windows_.push_back({{start, end}, 1});
            std::sort(too_late_windows_.begin(), too_late_windows_.end(),
                      [](const auto& a, const auto& b) { return a.first.second > b.first.second; });
            if (too_late_windows_.size() > too_late_windows_max) too_late_windows_.pop_back();
        }
    }

    void too_late(EmissionSink& sink, std::string_view key, const Event& event, int64_t t,
                  int64_t start, int64_t end, int64_t watermark) {
        ++stats_.too_late;
        count_too_late_window(start, end);
        if (spec_.late.too_late != TooLate::side_output) return;
        side_output(sink, key, event, t, start, end, watermark,
                    "too late: window [" + std::to_string(start) + ", " + std::to_string(end) +
                        ") closed past its allowed lateness at watermark " +
                        std::to_string(watermark));
    }

    // An event the limits turned away: counted, and kept as side output where the pipeline
    // keeps too-late events, so that nothing is dropped without a trace.
    enum class Limit { keys, open_windows };
    void refuse(EmissionSink& sink, std::string_view key, const Event& event, int64_t t,
                Limit limit, int64_t watermark) {
        const bool keys = limit == Limit::keys;
        ++(keys ? stats_.keys_refused : stats_.windows_refused);
        if (spec_.late.too_late != TooLate::side_output) return;
        const auto [start, end] = new_event_window(t);
        side_output(sink, key, event, t, start, end, watermark,
                    keys ? "refused: max_keys " + std::to_string(spec_.limits.keys_max) + " reached"
                         : "refused: max_open_windows " +
                               std::to_string(spec_.limits.open_windows_max) + " reached");
    }

    void side_output(EmissionSink& sink, std::string_view key, const Event& event, int64_t t,
                     int64_t start, int64_t end, int64_t watermark, std::string reason) {
        ++stats_.side_outputs;
        SideOutput s;
        s.pipeline = index_;
        s.reason = std::move(reason);
        s.order = event.order;
        s.key = std::string(key);
        s.event_ms = t;
        s.ingest_ms = event.ingest_ms;
        s.window_start_ms = start;
        s.window_end_ms = end;
        s.watermark_ms = watermark;
        s.topic = std::string(event.topic);
        s.payload = std::string(event.payload);
        sink.side_output(s);
    }

    // Whether an event is too late at watermark `wm` (for a key `k` that may have no state),
    // and the window it would have opened (the newest one holding it, for slices).
    bool event_too_late(const KeyState* k, int64_t t, int64_t wm) const {
        if (wm == time_min) return false;
        const auto [start, end] = new_event_window(t);
        if (session_ && k)  // a session it joins is not too late for it
            for (const Unit& u : k->units)
                if (u.start < end && u.end > start) return false;
        return sat_add(end, lateness_ms_) <= wm;
    }
    std::pair<int64_t, int64_t> new_event_window(int64_t t) const {
        if (session_) return {t, sat_add(t, spec_.window.gap_ms)};
        const int64_t start = slice_last_window_start(slice_start(t));
        return {start, start + size_ms_};
    }

    // --- tumbling and hopping (slices) -------------------------------------------------------

    int64_t slice_start(int64_t t) const { return floor_to(t, slice_ms_, offset_ms_); }
    // The latest window start at or before t, and the earliest window start whose window holds t.
    int64_t last_window_start(int64_t t) const { return floor_to(t, advance_ms_, offset_ms_); }
    int64_t first_window_start(int64_t t) const {
        return floor_to(t - size_ms_, advance_ms_, offset_ms_) + advance_ms_;
    }

    // The earliest window end after fired_through whose window holds a slice.
    int64_t next_fire(const KeyState& k) const {
        for (const Unit& u : k.units) {
            int64_t end = first_window_start(u.start) + size_ms_;
            if (end <= k.fired_through_ms) {
                end = floor_to(k.fired_through_ms - size_ms_, advance_ms_, offset_ms_) +
                      advance_ms_ + size_ms_;
                if (end - size_ms_ > u.start) continue;  // every window of this slice fired
            }
            return end;
        }
        return time_max;
    }

    int64_t slice_purge_at(const Unit& u) const {
        return sat_add(last_window_start(u.start) + size_ms_, lateness_ms_);
    }

    int64_t slice_due(const KeyState& k) const {
        int64_t due = next_fire(k);
        if (!k.units.empty()) due = std::min(due, slice_purge_at(k.units.front()));
        if (!k.fired.empty()) due = std::min(due, sat_add(k.fired.front().end, lateness_ms_));
        return due;
    }

    // The aggregate state of window [start, end): the slice itself for tumbling windows, the
    // merge of its slices for hopping ones.
    const AggregateState* window_state(const KeyState& k, int64_t start, int64_t end) {
        if (slice_ms_ == size_ms_) {
            for (const Unit& u : k.units)
                if (u.start == start) return &u.state;
            return nullptr;
        }
        scratch_ = fresh_;
        bool any = false;
        for (const Unit& u : k.units) {
            if (u.start < start) continue;
            if (u.start >= end) break;
            aggs_.merge(scratch_, u.state);
            any = true;
        }
        return any ? &scratch_ : nullptr;
    }

    void slice_due_reached(KeyState& k, int64_t due, Domain& d, EmissionSink& sink) {
        k.meta_dirty = true;
        const int64_t fire_end = next_fire(k);
        TM_ASSERT(fire_end >= due);
        if (fire_end == due) {
            const int64_t start = due - size_ms_;
            const AggregateState* state = window_state(k, start, due);
            TM_ASSERT(state != nullptr);
            aggs_.results(*state, values_);
            emit(sink, k, start, due, EmissionKind::final_result, 0,
                 d.idle ? ClosedBy::idle : ClosedBy::watermark, values_, d.watermark);
            k.fired_through_ms = due;
            if (lateness_ms_ > 0) {
                Fired f{start, due, 0, {}};
                if (retract_) f.values = values_;
                k.fired.push_back(std::move(f));
                ++fired_total_;
            }
        }
        size_t n = 0;
        while (n < k.units.size() && slice_purge_at(k.units[n]) <= due) {
            if (tracking_) erased_.push_back(unit_key(k.key, k.units[n].start));
            ++n;
        }
        k.units.erase(k.units.begin(), k.units.begin() + static_cast<std::ptrdiff_t>(n));
        units_total_ -= n;
        size_t m = 0;
        while (m < k.fired.size() && sat_add(k.fired[m].end, lateness_ms_) <= due)
            ++m;
        k.fired.erase(k.fired.begin(), k.fired.begin() + static_cast<std::ptrdiff_t>(m));
        fired_total_ -= m;
        mark_dirty(k);
    }

    // The window starts of slice [s, s + slice_ms): as last_window_start / first_window_start of
    // any t in it, since advance and size are multiples of the slice. Without a division when
    // the slice is as long as the advance (every tumbling and most hopping windows).
    int64_t slice_last_window_start(int64_t s) const {
        return advance_ms_ == slice_ms_ ? s : floor_to(s, advance_ms_, offset_ms_);
    }
    int64_t slice_first_window_start(int64_t s) const {
        return advance_ms_ == slice_ms_
                   ? s - size_ms_ + advance_ms_
                   : floor_to(s - size_ms_, advance_ms_, offset_ms_) + advance_ms_;
    }

    void slice_event(KeyState* k, std::string_view key, Partition* p, Domain& d, int64_t t,
                     const Event& event, EmissionSink& sink) {
        const int64_t wm = d.watermark;
        // Most events land in the key's newest slice: then its bounds give the slice start.
        Unit* newest = k && !k->units.empty() ? &k->units.back() : nullptr;
        const bool in_newest = newest && t >= newest->start && t < newest->end;
        const int64_t s = in_newest ? newest->start : slice_start(t);
        const int64_t last_start = slice_last_window_start(s);
        if (wm != time_min && sat_add(last_start + size_ms_, lateness_ms_) <= wm) {
            too_late(sink, key, event, t, last_start, last_start + size_ms_, wm);
            return;
        }
        k = admit_key(k, key, p, d, event, t, sink);
        if (!k) return;
        Unit* unit = in_newest ? newest : nullptr;
        bool created = false;
        if (!unit) {
            auto it = k->units.end();
            while (it != k->units.begin() && std::prev(it)->start > s)
                --it;
            if (it != k->units.begin() && std::prev(it)->start == s) {
                unit = &*std::prev(it);
            } else {
                if (units_total_ + fired_total_ >= spec_.limits.open_windows_max) {
                    refuse(sink, key, event, t, Limit::open_windows, wm);
                    if (k->units.empty() && k->fired.empty()) remove_key(k);
                    return;
                }
                Unit u;
                u.start = s;
                u.end = s + slice_ms_;
                u.state = fresh_;
                unit = &*k->units.insert(it, std::move(u));
                ++units_total_;
                created = true;
            }
        }
        aggs_.add(unit->state, event.fields.data(), t, event.order);
        unit->dirty = true;
        mark_dirty(*k);
        const bool late = wm != time_min && slice_first_window_start(s) + size_ms_ <= wm;
        if (late) {
            if (refire_late(*k, t, wm, sink)) ++stats_.late_updated;
            k->fired_through_ms = std::max(k->fired_through_ms, wm);
            k->meta_dirty = true;
            reschedule(*k);
        } else if (created) {
            reschedule(*k);
        }
    }

    // A late event inside the horizon: every window holding it that already closed is emitted
    // again, as the next revision (or as its first result if it had none when it closed).
    bool refire_late(KeyState& k, int64_t t, int64_t wm, EmissionSink& sink) {
        bool any = false;
        bool missed = false;
        for (int64_t ws = first_window_start(t); ws <= last_window_start(t); ws += advance_ms_) {
            const int64_t end = ws + size_ms_;
            if (end > wm) break;
            if (sat_add(end, lateness_ms_) <= wm) {
                // Hopping: too late for this window, on time for a later one that holds t.
                count_too_late_window(ws, end);
                missed = true;
                continue;
            }
            const AggregateState* state = window_state(k, ws, end);
            TM_ASSERT(state != nullptr);
            aggs_.results(*state, values_);
            auto f = std::lower_bound(k.fired.begin(), k.fired.end(), end,
                                      [](const Fired& a, int64_t e) { return a.end < e; });
            if (f != k.fired.end() && f->end == end) {
                if (retract_)
                    emit(sink, k, ws, end, EmissionKind::retract, f->revision, ClosedBy::late,
                         f->values, wm);
                ++f->revision;
                emit(sink, k, ws, end, EmissionKind::update, f->revision, ClosedBy::late, values_,
                     wm);
                if (retract_) f->values = values_;
            } else {
                emit(sink, k, ws, end, EmissionKind::final_result, 0, ClosedBy::late, values_, wm);
                Fired nf{ws, end, 0, {}};
                if (retract_) nf.values = values_;
                k.fired.insert(f, std::move(nf));
                ++fired_total_;
            }
            any = true;
        }
        if (missed) ++stats_.too_late_partial;
        return any;
    }

    // --- sessions ------------------------------------------------------------------------

    int64_t session_due(const KeyState& k) const {
        int64_t due = time_max;
        for (const Unit& u : k.units)
            due = std::min(due, u.fired ? sat_add(u.end, lateness_ms_) : u.end);
        return due;
    }

    void session_due_reached(KeyState& k, int64_t due, Domain& d, EmissionSink& sink) {
        for (Unit& u : k.units) {
            if (u.fired || u.end != due) continue;
            aggs_.results(u.state, values_);
            emit(sink, k, u.start, u.end, EmissionKind::final_result, 0,
                 d.idle ? ClosedBy::idle : ClosedBy::watermark, values_, d.watermark);
            u.fired = true;
            u.revision = 0;
            if (retract_) u.values = values_;
            u.dirty = true;
        }
        size_t kept = 0;
        for (size_t i = 0; i < k.units.size(); ++i) {
            Unit& u = k.units[i];
            if (u.fired && sat_add(u.end, lateness_ms_) <= due) {
                if (tracking_) erased_.push_back(unit_key(k.key, u.start));
                --units_total_;
                continue;
            }
            if (kept != i) k.units[kept] = std::move(u);
            ++kept;
        }
        k.units.resize(kept);
        mark_dirty(k);
    }

    void session_event(KeyState* k, std::string_view key, Partition* p, Domain& d, int64_t t,
                       const Event& event, EmissionSink& sink) {
        const int64_t wm = d.watermark;
        const int64_t gap = spec_.window.gap_ms;
        const int64_t max_duration = spec_.window.max_duration_ms;
        const int64_t t_end = sat_add(t, gap);
        // The sessions this event overlaps, [first, last) in start order: a key's sessions never
        // overlap one another, so their ends are in order too.
        size_t first = 0, last = 0;
        bool overlapped = false;
        if (k) {
            const auto& units = k->units;
            while (first < units.size() && units[first].end <= t)
                ++first;
            last = first;
            while (last < units.size() && units[last].start < t_end)
                ++last;
            overlapped = first != last;
            // Every event of a session lies inside it, and a session spans less than
            // max_duration: join all it overlaps if that fits; else the one holding t (it
            // always fits); else the first one if that fits; else a session of its own, cut
            // where the next one starts.
            const auto fits = [&](size_t a, size_t b) {
                int64_t low = std::min(t, units[a].start), high = t;
                for (size_t i = a; i < b; ++i)
                    high = std::max(high, units[i].last_ms);
                return high - low < max_duration;
            };
            if (overlapped && !fits(first, last)) {
                if (units[first].start <= t || fits(first, first + 1))
                    last = first + 1;
                else
                    last = first;
            }
        }
        if (!overlapped && wm != time_min && sat_add(t_end, lateness_ms_) <= wm) {
            too_late(sink, key, event, t, t, t_end, wm);
            return;
        }
        k = admit_key(k, key, p, d, event, t, sink);
        if (!k) return;
        if (first == last && units_total_ + fired_total_ >= spec_.limits.open_windows_max) {
            refuse(sink, key, event, t, Limit::open_windows, wm);
            if (k->units.empty()) remove_key(k);
            return;
        }
        auto& units = k->units;
        int64_t start = t;
        int64_t last_ms = t;
        for (size_t i = first; i < last; ++i) {
            start = std::min(start, units[i].start);
            last_ms = std::max(last_ms, units[i].last_ms);
        }
        int64_t end = std::min(sat_add(last_ms, gap), sat_add(start, max_duration));
        if (last < units.size()) end = std::min(end, units[last].start);
        TM_ASSERT(start <= t && t <= last_ms && last_ms < end);
        const bool late = end <= wm;
        mark_dirty(*k);

        // One open session grows: in place, no new window identity has been published yet.
        if (last == first + 1 && !units[first].fired) {
            Unit& u = units[first];
            if (u.start != start && tracking_) erased_.push_back(unit_key(k->key, u.start));
            u.start = start;
            u.end = end;
            u.last_ms = last_ms;
            aggs_.add(u.state, event.fields.data(), t, event.order);
            u.dirty = true;
            if (late) {
                aggs_.results(u.state, values_);
                emit(sink, *k, start, end, EmissionKind::final_result, 0, ClosedBy::late, values_,
                     wm);
                u.fired = true;
                if (retract_) u.values = values_;
                ++stats_.late_updated;
            }
            reschedule(*k);
            return;
        }
        // The same window as before: update it in place.
        if (last == first + 1 && units[first].start == start && units[first].end == end) {
            Unit& u = units[first];
            u.last_ms = last_ms;
            aggs_.add(u.state, event.fields.data(), t, event.order);
            u.dirty = true;
            if (u.fired) {
                aggs_.results(u.state, values_);
                if (retract_)
                    emit(sink, *k, u.start, u.end, EmissionKind::retract, u.revision,
                         ClosedBy::late, u.values, wm);
                ++u.revision;
                emit(sink, *k, u.start, u.end, EmissionKind::update, u.revision, ClosedBy::late,
                     values_, wm);
                if (retract_) u.values = values_;
                ++stats_.late_updated;
            }
            return;
        }
        // A new or merged window: every fired session it absorbs no longer exists.
        Unit merged;
        merged.start = start;
        merged.end = end;
        merged.last_ms = last_ms;
        merged.state = fresh_;
        for (size_t i = first; i < last; ++i) {
            Unit& u = units[i];
            aggs_.merge(merged.state, u.state);
            if (u.fired) {
                // A fired session's state changes only with a re-emission, so its results are
                // what the consumer holds: the retract carries them in both correction modes.
                aggs_.results(u.state, values_);
                emit(sink, *k, u.start, u.end, EmissionKind::retract, u.revision, ClosedBy::merge,
                     values_, wm);
            }
            if (tracking_) erased_.push_back(unit_key(k->key, u.start));
        }
        aggs_.add(merged.state, event.fields.data(), t, event.order);
        if (late) {
            aggs_.results(merged.state, values_);
            emit(sink, *k, start, end, EmissionKind::final_result, 0, ClosedBy::late, values_, wm);
            merged.fired = true;
            if (retract_) merged.values = values_;
            ++stats_.late_updated;
        }
        units_total_ -= (last - first);
        units.erase(units.begin() + static_cast<std::ptrdiff_t>(first),
                    units.begin() + static_cast<std::ptrdiff_t>(last));
        auto pos = std::lower_bound(units.begin(), units.end(), start,
                                    [](const Unit& u, int64_t s) { return u.start < s; });
        units.insert(pos, std::move(merged));
        ++units_total_;
        reschedule(*k);
    }

    // --- state encoding --------------------------------------------------------------------

    std::string meta_key(std::string_view key) const {
        std::string out = prefix_;
        out.push_back('K');
        bytes::put_str(out, key);
        out.push_back('m');
        return out;
    }
    std::string unit_key(std::string_view key, int64_t start) const {
        std::string out = prefix_;
        out.push_back('K');
        bytes::put_str(out, key);
        out.push_back('u');
        bytes::put_i64_sortable(out, start);
        return out;
    }

    void write_key(StateWriter& w, KeyState& k, bool all, std::string& value) {
        value.clear();
        bytes::put_str(value, k.partition ? k.partition->name : std::string_view{});
        bytes::put_i64(value, k.fired_through_ms);
        bytes::put_u32(value, static_cast<uint32_t>(k.fired.size()));
        for (const Fired& f : k.fired) {
            bytes::put_i64(value, f.start);
            bytes::put_i64(value, f.end);
            bytes::put_u32(value, f.revision);
            put_values(value, f.values);
        }
        // The meta record changes only when windows fire, purge or re-fire: most checkpoints
        // of a busy key rewrite its slice and nothing else.
        if (all || k.meta_dirty) w.put(meta_key(k.key), value);
        k.meta_dirty = false;
        for (Unit& u : k.units) {
            if (!all && !u.dirty) continue;
            value.clear();
            bytes::put_i64(value, u.start);
            bytes::put_i64(value, u.end);
            value.push_back(u.fired ? 1 : 0);
            bytes::put_u32(value, u.revision);
            put_values(value, u.values);
            aggs_.encode(u.state, value);
            if (session_) bytes::put_i64(value, u.last_ms);  // absent before format 3
            w.put(unit_key(k.key, u.start), value);
            u.dirty = false;
        }
        k.dirty = false;
    }

    Result<void> read_key_meta(KeyState& k, std::string_view in) {
        std::string_view part;
        uint32_t n;
        if (!bytes::get_str(in, part) || !bytes::get_i64(in, k.fired_through_ms) ||
            !bytes::get_u32(in, n))
            return fail("damaged key meta of '" + k.key + "'");
        Partition* p = find_partition(part);
        if (!p) p = create_partition(part);
        set_key_partition(k, p);
        k.fired.clear();
        for (uint32_t i = 0; i < n; ++i) {
            Fired f;
            if (!bytes::get_i64(in, f.start) || !bytes::get_i64(in, f.end) ||
                !bytes::get_u32(in, f.revision) || !get_values(in, f.values))
                return fail("damaged fired window of '" + k.key + "'");
            k.fired.push_back(std::move(f));
        }
        return {};
    }

    Result<void> read_unit(KeyState& k, std::string_view in) {
        Unit u;
        if (!bytes::get_i64(in, u.start) || !bytes::get_i64(in, u.end) || in.empty())
            return fail("damaged window of '" + k.key + "'");
        u.fired = in[0] != 0;
        in.remove_prefix(1);
        if (!bytes::get_u32(in, u.revision) || !get_values(in, u.values) ||
            !aggs_.decode(in, u.state))
            return fail("damaged window state of '" + k.key + "'");
        if (session_) {
            // Written before sessions kept their latest event: the latest it can have been.
            u.last_ms = std::max(u.start, u.end - spec_.window.gap_ms);
            if (!in.empty() && !bytes::get_i64(in, u.last_ms))
                return fail("damaged session of '" + k.key + "'");
            if (u.last_ms < u.start || u.last_ms >= u.end)
                return fail("damaged session bounds of '" + k.key + "'");
        }
        u.dirty = false;
        auto pos = std::lower_bound(k.units.begin(), k.units.end(), u.start,
                                    [](const Unit& a, int64_t s) { return a.start < s; });
        k.units.insert(pos, std::move(u));
        return {};
    }

    void write_partition(StateWriter& w, const Partition& p, std::string& value) {
        value.clear();
        bytes::put_u32(value, p.index);
        bytes::put_i64(value, p.max_event_ms);
        bytes::put_i64(value, p.last_ingest_ms);
        value.push_back(p.idle ? 1 : 0);
        if (p.domain) put_domain(value, *p.domain);
        w.put(partition_key(p.name), value);
    }

    Result<void> read_partition(std::string_view name, std::string_view in) {
        Partition* p = find_partition(name);
        if (!p) p = create_partition(name);
        uint32_t index;
        if (!bytes::get_u32(in, index) || !bytes::get_i64(in, p->max_event_ms) ||
            !bytes::get_i64(in, p->last_ingest_ms) || in.empty())
            return fail("damaged partition '" + std::string(name) + "'");
        p->idle = in[0] != 0;
        in.remove_prefix(1);
        // A partition's own watermark is stored under scope partition only: its presence
        // tells the scope the state was written under (refused in restore_finish).
        if (p->domain ? in.empty() : !in.empty()) {
            scope_mismatch_ = true;
            return {};
        }
        if (p->domain && !get_domain(in, *p->domain))
            return fail("damaged partition watermark '" + std::string(name) + "'");
        // Keep the stored index so the min-tree is laid out as before (not needed for results).
        (void)index;
        return {};
    }

    static void put_domain(std::string& out, const Domain& d) {
        bytes::put_i64(out, d.watermark);
        out.push_back(d.idle ? 1 : 0);
        bytes::put_i64(out, d.idle_since_ms);
        bytes::put_i64(out, d.idle_base_ms);
    }
    static bool get_domain(std::string_view& in, Domain& d) {
        if (!bytes::get_i64(in, d.watermark) || in.empty()) return false;
        d.idle = in[0] != 0;
        in.remove_prefix(1);
        return bytes::get_i64(in, d.idle_since_ms) && bytes::get_i64(in, d.idle_base_ms);
    }

    void write_meta(StateWriter& w, std::string& value) {
        value.clear();
        bytes::put_u64(value, state_fingerprint(spec_));
        bytes::put_i64(value, now_ms_);
        put_domain(value, global_);
        const uint64_t counters[] = {
            stats_.events_in,       stats_.late_updated,     stats_.too_late,
            stats_.side_outputs,    stats_.clamped,          stats_.keys_refused,
            stats_.windows_refused, stats_.emitted_final,    stats_.emitted_update,
            stats_.emitted_retract, stats_.too_late_partial, stats_.partitions_forgotten};
        bytes::put_u32(value, static_cast<uint32_t>(std::size(counters)));
        for (uint64_t c : counters)
            bytes::put_u64(value, c);
        stats_.lag_ms.encode(value);
        bytes::put_u32(value, static_cast<uint32_t>(too_late_windows_.size()));
        for (const auto& [w_, n] : too_late_windows_) {
            bytes::put_i64(value, w_.first);
            bytes::put_i64(value, w_.second);
            bytes::put_u64(value, n);
        }
        // Since format 3 (older records end above): where new partitions start, and the scope
        // the state was written under.
        bytes::put_i64(value, forgotten_lead_ms_);
        value.push_back(scope_partition_ ? 1 : 0);
        value.push_back(clock_trusted_ ? 1 : 0);
        std::string key = prefix_;
        key.push_back('A');
        w.put(key, value);
    }

    Result<void> read_meta(std::string_view in) {
        uint32_t n;
        uint64_t* counters[] = {
            &stats_.events_in,       &stats_.late_updated,     &stats_.too_late,
            &stats_.side_outputs,    &stats_.clamped,          &stats_.keys_refused,
            &stats_.windows_refused, &stats_.emitted_final,    &stats_.emitted_update,
            &stats_.emitted_retract, &stats_.too_late_partial, &stats_.partitions_forgotten};
        // Format 2 stored the first ten counters.
        if (!bytes::get_u64(in, fingerprint_seen_) || !bytes::get_i64(in, now_ms_) ||
            !get_domain(in, global_) || !bytes::get_u32(in, n) ||
            (n != 10 && n != std::size(counters)))
            return fail("damaged meta record of pipeline '" + spec_.name + "'");
        for (uint32_t i = 0; i < n; ++i)
            if (!bytes::get_u64(in, *counters[i]))
                return fail("damaged counters of '" + spec_.name + "'");
        if (!stats_.lag_ms.decode(in) || !bytes::get_u32(in, n))
            return fail("damaged lag sketch of '" + spec_.name + "'");
        too_late_windows_.clear();
        for (uint32_t i = 0; i < n; ++i) {
            int64_t s, e;
            uint64_t c;
            if (!bytes::get_i64(in, s) || !bytes::get_i64(in, e) || !bytes::get_u64(in, c))
                return fail("damaged too-late table of '" + spec_.name + "'");
            too_late_windows_.push_back({{s, e}, c});
        }
        if (!in.empty()) {
            if (!bytes::get_i64(in, forgotten_lead_ms_) || in.size() != 2 || in[0] > 1 || in[1] > 1)
                return fail("damaged meta record of pipeline '" + spec_.name + "'");
            scope_seen_ = in[0];
            clock_trusted_ = in[1] != 0;
        }
        stats_.ingest_ms = now_ms_;
        meta_seen_ = true;
        return {};
    }

  public:
    uint32_t index_ = 0;

  private:
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
    std::vector<ActivityEntry> activity_;  // active partitions, see advance()
    uint64_t active_ = 0;
    static constexpr uint32_t no_witness = std::numeric_limits<uint32_t>::max();
    std::vector<int64_t> low_tree_;  // scope global, see global_low()
    size_t low_capacity_ = 0;
    std::vector<uint32_t> low_dirty_;  // at most low_capacity_ / 16 + 1
    uint32_t low_witness_ = no_witness;
    std::set<std::pair<int64_t, Partition*>, DeadlineLess> idle_deadlines_;
    // Forgotten partitions: their objects and min-tree indexes, reused by new ones (both
    // bounded by the most partitions live at once, so by keys_max).
    std::vector<Partition*> free_partitions_;
    std::vector<Partition*> retired_partitions_;  // forgotten this step, see maybe_forget
    std::vector<uint32_t> free_indexes_;
    size_t partitions_allocated_ = 0;
    // Scope partition: the largest (watermark - ingest time) of a forgotten partition, see
    // new_partition_watermark(); time_min before any was forgotten.
    int64_t forgotten_lead_ms_ = time_min;
    std::vector<Partition*> went_idle_;       // advance()'s batch; bounded by keys_max
    std::vector<Partition*> due_partitions_;  // advance()'s batch; bounded by keys_max
    int64_t now_ms_ = time_min;
    uint64_t units_total_ = 0;
    uint64_t fired_total_ = 0;
    PipelineStats stats_;
    std::vector<std::pair<std::pair<int64_t, int64_t>, uint64_t>> too_late_windows_;

    bool tracking_ = false;
    std::vector<std::string> dirty_keys_;
    std::vector<Partition*> dirty_partitions_;
    std::vector<std::string> erased_;
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
    std::string composite_;
    Emission emission_;
    std::vector<KeyState*> due_keys_;  // fire_due_slow's batch; bounded by keys_max
    struct RankedKey {
        uint64_t rank;
        KeyState* key;
    };
    std::vector<RankedKey> sort_scratch_;  // sort_by_key's; bounded by keys_max
    uint64_t id_seed_ = 0;                 // emission_id_seed(node, pipeline name)
};

struct Engine::Impl {
    std::string node_id;
    std::vector<PipelineSpec> specs;
    std::vector<std::unique_ptr<Pipeline>> pipelines;
    std::map<std::string, uint32_t, std::less<>> by_name;
};

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

Result<std::unique_ptr<Engine>> Engine::create(std::string node_id,
                                               std::vector<PipelineSpec> pipelines) {
    auto impl = std::make_unique<Impl>();
    impl->node_id = std::move(node_id);
    for (const PipelineSpec& spec : pipelines) {
        if (auto ok = validate(spec); !ok)
            return fail("pipeline '" + spec.name + "': " + ok.error().message);
        if (impl->by_name.count(spec.name))
            return fail("pipeline '" + spec.name + "' is defined twice");
        const uint32_t index = static_cast<uint32_t>(impl->pipelines.size());
        impl->by_name.emplace(spec.name, index);
        impl->pipelines.push_back(std::make_unique<Pipeline>(impl->node_id, spec));
        impl->pipelines.back()->index_ = index;
    }
    impl->specs = std::move(pipelines);
    return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

const std::vector<PipelineSpec>& Engine::pipelines() const {
    return impl_->specs;
}

int Engine::find_pipeline(std::string_view name) const {
    auto it = impl_->by_name.find(name);
    return it == impl_->by_name.end() ? -1 : static_cast<int>(it->second);
}

void Engine::advance(int64_t ingest_ms, EmissionSink& sink) {
    for (auto& p : impl_->pipelines)
        p->advance(ingest_ms, sink);
}

void Engine::process(uint32_t pipeline, const Event& event, EmissionSink& sink) {
    TM_ASSERT(pipeline < impl_->pipelines.size());
    impl_->pipelines[pipeline]->process(event, sink);
}

const PipelineStats& Engine::stats(uint32_t pipeline) const {
    TM_ASSERT(pipeline < impl_->pipelines.size());
    return impl_->pipelines[pipeline]->stats();
}

void Engine::checkpoint(StateWriter& writer) {
    for (auto& p : impl_->pipelines)
        p->checkpoint(writer);
}

std::optional<int64_t> watermark_lag_ms(const PipelineStats& stats) {
    if (stats.watermark_ms == time_min) return std::nullopt;
    int64_t lag;
    if (__builtin_sub_overflow(stats.ingest_ms, stats.watermark_ms, &lag)) return std::nullopt;
    return lag;
}

void Engine::resume(int64_t ingest_ms) {
    for (auto& p : impl_->pipelines)
        p->resume(ingest_ms);
}

void Engine::set_clock(bool trusted, int64_t ingest_ms) {
    for (auto& p : impl_->pipelines)
        p->set_clock(trusted, ingest_ms);
}

bool Engine::clock_trusted() const {
    return impl_->pipelines.empty() || impl_->pipelines.front()->clock_trusted();
}

void Engine::checkpoint_failed() {
    for (auto& p : impl_->pipelines)
        p->checkpoint_failed();
}

std::string Engine::state_prefix(std::string_view pipeline_name) {
    return key_prefix(pipeline_name);
}

std::optional<std::string> Engine::pipeline_of_state_key(std::string_view key) {
    std::string_view name;
    if (key.empty() || key[0] != '\x01') return std::nullopt;
    key.remove_prefix(1);
    if (!bytes::get_str(key, name)) return std::nullopt;
    return std::string(name);
}

Result<void> Engine::restore_entry(std::string_view key, std::string_view value) {
    std::string_view rest = key;
    std::string_view name;
    if (rest.empty() || rest[0] != '\x01') return fail("a state key of an unknown format");
    rest.remove_prefix(1);
    if (!bytes::get_str(rest, name)) return fail("a damaged state key");
    auto it = impl_->by_name.find(name);
    if (it == impl_->by_name.end())
        return fail("the store holds state of pipeline '" + std::string(name) +
                    "', which is not in the config");
    auto ok = impl_->pipelines[it->second]->restore_entry(rest, value);
    if (!ok) return fail("pipeline '" + std::string(name) + "': " + ok.error().message);
    return {};
}

Result<void> Engine::restore_finish() {
    for (auto& p : impl_->pipelines)
        if (auto ok = p->restore_finish(); !ok) return ok;
    return {};
}

}  // namespace tidemark::core
