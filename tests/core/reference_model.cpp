// Written from DESIGN.md section 4 and the issue-11 engine rules only; see reference_model.h.
#include "tests/core/reference_model.h"

#include "core/hash.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <tuple>

namespace tidemark::model {
namespace {

constexpr int64_t time_min_ms = std::numeric_limits<int64_t>::min();

int64_t floor_div(int64_t a, int64_t b) {
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
    return q;
}

}  // namespace

std::string escape_key_part(const std::string& part) {
    std::string out;
    for (char c : part) {
        if (c == '\\' || c == '|') out += '\\';
        out += c;
    }
    return out;
}

int64_t ReferenceModel::Session::earliest() const {
    int64_t m = std::numeric_limits<int64_t>::max();
    for (const auto& e : events)
        m = std::min(m, e.t);
    return m;
}

int64_t ReferenceModel::Session::latest() const {
    int64_t m = time_min_ms;
    for (const auto& e : events)
        m = std::max(m, e.t);
    return m;
}

ReferenceModel::ReferenceModel(std::string node, core::PipelineSpec spec)
    : node_(std::move(node)),
      spec_(std::move(spec)),
      watermark_ms_(time_min_ms),
      floor_ms_(time_min_ms) {}

bool ReferenceModel::is_session() const {
    return spec_.window.type == core::WindowType::session;
}

bool ReferenceModel::is_global() const {
    return spec_.watermark.scope == core::WatermarkScope::global;
}

int64_t ReferenceModel::candidate(const Partition& p) const {
    return p.max_event_ms - spec_.watermark.delay_ms;
}

std::vector<int64_t> ReferenceModel::window_starts(int64_t t) const {
    const auto& w = spec_.window;
    if (w.type == core::WindowType::tumbling)
        return {floor_div(t - w.offset_ms, w.size_ms) * w.size_ms + w.offset_ms};
    int64_t advance = w.advance_ms > 0 ? w.advance_ms : w.size_ms;
    std::vector<int64_t> starts;
    for (int64_t s = floor_div(t, advance) * advance; s + w.size_ms > t; s -= advance)
        starts.push_back(s);
    std::reverse(starts.begin(), starts.end());
    return starts;
}

int64_t ReferenceModel::window_end(int64_t start) const {
    return start + spec_.window.size_ms;
}

int64_t ReferenceModel::domain_watermark(const std::string& partition) const {
    if (is_global()) return watermark_ms_;
    auto it = partitions_.find(partition);
    if (it == partitions_.end()) throw std::logic_error("model: key without partition");
    return it->second.watermark_ms;
}

ReferenceModel::Values ReferenceModel::aggregate(const std::vector<const Ev*>& events,
                                                 Ranges* ranges) const {
    Values out;
    if (ranges) ranges->assign(spec_.aggregates.size(), {0.0, 0.0});
    for (size_t a = 0; a < spec_.aggregates.size(); ++a) {
        const auto& agg = spec_.aggregates[a];
        if (agg.fn == core::AggregateFn::count && agg.field < 0) {
            out.push_back(static_cast<double>(events.size()));
            continue;
        }
        std::vector<const Ev*> with;  // events that carry the field
        for (const Ev* e : events)
            if (!std::isnan(e->fields.at(static_cast<size_t>(agg.field)))) with.push_back(e);
        auto value_of = [&](const Ev* e) { return e->fields[static_cast<size_t>(agg.field)]; };
        if (agg.fn == core::AggregateFn::count) {
            out.push_back(static_cast<double>(with.size()));
            continue;
        }
        if (with.empty()) {
            out.push_back(std::nullopt);
            continue;
        }
        double n = static_cast<double>(with.size());
        double sum = 0, lo = value_of(with[0]), hi = value_of(with[0]);
        for (const Ev* e : with) {
            sum += value_of(e);
            lo = std::min(lo, value_of(e));
            hi = std::max(hi, value_of(e));
        }
        double mean = sum / n;
        double squares = 0;
        for (const Ev* e : with)
            squares += (value_of(e) - mean) * (value_of(e) - mean);
        auto by_time = [](const Ev* x, const Ev* y) {
            return std::tie(x->t, x->order) < std::tie(y->t, y->order);
        };
        switch (agg.fn) {
            case core::AggregateFn::sum:
                out.push_back(sum);
                break;
            case core::AggregateFn::min:
                out.push_back(lo);
                break;
            case core::AggregateFn::max:
                out.push_back(hi);
                break;
            case core::AggregateFn::mean:
                out.push_back(mean);
                break;
            case core::AggregateFn::first:
                out.push_back(value_of(*std::min_element(with.begin(), with.end(), by_time)));
                break;
            case core::AggregateFn::last:
                out.push_back(value_of(*std::max_element(with.begin(), with.end(), by_time)));
                break;
            case core::AggregateFn::variance:
                out.push_back(squares / n);
                break;
            case core::AggregateFn::stddev:
                out.push_back(std::sqrt(squares / n));
                break;
            case core::AggregateFn::quantile: {
                std::vector<double> sorted;
                for (const Ev* e : with)
                    sorted.push_back(value_of(e));
                std::sort(sorted.begin(), sorted.end());
                double rank = agg.q * (n - 1);
                auto last = static_cast<int64_t>(sorted.size()) - 1;
                auto below = std::max<int64_t>(0, static_cast<int64_t>(std::floor(rank)) - 1);
                auto above = std::min<int64_t>(last, static_cast<int64_t>(std::ceil(rank)) + 1);
                out.push_back(sorted[static_cast<size_t>(std::llround(rank))]);
                if (ranges) {
                    // The sketch answers within its relative error of a value near the rank,
                    // clamped to [min, max].
                    double err = spec_.quantile.relative_error;
                    double b = sorted[static_cast<size_t>(below)];
                    double c = sorted[static_cast<size_t>(above)];
                    (*ranges)[a] = {std::max(lo, b - err * std::fabs(b) - 1e-9),
                                    std::min(hi, c + err * std::fabs(c) + 1e-9)};
                }
                break;
            }
            case core::AggregateFn::count:
                break;
        }
    }
    return out;
}

std::vector<const ReferenceModel::Ev*> ReferenceModel::window_events(const Key& key,
                                                                     int64_t start) const {
    std::vector<const Ev*> out;
    for (const auto& e : key.events)
        if (e.t >= start && e.t < window_end(start)) out.push_back(&e);
    return out;
}

std::vector<const ReferenceModel::Ev*> ReferenceModel::session_events(const Session& s) {
    std::vector<const Ev*> out;
    for (const auto& e : s.events)
        out.push_back(&e);
    return out;
}

void ReferenceModel::emit(core::EmissionKind kind, const std::string& key, int64_t start,
                          int64_t end, uint32_t revision, core::ClosedBy closed_by,
                          const std::vector<const Ev*>* events, const Published* published,
                          int64_t watermark_ms) {
    core::Emission e;
    e.pipeline = 0;
    e.kind = kind;
    e.revision = revision;
    e.key = key;
    e.start_ms = start;
    e.end_ms = end;
    e.closed_by = closed_by;
    e.watermark_ms = watermark_ms;
    e.id = core::emission_id(node_, spec_.name, key, start, end, revision, kind);
    Ranges ranges;
    if (events)
        e.values = aggregate(*events, &ranges);
    else {
        e.values = published->values;
        ranges = published->ranges;
    }
    emissions.push_back(e);
    quantile_ranges.push_back(ranges);
    if (kind == core::EmissionKind::final_result) ++stats.emitted_final;
    if (kind == core::EmissionKind::update) ++stats.emitted_update;
    if (kind == core::EmissionKind::retract) ++stats.emitted_retract;
}

void ReferenceModel::side_output(const Record& record, int64_t t, const std::string& reason,
                                 int64_t window_start, int64_t window_end_ms,
                                 int64_t watermark_ms) {
    ++stats.side_outputs;
    core::SideOutput s;
    s.reason = reason;
    s.order = record.order;
    s.key = record.key;
    s.event_ms = t;
    s.ingest_ms = record.ingest_ms;
    s.window_start_ms = window_start;
    s.window_end_ms = window_end_ms;
    s.watermark_ms = watermark_ms;
    side.push_back(s);
}

// The sessions an event at t joins: every session its [t, t + gap) overlaps, if the whole
// stays shorter than max_duration; else the one holding t; else the first it overlaps if that
// alone fits; else none (it gets a session of its own).
std::vector<size_t> ReferenceModel::session_join(const Key& key, int64_t t) const {
    const int64_t gap = spec_.window.gap_ms;
    const int64_t max_duration = spec_.window.max_duration_ms;
    std::vector<size_t> overlapping;
    for (size_t i = 0; i < key.sessions.size(); ++i)
        if (t < key.sessions[i].end && t + gap > key.sessions[i].start) overlapping.push_back(i);
    auto span_with = [&](const std::vector<size_t>& which) {
        int64_t lo = t, hi = t;
        for (size_t i : which) {
            lo = std::min(lo, key.sessions[i].earliest());
            hi = std::max(hi, key.sessions[i].latest());
        }
        return hi - lo;
    };
    if (overlapping.empty() || span_with(overlapping) < max_duration) return overlapping;
    for (size_t i : overlapping)
        if (key.sessions[i].start <= t && t < key.sessions[i].end) return {i};
    if (span_with({overlapping.front()}) < max_duration) return {overlapping.front()};
    return {};
}

void ReferenceModel::recompute_session_ends(Key& key) const {
    for (auto& s : key.sessions)
        s.start = s.earliest();
    std::sort(key.sessions.begin(), key.sessions.end(),
              [](const Session& a, const Session& b) { return a.start < b.start; });
    for (size_t i = 0; i < key.sessions.size(); ++i) {
        auto& s = key.sessions[i];
        s.end = std::min(s.latest() + spec_.window.gap_ms, s.start + spec_.window.max_duration_ms);
        if (i + 1 < key.sessions.size()) s.end = std::min(s.end, key.sessions[i + 1].start);
    }
}

void ReferenceModel::step(const Record& record) {
    advance_clock(record.ingest_ms);
    std::string partition;
    if (!record.tick) {
        apply_event(record);
        partition = record.partition.empty() ? record.key : record.partition;
    }
    // Step 3: the watermark after the event.
    if (is_global()) {
        bool any_active = false;
        int64_t low = std::numeric_limits<int64_t>::max();
        for (const auto& [name, p] : partitions_)
            if (p.active) {
                any_active = true;
                low = std::min(low, candidate(p));
            }
        if (!all_idle_ && any_active) {
            watermark_ms_ = std::max(watermark_ms_, low);
            fire(nullptr, core::ClosedBy::watermark);
        }
    } else if (!record.tick) {
        auto it = partitions_.find(partition);
        if (it != partitions_.end() && it->second.active) {
            it->second.watermark_ms = std::max(it->second.watermark_ms, candidate(it->second));
            fire(&it->first, core::ClosedBy::watermark);
        }
    }
    forget();
    stats.keys = keys_.size();
    stats.partitions_active = stats.partitions_idle = 0;
    for (const auto& [name, p] : partitions_)
        ++(p.active ? stats.partitions_active : stats.partitions_idle);
}

void ReferenceModel::advance_clock(int64_t now_ms) {
    if (started_ && now_ms < now_ms_) throw std::logic_error("model: ingest time went back");
    started_ = true;
    now_ms_ = now_ms;
    const int64_t timeout = spec_.watermark.idle_timeout_ms;
    if (is_global()) {
        // Idle transitions one instant at a time, in the order they happen.
        for (;;) {
            std::optional<int64_t> next;
            for (const auto& [name, p] : partitions_)
                if (p.active && p.last_ingest_ms + timeout <= now_ms &&
                    (!next || p.last_ingest_ms + timeout < *next))
                    next = p.last_ingest_ms + timeout;
            if (!next) break;
            bool any_active = false;
            int64_t low = std::numeric_limits<int64_t>::max();
            for (auto& [name, p] : partitions_) {
                if (p.active && p.last_ingest_ms + timeout == *next) p.active = false;
                if (p.active) {
                    any_active = true;
                    low = std::min(low, candidate(p));
                }
            }
            if (any_active) {
                if (low > watermark_ms_) ++coverage["global: idle transition moves W"];
                watermark_ms_ = std::max(watermark_ms_, low);
                fire(nullptr, core::ClosedBy::watermark);
            } else {
                ++coverage["global: all idle"];
                all_idle_ = true;
                all_idle_since_ms_ = *next;
                all_idle_base_ms_ = watermark_ms_;
            }
        }
        if (all_idle_) {
            watermark_ms_ =
                std::max(watermark_ms_, all_idle_base_ms_ + (now_ms - all_idle_since_ms_));
            fire(nullptr, core::ClosedBy::idle);
        }
    } else {
        for (auto& [name, p] : partitions_)
            if (p.active && p.last_ingest_ms + timeout <= now_ms) {
                ++coverage["partition: goes idle"];
                p.active = false;
                p.idle_since_ms = p.last_ingest_ms + timeout;
                p.idle_base_ms = p.watermark_ms;
            }
        for (auto& [name, p] : partitions_)
            if (!p.active) {
                p.watermark_ms =
                    std::max(p.watermark_ms, p.idle_base_ms + (now_ms - p.idle_since_ms));
                fire(&name, core::ClosedBy::idle);
            }
    }
    forget();
}

void ReferenceModel::apply_event(const Record& record) {
    ++stats.events_in;
    int64_t t = record.event_ms;
    if (t - record.ingest_ms > spec_.watermark.max_future_ms) {
        t = record.ingest_ms;
        ++stats.clamped;
    }
    const std::string pname = record.partition.empty() ? record.key : record.partition;
    const std::string rkey = is_global() || pname == record.key
                                 ? record.key
                                 : escape_key_part(pname) + "|" + escape_key_part(record.key);
    const int64_t lateness = spec_.late.allowed_lateness_ms;
    const bool to_side = spec_.late.too_late == core::TooLate::side_output;
    // A key (composite included) or a partition over 384 bytes could not be stored: refused,
    // before anything sees it.
    if (rkey.size() > 384 || pname.size() > 384) {
        ++coverage["refused: key too long"];
        ++stats.keys_refused;
        if (to_side) {
            const auto it = partitions_.find(pname);
            const int64_t wm = is_global()               ? watermark_ms_
                               : it != partitions_.end() ? it->second.watermark_ms
                                                         : time_min_ms;
            const int64_t start = is_session() ? t : window_starts(t).back();
            const int64_t end = is_session() ? t + spec_.window.gap_ms : window_end(start);
            side_output(record, t, "key_bytes", start, end, wm);
        }
        return;
    }

    auto pit = partitions_.find(pname);
    const bool new_partition = pit == partitions_.end();
    int64_t initial_watermark = floor_ms_;
    if (auto r = remembered_lead_ms_.find(pname); r != remembered_lead_ms_.end())
        initial_watermark = std::max(initial_watermark, now_ms_ + r->second);
    const int64_t wd = is_global() ? watermark_ms_
                                   : (new_partition ? initial_watermark : pit->second.watermark_ms);
    auto kit = keys_.find(rkey);

    // Too late?
    bool too_late = false;
    int64_t late_start = 0, late_end = 0;
    if (!is_session()) {
        auto starts = window_starts(t);
        too_late = true;
        for (int64_t s : starts)
            if (window_end(s) + lateness > wd) too_late = false;
        late_start = starts.back();
        late_end = window_end(late_start);
    } else {
        // A session it joins (any, fired or not: fired ones are kept inside their lateness)
        // takes it. Joining none, it opens a session of its own, which may be cut short by
        // max_duration and by the next session's start even when it overlaps one it could not
        // join: that own window decides.
        // Either way, the session it makes decides: a merge cut at max_duration can end before
        // the sessions it joins did, past its horizon.
        static const Key no_key;
        const Key& k = kit != keys_.end() ? kit->second : no_key;
        const std::vector<size_t> join = session_join(k, t);
        int64_t lo = t, hi = t;
        for (size_t i : join) {
            lo = std::min(lo, k.sessions[i].earliest());
            hi = std::max(hi, k.sessions[i].latest());
        }
        int64_t end = std::min(hi + spec_.window.gap_ms, lo + spec_.window.max_duration_ms);
        for (size_t i = 0; i < k.sessions.size(); ++i)
            if (std::find(join.begin(), join.end(), i) == join.end() && k.sessions[i].start > lo)
                end = std::min(end, k.sessions[i].start);
        too_late = end + lateness <= wd;
        if (too_late && !join.empty()) ++coverage["session: join past the horizon"];
        late_start = lo;
        late_end = end;
    }

    auto touch_partition = [&] {
        if (new_partition) {
            if (ever_seen_.count(pname)) ++coverage["partition: returns after forgotten"];
            if (remembered_lead_ms_.count(pname)) ++coverage["partition: starts at its own lead"];
            if (!is_global() && floor_ms_ != time_min_ms) ++coverage["partition: floor set"];
            remembered_lead_ms_.erase(pname);
            ever_seen_[pname] = true;
            Partition p;
            p.max_event_ms = t;
            p.last_ingest_ms = now_ms_;
            p.active = true;
            p.watermark_ms = initial_watermark;
            partitions_.emplace(pname, p);
        } else {
            auto& p = pit->second;
            if (!p.active) ++coverage["partition: idle one reactivated"];
            p.active = true;
            p.max_event_ms = std::max(p.max_event_ms, t);
            p.last_ingest_ms = now_ms_;
        }
        if (is_global()) all_idle_ = false;
    };

    // The partition sees every event its own bound lets in, whatever happens to the event
    // after (too late, or its key refused): its watermark and idleness follow the device.
    const bool partition_refused = new_partition && partitions_.size() >= spec_.limits.keys_max;
    if (too_late) {
        if (new_partition) ++coverage["too late: new partition"];
        if (kit != keys_.end()) ++coverage["too late: live key"];
        ++stats.too_late;
        if (to_side) side_output(record, t, "too_late", late_start, late_end, wd);
        if (!partition_refused) touch_partition();
        return;
    }
    if (partition_refused) {
        ++coverage["refused: partition"];
        ++stats.keys_refused;
        if (to_side) side_output(record, t, "keys_max", late_start, late_end, wd);
        return;
    }
    touch_partition();
    if (kit == keys_.end() && keys_.size() >= spec_.limits.keys_max) {
        ++coverage["refused: key"];
        ++stats.keys_refused;
        if (to_side) side_output(record, t, "keys_max", late_start, late_end, wd);
        return;
    }
    Key& key = keys_[rkey];
    key.partition = pname;
    Ev ev{t, record.order, record.fields};
    const bool retract_mode = spec_.late.corrections == core::Corrections::retract;

    if (!is_session()) {
        key.events.push_back(ev);
        bool refired = false, partial = false;
        for (int64_t s : window_starts(t)) {
            int64_t e = window_end(s);
            if (e > wd) continue;
            if (e + lateness <= wd) {
                partial = true;
                key.fired[s] = true;  // passed; it does not get this event
                continue;
            }
            auto events = window_events(key, s);
            auto pub = key.published.find(s);
            if (pub != key.published.end()) {
                if (retract_mode)
                    emit(core::EmissionKind::retract, rkey, s, e, pub->second.revision,
                         core::ClosedBy::late, nullptr, &pub->second, wd);
                uint32_t revision = pub->second.revision + 1;
                emit(core::EmissionKind::update, rkey, s, e, revision, core::ClosedBy::late,
                     &events, nullptr, wd);
                pub->second = {revision, emissions.back().values, quantile_ranges.back()};
            } else {
                emit(core::EmissionKind::final_result, rkey, s, e, 0, core::ClosedBy::late, &events,
                     nullptr, wd);
                key.published[s] = {0, emissions.back().values, quantile_ranges.back()};
            }
            key.fired[s] = true;
            refired = true;
        }
        if (refired) ++stats.late_updated;
        if (partial) ++stats.too_late_partial;
        return;
    }

    // Sessions.
    const int64_t gap = spec_.window.gap_ms;
    std::vector<size_t> overlapping;
    for (size_t i = 0; i < key.sessions.size(); ++i)
        if (t < key.sessions[i].end && t + gap > key.sessions[i].start) overlapping.push_back(i);
    const std::vector<size_t> join = session_join(key, t);
    if (join.size() > 1) ++coverage["session: merges several"];
    if (join != overlapping) ++coverage["session: merge too long"];
    std::vector<Session> absorbed;
    for (size_t i : join)
        absorbed.push_back(key.sessions[i]);
    std::vector<std::pair<int64_t, int64_t>> others_before;
    for (size_t i = 0; i < key.sessions.size(); ++i)
        if (std::find(join.begin(), join.end(), i) == join.end())
            others_before.push_back({key.sessions[i].start, key.sessions[i].end});
    for (auto it = join.rbegin(); it != join.rend(); ++it)
        key.sessions.erase(key.sessions.begin() + static_cast<std::ptrdiff_t>(*it));
    Session merged;
    for (const auto& s : absorbed)
        merged.events.insert(merged.events.end(), s.events.begin(), s.events.end());
    merged.events.push_back(ev);
    key.sessions.push_back(merged);
    recompute_session_ends(key);
    Session* result = nullptr;
    std::vector<std::pair<int64_t, int64_t>> others_after;
    for (auto& s : key.sessions) {
        bool is_result = false;
        for (const auto& e : s.events)
            if (e.order == record.order && e.t == t) is_result = true;
        if (is_result)
            result = &s;
        else
            others_after.push_back({s.start, s.end});
    }
    if (join.empty() && !overlapping.empty()) ++coverage["session: new despite overlap"];
    if (others_before != others_after)
        throw std::logic_error("model: a session's identity changed without getting the event");
    auto events = session_events(*result);
    if (absorbed.size() == 1 && absorbed[0].start == result->start &&
        absorbed[0].end == result->end) {
        result->fired = absorbed[0].fired;
        result->published = absorbed[0].published;
        if (result->fired) {
            ++coverage["session: late update, same identity"];
            if (retract_mode)
                emit(core::EmissionKind::retract, rkey, result->start, result->end,
                     result->published.revision, core::ClosedBy::late, nullptr, &result->published,
                     wd);
            uint32_t revision = result->published.revision + 1;
            emit(core::EmissionKind::update, rkey, result->start, result->end, revision,
                 core::ClosedBy::late, &events, nullptr, wd);
            result->published = {revision, emissions.back().values, quantile_ranges.back()};
            ++stats.late_updated;
        }
        return;
    }
    for (const auto& s : absorbed) {
        if (!s.fired) continue;
        ++coverage["session: fired one absorbed"];
        emit(core::EmissionKind::retract, rkey, s.start, s.end, s.published.revision,
             core::ClosedBy::merge, nullptr, &s.published, wd);
    }
    result->fired = false;
    // late_updated counts events that (re-)fired a window: a retract alone fires none.
    if (result->end <= wd) {
        emit(core::EmissionKind::final_result, rkey, result->start, result->end, 0,
             core::ClosedBy::late, &events, nullptr, wd);
        result->fired = true;
        result->published = {0, emissions.back().values, quantile_ranges.back()};
        ++stats.late_updated;
    }
}

void ReferenceModel::fire(const std::string* partition, core::ClosedBy closed_by) {
    struct Due {
        int64_t end;
        std::string key;
        int64_t start;
    };
    std::vector<Due> due;
    for (auto& [name, key] : keys_) {
        if (partition && key.partition != *partition) continue;
        int64_t wd = domain_watermark(key.partition);
        if (!is_session()) {
            std::vector<int64_t> starts;
            for (const auto& e : key.events)
                for (int64_t s : window_starts(e.t))
                    if (window_end(s) <= wd && !key.fired.count(s)) starts.push_back(s);
            std::sort(starts.begin(), starts.end());
            starts.erase(std::unique(starts.begin(), starts.end()), starts.end());
            for (int64_t s : starts)
                due.push_back({window_end(s), name, s});
        } else {
            for (const auto& s : key.sessions)
                if (!s.fired && s.end <= wd) due.push_back({s.end, name, s.start});
        }
    }
    std::sort(due.begin(), due.end(), [](const Due& a, const Due& b) {
        return std::tie(a.end, a.key, a.start) < std::tie(b.end, b.key, b.start);
    });
    for (const auto& d : due) {
        Key& key = keys_.at(d.key);
        int64_t wd = domain_watermark(key.partition);
        if (!is_session()) {
            auto events = window_events(key, d.start);
            emit(core::EmissionKind::final_result, d.key, d.start, d.end, 0, closed_by, &events,
                 nullptr, wd);
            key.fired[d.start] = true;
            key.published[d.start] = {0, emissions.back().values, quantile_ranges.back()};
        } else {
            for (auto& s : key.sessions)
                if (s.start == d.start) {
                    auto events = session_events(s);
                    emit(core::EmissionKind::final_result, d.key, s.start, s.end, 0, closed_by,
                         &events, nullptr, wd);
                    s.fired = true;
                    s.published = {0, emissions.back().values, quantile_ranges.back()};
                }
        }
    }
}

void ReferenceModel::forget() {
    const int64_t lateness = spec_.late.allowed_lateness_ms;
    for (auto it = keys_.begin(); it != keys_.end();) {
        Key& key = it->second;
        int64_t wd = domain_watermark(key.partition);
        bool live = false;
        if (!is_session()) {
            for (const auto& e : key.events)
                for (int64_t s : window_starts(e.t))
                    if (window_end(s) + lateness > wd) live = true;
        } else {
            std::erase_if(key.sessions,
                          [&](const Session& s) { return s.fired && s.end + lateness <= wd; });
            live = !key.sessions.empty();
        }
        if (!live) ++coverage["key: forgotten"];
        it = live ? std::next(it) : keys_.erase(it);
    }
    for (auto it = partitions_.begin(); it != partitions_.end();) {
        bool has_key = false;
        for (const auto& [name, key] : keys_)
            if (key.partition == it->first) has_key = true;
        if (it->second.active || has_key) {
            ++it;
            continue;
        }
        if (!is_global() && it->second.watermark_ms != time_min_ms) {
            const int64_t lead = it->second.watermark_ms - now_ms_;
            auto [r, added] = remembered_lead_ms_.emplace(it->first, lead);
            if (!added) r->second = std::max(r->second, lead);
            if (remembered_lead_ms_.size() > spec_.limits.keys_max) {
                auto low = remembered_lead_ms_.begin();
                const auto name_hash = [](const std::string& name) {
                    return core::hash::mix(core::hash::fnv1a_str(core::hash::fnv_offset, name));
                };
                for (auto c = remembered_lead_ms_.begin(); c != remembered_lead_ms_.end(); ++c)
                    if (std::pair(c->second, name_hash(c->first)) <
                        std::pair(low->second, name_hash(low->first)))
                        low = c;
                ++coverage["partition: a remembered one given up"];
                floor_ms_ = std::max(floor_ms_, now_ms_ + low->second);
                remembered_lead_ms_.erase(low);
            }
        }
        ++coverage["partition: forgotten"];
        it = partitions_.erase(it);
    }
}

}  // namespace tidemark::model
