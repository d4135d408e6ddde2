#include <algorithm>
#include <string>
#include <utility>

#include "core/engine/pipeline_run.h"
#include "core/engine/slices.h"

namespace tidemark::core::detail {

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

// The per-window table of too-late counts, kept in too_late_rank order. When it is full, the
// window let go is the earliest of those with the fewest too-late events, the new one included:
// a new window (one event) takes the place of an earlier window with one event, and is not
// taken when every window held has more. A window with many too-late events is never lost to
// one with a single event; what is not kept is counted (too_late_windows_dropped), one event
// each time.
void PipelineRun::count_too_late_window(int64_t start, int64_t end) {
    tally_too_late(start, end);
    auto& table = too_late_windows_;
    auto it = std::find_if(table.begin(), table.end(), [&](const TooLateWindow& w) {
        return w.start_ms == start && w.end_ms == end;
    });
    if (it != table.end()) {
        // One more moves it ahead of the windows it now outranks: a rotation, not a sort.
        ++it->too_late;
        const auto to = std::upper_bound(table.begin(), it, *it, too_late_rank);
        std::rotate(to, it, it + 1);
        return;
    }
    const TooLateWindow fresh{start, end, 1};
    table.insert(std::upper_bound(table.begin(), table.end(), fresh, too_late_rank), fresh);
    if (table.size() <= too_late_windows_max) return;
    // The fewest are the table's tail; the earliest of them leads it.
    const uint64_t fewest = table.back().too_late;
    const auto victim = std::partition_point(
        table.begin(), table.end(), [&](const TooLateWindow& w) { return w.too_late > fewest; });
    TM_ASSERT(victim->too_late == 1);
    table.erase(victim);
    ++stats_.too_late_windows_dropped;
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
