#include <algorithm>
#include <cstdint>
#include <iterator>
#include <limits>
#include <string>
#include <utility>

#include "core/bytes.h"
#include "core/engine/pipeline_run.h"

namespace tidemark::core::detail {
namespace {

// A stored list of values has one per aggregate, and the config allows at most 64 aggregates
// (adapters/config/pipelines.cpp, aggregates_max): this bound only stops a damaged length from
// allocating, far above any stored list.
constexpr uint32_t stored_values_max = 100'000;

void put_values(std::string& out, const Values& v) {
    bytes::put_u32(out, static_cast<uint32_t>(v.size()));
    for (const auto& x : v) {
        out.push_back(x ? 1 : 0);
        bytes::put_f64(out, x ? *x : 0.0);
    }
}
bool get_values(std::string_view& in, Values& v) {
    uint32_t n;
    if (!bytes::get_u32(in, n) || n > stored_values_max) return false;
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

void put_domain(std::string& out, const Domain& d) {
    bytes::put_i64(out, d.watermark);
    out.push_back(d.idle ? 1 : 0);
    bytes::put_i64(out, d.idle_since_ms);
    bytes::put_i64(out, d.idle_base_ms);
}
bool get_domain(std::string_view& in, Domain& d) {
    if (!bytes::get_i64(in, d.watermark) || in.empty()) return false;
    d.idle = in[0] != 0;
    in.remove_prefix(1);
    return bytes::get_i64(in, d.idle_since_ms) && bytes::get_i64(in, d.idle_base_ms);
}

}  // namespace

std::string state_key_prefix(std::string_view pipeline) {
    std::string out;
    out.push_back('\x01');
    bytes::put_str(out, pipeline);
    return out;
}

// The longest unit key: prefix (tag, u32 length, state name), 'K', the key with its u32
// length, the type, the start.
static_assert(1 + 4 + state_name_bytes_max + 1 + 4 + key_bytes_max + 1 + 8 <= state_key_bytes_max);

// Every key below is bounded (process() refuses longer keys and partitions, validate() longer
// state names): checked here too, since a key a store refuses would fail every checkpoint.
std::string PipelineRun::partition_key(std::string_view name) const {
    std::string key = prefix_;
    key.push_back('P');
    key.append(name);
    TM_ASSERT(key.size() <= state_key_bytes_max);
    return key;
}

// A forgotten partition's start (new_partition_watermark): 'F', its name's hash. Since engine
// state format 4 of the meta record (below).
std::string PipelineRun::remembered_key(uint64_t hash) const {
    std::string key = prefix_;
    key.push_back('F');
    bytes::put_u64(key, hash);
    return key;
}

void PipelineRun::write_remembered(StateWriter& w, uint64_t hash, Remembered& r,
                                   std::string& value) {
    value.clear();
    bytes::put_i64(value, r.lead_ms);
    w.put(remembered_key(hash), value);
    r.persisted = true;
    r.dirty = false;
}

Result<void> PipelineRun::read_remembered(std::string_view rest, std::string_view value) {
    uint64_t hash = 0;
    int64_t lead_ms = 0;
    if (!scope_partition_ || !bytes::get_u64(rest, hash) || !rest.empty() ||
        !bytes::get_i64(value, lead_ms) || !value.empty() || remembered_.count(hash) ||
        remembered_.size() >= spec_.limits.keys_max)
        return fail("damaged record of a forgotten partition of '" + spec_.name + "'");
    remembered_.emplace(hash, Remembered{lead_ms, true, false});
    remembered_by_lead_.insert({lead_ms, hash});
    return {};
}

std::string PipelineRun::meta_key(std::string_view key) const {
    std::string out = prefix_;
    out.push_back('K');
    bytes::put_str(out, key);
    out.push_back('m');
    TM_ASSERT(out.size() <= state_key_bytes_max);
    return out;
}
// A window's record: 'w' (store format 5) in the compact encoding, 'u' (formats up to 4) in
// the fixed one, read and then rewritten as 'w' (see read_unit).
std::string PipelineRun::unit_key(std::string_view key, int64_t start, char type) const {
    std::string out = prefix_;
    out.push_back('K');
    bytes::put_str(out, key);
    out.push_back(type);
    bytes::put_i64_sortable(out, start);
    TM_ASSERT(out.size() <= state_key_bytes_max);
    return out;
}

void PipelineRun::write_key(StateWriter& w, KeyState& k, bool all, std::string& value) {
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
    if (all || k.meta_dirty) {
        w.put(meta_key(k.key), value);
        k.meta_persisted = true;
    }
    k.meta_dirty = false;
    for (Unit& u : k.units) {
        if (!all && !u.dirty) continue;
        value.clear();
        put_unit(u, value);
        w.put(unit_key(k.key, u.start), value);
        u.dirty = false;
        u.persisted = true;
    }
    k.dirty = false;
}

// The compact record of a window (format 5), about 25 bytes for count + mean + max where the
// fixed one took 65: the start is in the record's key, the rest is relative to it; a fired
// session's values are not kept (in retract mode they are results(state), see Unit).
//   varint end - start (> 0), byte flags (1: fired), varint revision,
//   sessions: varint last_ms - start (< end - start), then the state (AggregateSet::encode).
void PipelineRun::put_unit(const Unit& u, std::string& out) const {
    bytes::put_varint(out, static_cast<uint64_t>(u.end) - static_cast<uint64_t>(u.start));
    out.push_back(u.fired ? 1 : 0);
    bytes::put_varint(out, u.revision);
    if (session_)
        bytes::put_varint(out, static_cast<uint64_t>(u.last_ms) - static_cast<uint64_t>(u.start));
    aggs_.encode(u.state, out, AggregateSet::StateEncoding::compact);
}

Result<void> PipelineRun::read_key_meta(KeyState& k, std::string_view in) {
    std::string_view part;
    uint32_t n;
    if (!bytes::get_str(in, part) || !bytes::get_i64(in, k.fired_through_ms) ||
        !bytes::get_u32(in, n))
        return fail("damaged key meta of '" + k.key + "'");
    Partition* p = find_partition(part);
    if (!p) p = create_partition(part);
    set_key_partition(k, p);
    k.meta_persisted = true;
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

Result<void> PipelineRun::read_unit(KeyState& k, std::string_view in, int64_t key_start,
                                    bool legacy) {
    Unit u;
    u.start = key_start;
    if (legacy ? !read_legacy_unit(u, in) : !read_compact_unit(u, in))
        return fail("damaged window of '" + k.key + "'");
    // A window stored twice (under both record types) is damage, not two windows.
    auto pos = std::lower_bound(k.units.begin(), k.units.end(), u.start,
                                [](const Unit& a, int64_t s) { return a.start < s; });
    if (pos != k.units.end() && pos->start == u.start)
        return fail("damaged window bounds of '" + k.key + "'");
    // Whether the window fits this definition's grid is checked in restore_finish(), after the
    // definition itself. A record of the old encoding is written again in the new one by the
    // first checkpoint, which erases the old record: the store is upgraded as it is used.
    u.dirty = legacy;
    u.persisted = !legacy;  // the old record is erased through legacy_units_
    if (legacy) legacy_units_.push_back(unit_key(k.key, u.start, 'u'));
    const auto at = pos - k.units.begin();
    reserve_one_more(k.units);
    k.units.insert(k.units.begin() + at, std::move(u));
    return {};
}

bool PipelineRun::read_compact_unit(Unit& u, std::string_view in) {
    uint64_t span, revision, fired;
    if (!bytes::get_varint(in, span) || span == 0 || in.empty()) return false;
    // The end fits in int64: span <= time_max - start, computed without overflow.
    if (span > static_cast<uint64_t>(time_max) - static_cast<uint64_t>(u.start)) return false;
    u.end = static_cast<int64_t>(static_cast<uint64_t>(u.start) + span);
    fired = static_cast<unsigned char>(in[0]);
    in.remove_prefix(1);
    if (fired > 1 || !bytes::get_varint(in, revision) ||
        revision > std::numeric_limits<uint32_t>::max())
        return false;
    u.fired = fired != 0;
    u.revision = static_cast<uint32_t>(revision);
    if (session_) {
        uint64_t last;
        if (!bytes::get_varint(in, last) || last >= span) return false;
        u.last_ms = static_cast<int64_t>(static_cast<uint64_t>(u.start) + last);
    }
    return aggs_.decode(in, u.state, AggregateSet::StateEncoding::compact) && in.empty();
}

// Store formats up to 4: start and end (i64), fired (byte), revision (u32), a fired session's
// values in retract mode (which are results(state), so they are read past), the state in the
// fixed encoding, and for sessions since format 3 the latest event time (i64).
bool PipelineRun::read_legacy_unit(Unit& u, std::string_view in) {
    int64_t start;
    // The start is in the record's key too: a window whose value says otherwise would be
    // erased under a key that is not stored, and the record left behind.
    int64_t span = 0;
    if (!bytes::get_i64(in, start) || !bytes::get_i64(in, u.end) || in.empty() ||
        start != u.start || u.end <= u.start || __builtin_sub_overflow(u.end, u.start, &span))
        return false;
    u.fired = in[0] != 0;
    in.remove_prefix(1);
    if (!bytes::get_u32(in, u.revision) || !get_values(in, values_) ||
        !aggs_.decode(in, u.state, AggregateSet::StateEncoding::fixed))
        return false;
    if (session_) {
        // Written before sessions kept their latest event: the latest it can have been.
        u.last_ms = std::max(u.start, u.end - spec_.window.gap_ms);
        if (!in.empty() && !bytes::get_i64(in, u.last_ms)) return false;
        if (u.last_ms < u.start || u.last_ms >= u.end) return false;
    }
    return true;
}

void PipelineRun::write_partition(StateWriter& w, Partition& p, std::string& value) {
    value.clear();
    bytes::put_u32(value, p.index);
    bytes::put_i64(value, p.max_event_ms);
    bytes::put_i64(value, p.last_ingest_ms);
    value.push_back(p.idle ? 1 : 0);
    if (p.domain) put_domain(value, *p.domain);
    w.put(partition_key(p.name), value);
    p.persisted = true;
}

Result<void> PipelineRun::read_partition(std::string_view name, std::string_view in) {
    Partition* p = find_partition(name);
    if (!p) p = create_partition(name);  // or made by a key's meta record, not stored yet
    p->persisted = true;
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

void PipelineRun::write_meta(StateWriter& w, std::string& value) {
    value.clear();
    bytes::put_u64(value, state_fingerprint(spec_));
    bytes::put_i64(value, now_ms_);
    put_domain(value, global_);
    const uint64_t counters[] = {stats_.events_in,         stats_.late_updated,
                                 stats_.too_late,          stats_.side_outputs,
                                 stats_.clamped,           stats_.keys_refused,
                                 stats_.windows_refused,   stats_.emitted_final,
                                 stats_.emitted_update,    stats_.emitted_retract,
                                 stats_.too_late_partial,  stats_.partitions_forgotten,
                                 stats_.forgotten_evicted, stats_.too_late_windows_dropped};
    bytes::put_u32(value, static_cast<uint32_t>(std::size(counters)));
    for (uint64_t c : counters)
        bytes::put_u64(value, c);
    stats_.lag_ms.encode(value);
    bytes::put_u32(value, static_cast<uint32_t>(too_late_windows_.size()));
    for (const TooLateWindow& w_ : too_late_windows_) {
        bytes::put_i64(value, w_.start_ms);
        bytes::put_i64(value, w_.end_ms);
        bytes::put_u64(value, w_.too_late);
    }
    // Since format 3 (older records end above): where new partitions start, and the scope
    // the state was written under. Format 4 (issue 24) stores there the floor, an absolute
    // watermark, and says so with a last byte; format 3 stored the largest lead of a forgotten
    // partition over the clock.
    bytes::put_i64(value, forgotten_floor_ms_);
    value.push_back(scope_partition_ ? 1 : 0);
    value.push_back(clock_trusted_ ? 1 : 0);
    value.push_back(1);
    std::string key = prefix_;
    key.push_back('A');
    w.put(key, value);
}

Result<void> PipelineRun::read_meta(std::string_view in) {
    uint32_t n;
    uint64_t* counters[] = {&stats_.events_in,         &stats_.late_updated,
                            &stats_.too_late,          &stats_.side_outputs,
                            &stats_.clamped,           &stats_.keys_refused,
                            &stats_.windows_refused,   &stats_.emitted_final,
                            &stats_.emitted_update,    &stats_.emitted_retract,
                            &stats_.too_late_partial,  &stats_.partitions_forgotten,
                            &stats_.forgotten_evicted, &stats_.too_late_windows_dropped};
    // Format 2 stored the first ten counters, format 3 twelve, format 4 thirteen (before
    // too_late_windows_dropped).
    if (!bytes::get_u64(in, fingerprint_seen_) || !bytes::get_i64(in, now_ms_) ||
        !get_domain(in, global_) || !bytes::get_u32(in, n) ||
        (n != 10 && n != 12 && n != 13 && n != std::size(counters)))
        return fail("damaged meta record of pipeline '" + spec_.name + "'");
    for (uint32_t i = 0; i < n; ++i)
        if (!bytes::get_u64(in, *counters[i]))
            return fail("damaged counters of '" + spec_.name + "'");
    if (!stats_.lag_ms.decode(in) || !bytes::get_u32(in, n))
        return fail("damaged lag sketch of '" + spec_.name + "'");
    if (n > too_late_windows_max) return fail("damaged too-late table of '" + spec_.name + "'");
    too_late_windows_.clear();
    for (uint32_t i = 0; i < n; ++i) {
        TooLateWindow w;
        if (!bytes::get_i64(in, w.start_ms) || !bytes::get_i64(in, w.end_ms) ||
            !bytes::get_u64(in, w.too_late) || w.too_late == 0)
            return fail("damaged too-late table of '" + spec_.name + "'");
        too_late_windows_.push_back(w);
    }
    // Tables written before issue 29 are in window order (newest first): the order the
    // running engine keeps is restored, so the listed windows and the next record are the
    // same as had it not stopped.
    std::sort(too_late_windows_.begin(), too_late_windows_.end(), too_late_rank);
    if (!in.empty()) {
        int64_t start_ms = 0;
        if (!bytes::get_i64(in, start_ms) || (in.size() != 2 && in.size() != 3) || in[0] > 1 ||
            in[1] > 1 || (in.size() == 3 && in[2] != 1))
            return fail("damaged meta record of pipeline '" + spec_.name + "'");
        scope_seen_ = in[0];
        clock_trusted_ = in[1] != 0;
        // Format 3's lead, made absolute at the restored clock: every partition it covered was
        // forgotten at or before now, so none of them starts earlier than it did (their ids
        // stay unique), and the floor stops holding new devices back once the clock passes it.
        forgotten_floor_ms_ =
            in.size() == 3 || start_ms == time_min ? start_ms : sat_add(now_ms_, start_ms);
    }
    stats_.ingest_ms = now_ms_;
    meta_seen_ = true;
    return {};
}

}  // namespace tidemark::core::detail
