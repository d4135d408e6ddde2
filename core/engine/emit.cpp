#include <algorithm>
#include <string>
#include <utility>

#include "core/engine/pipeline_run.h"
#include "core/engine/slices.h"

namespace tidemark::core::detail {
namespace {

// Windows whose too-late counts are kept for health, newest first: a bound, not a log.
constexpr size_t too_late_windows_max = 256;

}  // namespace

// One Emission reused for every record: its key and values keep their capacity, so an
// emission allocates nothing once the longest key and the values have been seen.
void PipelineRun::emit(EmissionSink& sink, const KeyState& k, int64_t start, int64_t end,
                       EmissionKind kind, uint32_t revision, ClosedBy closed_by,
                       const Values& values, int64_t watermark) {
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
void PipelineRun::count_too_late_window(int64_t start, int64_t end) {
    auto it = std::find_if(too_late_windows_.begin(), too_late_windows_.end(), [&](const auto& w) {
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

void PipelineRun::too_late(EmissionSink& sink, std::string_view key, const Event& event, int64_t t,
                           int64_t start, int64_t end, int64_t watermark) {
    ++stats_.too_late;
    count_too_late_window(start, end);
    if (spec_.late.too_late != TooLate::side_output) return;
    side_output(sink, key, event, t, start, end, watermark,
                "too late: window [" + std::to_string(start) + ", " + std::to_string(end) +
                    ") closed past its allowed lateness at watermark " + std::to_string(watermark));
}

void PipelineRun::refuse(EmissionSink& sink, std::string_view key, const Event& event, int64_t t,
                         Limit limit, int64_t watermark) {
    ++(limit == Limit::open_windows ? stats_.windows_refused : stats_.keys_refused);
    if (spec_.late.too_late != TooLate::side_output) return;
    const auto [start, end] = new_event_window(t);
    std::string reason;
    switch (limit) {
        case Limit::keys:
            reason = "refused: max_keys " + std::to_string(spec_.limits.keys_max) + " reached";
            break;
        case Limit::open_windows:
            reason = "refused: max_open_windows " + std::to_string(spec_.limits.open_windows_max) +
                     " reached";
            break;
        case Limit::key_bytes:
            reason = "refused: the key (with its partition) is " + std::to_string(key.size()) +
                     " bytes and the partition " + std::to_string(event.partition.size()) +
                     ", more than the " + std::to_string(key_bytes_max) + " allowed";
            break;
    }
    side_output(sink, key, event, t, start, end, watermark, std::move(reason));
}

void PipelineRun::side_output(EmissionSink& sink, std::string_view key, const Event& event,
                              int64_t t, int64_t start, int64_t end, int64_t watermark,
                              std::string reason) {
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
bool PipelineRun::event_too_late(const KeyState* k, int64_t t, int64_t wm) const {
    if (wm == time_min) return false;
    if (session_) return session_too_late(k, t, wm);
    const auto [start, end] = new_event_window(t);
    return sat_add(end, lateness_ms_) <= wm;
}
std::pair<int64_t, int64_t> PipelineRun::new_event_window(int64_t t) const {
    if (session_) return {t, sat_add(t, spec_.window.gap_ms)};
    const int64_t start = slice_last_window_start(slice_start(t));
    return {start, start + size_ms_};
}

}  // namespace tidemark::core::detail
