#include "core/engine.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <string>
#include <utility>

#include "core/bytes.h"
#include "core/engine/pipeline_run.h"
#include "core/engine/prefetch.h"
#include "core/engine/sessions.h"
#include "core/engine/slices.h"

namespace tidemark::core {
namespace detail {
namespace {

// One part of a composite key: a backslash before every backslash and '|', so that the '|'
// between partition and key is the only bare one.
void append_escaped(std::string& out, std::string_view part) {
    for (const char c : part) {
        if (c == '\\' || c == '|') out.push_back('\\');
        out.push_back(c);
    }
}

}  // namespace

PipelineRun::PipelineRun(const std::string& node_id, const PipelineSpec& spec, uint32_t index)
    : index_(index),
      node_id_(node_id),
      spec_(spec),
      aggs_(spec.aggregates, spec.quantile),
      prefix_(state_key_prefix(spec.state_name.empty() ? spec.name : spec.state_name)),
      session_(spec.window.type == WindowType::session),
      scope_partition_(spec.watermark.scope == WatermarkScope::partition),
      lateness_ms_(spec.late.allowed_lateness_ms),
      retract_(spec.late.corrections == Corrections::retract),
      activity_(spec.watermark.idle_timeout_ms) {
    const WindowSpec& w = spec.window;
    size_ms_ = w.size_ms;
    offset_ms_ = w.offset_ms;
    advance_ms_ = w.type == WindowType::hopping ? w.advance_ms : w.size_ms;
    if (!session_) slice_ms_ = std::gcd(size_ms_, advance_ms_);
    fresh_ = aggs_.make();
    scratch_ = fresh_;
    // A unit holds its aggregate state: count what the state keeps on the heap once.
    unit_bytes_ = sizeof(Unit) + aggs_.bytes_per_window() - sizeof(AggregateState);
    id_seed_ = emission_id_seed(node_id_, spec_.name, spec_.version);
}

void PipelineRun::step(int64_t now_ms, EmissionSink& sink) {
    reap_partitions();
    const int64_t previous_ms = now_ms_;
    now_ms_ = now_ms;
    stats_.ingest_ms = now_ms;
    // Before the windows this instant closes: the tallies of events read before it.
    if (!late_tallies_.empty()) report_late(previous_ms, now_ms, sink);
    // Partitions go idle one ingest instant at a time, in the order of the instants, all
    // partitions of one instant together; after each instant the global watermark is the
    // minimum over those still active, so the windows that minimum reaches close then, and
    // an all-idle advance starts from it (not from a minimum taken before they went idle).
    for (;;) {
        activity_.take_due(now_ms, went_idle_);
        if (went_idle_.empty()) break;
        const int64_t idle_at =
            sat_add(went_idle_.front()->last_ingest_ms, spec_.watermark.idle_timeout_ms);
        for (Partition* p : went_idle_)
            go_idle(p, idle_at);
        if (!scope_partition_) {
            if (active_ == 0) {
                global_.idle = true;
                global_.idle_since_ms = idle_at;
                global_.idle_base_ms = global_.watermark;
            } else {
                raise_watermark(global_, low_tree_.minimum());
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

void PipelineRun::process(const Event& event, EmissionSink& sink) {
    TM_ASSERT(event.fields.size() == spec_.fields.size());
    if (event.ingest_ms > now_ms_) advance(event.ingest_ms, sink);
    ++stats_.events_in;
    int64_t t = event.event_ms;
    int64_t lag_ms;
    if (__builtin_sub_overflow(event.ingest_ms, t, &lag_ms)) lag_ms = t > 0 ? time_min : time_max;
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
    if (key.size() > key_bytes_max || part_name.size() > key_bytes_max) [[unlikely]] {
        const Partition* known = find_partition(part_name);
        refuse(sink, key, event, t, Limit::key_bytes,
               !scope_partition_ ? global_.watermark
               : known           ? known->domain->watermark
                                 : time_min);
        return;
    }
    KeyState* k = take_prefound(key);
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
            const int64_t wm =
                scope_partition_ ? new_partition_watermark(part_name) : global_.watermark;
            if (event_too_late(k, t, wm)) {
                const auto [start, end] = new_event_window(t);
                too_late(sink, key, event, t, start, end, wm);
            } else {
                refuse(sink, key, event, t, Limit::keys, wm);
            }
            return;
        }
        p = open_partition(part_name, t, event.ingest_ms);
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
        raise_watermark(global_, low_tree_.minimum());
    }
    fire_due(d, sink);
    // An event refused for its window (max_open_windows) may leave a new partition with
    // no key; it is active now, and is forgotten when it goes idle.
}

const PipelineStats& PipelineRun::stats() {
    stats_.keys = keys_.size();
    stats_.open_windows = units_total_ + fired_total_;
    stats_.state_bytes =
        units_total_ * unit_bytes_ + fired_total_ * (sizeof(Fired) + 16 * spec_.aggregates.size()) +
        keys_.size() * (sizeof(KeyState) + 48) +
        partitions_.size() *
            (sizeof(Partition) + 48 + IdleQueue::bytes_per_partition + 2 * sizeof(int64_t)) +
        remembered_.size() * remembered_bytes + too_late_windows_.size() * sizeof(TooLateWindow) +
        late_tallies_.size() * sizeof(LateTally);
    stats_.late_reports = late_reports_;
    stats_.too_late_unreported = too_late_unreported_;
    stats_.late_tallies = static_cast<uint32_t>(late_tallies_.size());
    const size_t shown = std::min(too_late_windows_.size(), too_late_windows_shown);
    std::copy_n(too_late_windows_.begin(), shown, stats_.too_late_top.begin());
    stats_.too_late_top_size = static_cast<uint32_t>(shown);
    stats_.too_late_windows_tracked = static_cast<uint32_t>(too_late_windows_.size());
    stats_.partitions_remembered = remembered_.size();
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
        stats_.watermark_ms = global_.idle && clock_trusted_
                                  ? std::max(global_.watermark, idle_watermark(global_, now_ms_))
                                  : global_.watermark;
    }
    return stats_;
}

}  // namespace detail

struct Engine::Impl {
    std::string node_id;
    std::vector<PipelineSpec> specs;
    std::vector<std::unique_ptr<detail::PipelineRun>> pipelines;
    std::map<std::string, uint32_t, std::less<>> by_name;
    std::map<std::string, uint32_t, std::less<>> by_state_name;  // restore_entry's lookup
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
        impl->by_state_name.emplace(spec.state_name.empty() ? spec.name : spec.state_name, index);
        impl->pipelines.push_back(
            std::make_unique<detail::PipelineRun>(impl->node_id, spec, index));
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

// Three rounds over the pipelines, each reading what the round before started to load: the
// hash slots, then the keys' state, then the newest window and the partition of each key.
void Engine::prefetch(std::span<const uint32_t> pipelines, std::string_view key,
                      std::string_view partition) {
    const bool composite = !partition.empty() && partition != key;
    const uint64_t hash = detail::hash_name(key);
    const auto each = [&](auto&& round) {
        for (const uint32_t p : pipelines) {
            TM_ASSERT(p < impl_->pipelines.size());
            detail::PipelineRun& run = *impl_->pipelines[p];
            if (!(composite && run.keys_composite())) round(run);
        }
    };
    each([&](detail::PipelineRun& run) { run.prefetch_slot(hash); });
    each([&](detail::PipelineRun& run) { run.prefetch_key(hash); });
    each([&](detail::PipelineRun& run) { run.prefetch_window(key, hash); });
}

uint64_t Engine::key_hash(std::string_view key) {
    return detail::hash_name(key);
}

// A pipeline of scope partition keys its table by a composite name when the partition is not
// the key, which the key alone does not hash to: it gets no hint.
void Engine::prefetch_ahead(std::span<const uint32_t> pipelines, const AheadHashes& h) const {
    for (const uint32_t p : pipelines) {
        const detail::PipelineRun& run = *impl_->pipelines[p];
        if (run.keys_composite()) continue;
        if (h.slots != 0) run.prefetch_slot(h.slots);
        if (h.keys != 0) run.prefetch_key(h.keys);
        if (h.windows != 0) run.prefetch_key_window(h.windows);
        if (h.states != 0) run.prefetch_key_state(h.states);
    }
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
    if (stats.watermark_ms == detail::time_min) return std::nullopt;
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
    return detail::state_key_prefix(pipeline_name);
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
    auto it = impl_->by_state_name.find(name);
    if (it == impl_->by_state_name.end())
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
