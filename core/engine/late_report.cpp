// Per-window too-late tallies for the consumer (LateSpec::report, LateReport): counted as
// too-late events arrive, reported when the ingest time crosses a multiple of report_every_ms,
// kept in the checkpoint so that a restored run reports exactly what the uncut run reports.
#include <algorithm>
#include <string>

#include "core/bytes.h"
#include "core/engine/pipeline_run.h"
#include "core/time_math.h"

namespace tidemark::core::detail {

namespace {

// The 'L' record's first byte: its format.
constexpr uint8_t late_record_format = 1;

bool window_less(int64_t start, int64_t end, int64_t other_start, int64_t other_end) {
    return start != other_start ? start < other_start : end < other_end;
}

}  // namespace

// The event's time is the engine's clock (now_ms_): process() advanced it to the event's
// ingest time before judging it.
void PipelineRun::tally_too_late(int64_t start, int64_t end) {
    if (!spec_.late.report) return;
    auto& table = late_tallies_;
    size_t at = static_cast<size_t>(
        std::lower_bound(table.begin(), table.end(), std::pair{start, end},
                         [](const LateTally& t, const std::pair<int64_t, int64_t>& w) {
                             return window_less(t.start_ms, t.end_ms, w.first, w.second);
                         }) -
        table.begin());
    late_dirty_ = true;
    if (at < table.size() && table[at].start_ms == start && table[at].end_ms == end) {
        ++table[at].too_late;
        table[at].last_ms = now_ms_;
        return;
    }
    if (table.size() >= late_tallies_max) {
        // Let go the reported tally that has been quiet longest (the earlier window among
        // equals): its count is with the consumer already; a later too-late event of that
        // window starts a new tally, which the consumer adds. None reported: not tallied.
        size_t victim = table.size();
        for (size_t i = 0; i < table.size(); ++i)
            if (table[i].too_late == table[i].reported &&
                (victim == table.size() || table[i].last_ms < table[victim].last_ms))
                victim = i;
        if (victim == table.size()) {
            ++too_late_unreported_;
            return;
        }
        table.erase(table.begin() + static_cast<std::ptrdiff_t>(victim));
        if (victim < at) --at;
    }
    table.insert(table.begin() + static_cast<std::ptrdiff_t>(at),
                 LateTally{start, end, now_ms_, 1, 0, now_ms_});
}

// Once per crossing of the report grid, in window order: every tally that grew since its last
// report. A tally's id changes with its count, so a regenerated report after a crash is the
// same record with the same id, and the outbox skips it.
void PipelineRun::report_late(int64_t previous_ms, int64_t now_ms, EmissionSink& sink) {
    const int64_t every = spec_.late.report_every_ms;
    TM_ASSERT(every > 0);
    if (previous_ms != time_min && floor_div(previous_ms, every) == floor_div(now_ms, every))
        return;
    LateReport& r = late_report_;
    r.pipeline = index_;
    r.as_of_ms = now_ms;
    for (LateTally& t : late_tallies_) {
        if (t.too_late == t.reported) continue;
        r.start_ms = t.start_ms;
        r.end_ms = t.end_ms;
        r.since_ms = t.since_ms;
        r.too_late = t.too_late;
        r.id = late_report_id(id_seed_, t.start_ms, t.end_ms, t.since_ms, t.too_late);
        t.reported = t.too_late;
        ++late_reports_;
        late_dirty_ = true;
        sink.late_report(r);
    }
}

// Format byte, too_late_unreported u64, late_reports u64, u32 count, then per tally start i64,
// end i64, since i64, too_late u64, reported u64, last i64.
void PipelineRun::write_late(StateWriter& w, std::string& value) {
    value.clear();
    value.push_back(static_cast<char>(late_record_format));
    bytes::put_u64(value, too_late_unreported_);
    bytes::put_u64(value, late_reports_);
    bytes::put_u32(value, static_cast<uint32_t>(late_tallies_.size()));
    for (const LateTally& t : late_tallies_) {
        bytes::put_i64(value, t.start_ms);
        bytes::put_i64(value, t.end_ms);
        bytes::put_i64(value, t.since_ms);
        bytes::put_u64(value, t.too_late);
        bytes::put_u64(value, t.reported);
        bytes::put_i64(value, t.last_ms);
    }
    std::string key = prefix_;
    key.push_back('L');
    w.put(key, value);
}

Result<void> PipelineRun::read_late(std::string_view in) {
    const auto damaged = [&] { return fail("damaged too-late tallies of '" + spec_.name + "'"); };
    uint32_t n = 0;
    if (in.empty() || static_cast<uint8_t>(in[0]) != late_record_format) return damaged();
    in.remove_prefix(1);
    if (!bytes::get_u64(in, too_late_unreported_) || !bytes::get_u64(in, late_reports_) ||
        !bytes::get_u32(in, n) || n > late_tallies_max)
        return damaged();
    late_tallies_.clear();
    for (uint32_t i = 0; i < n; ++i) {
        LateTally t;
        if (!bytes::get_i64(in, t.start_ms) || !bytes::get_i64(in, t.end_ms) ||
            !bytes::get_i64(in, t.since_ms) || !bytes::get_u64(in, t.too_late) ||
            !bytes::get_u64(in, t.reported) || !bytes::get_i64(in, t.last_ms) || t.too_late == 0 ||
            t.reported > t.too_late || t.end_ms <= t.start_ms)
            return damaged();
        // In window order, one tally per window: what tally_too_late's search relies on.
        if (!late_tallies_.empty() &&
            !window_less(late_tallies_.back().start_ms, late_tallies_.back().end_ms, t.start_ms,
                         t.end_ms))
            return damaged();
        late_tallies_.push_back(t);
    }
    if (!in.empty()) return damaged();
    return {};
}

}  // namespace tidemark::core::detail
