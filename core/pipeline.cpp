#include "core/pipeline.h"

#include <numeric>
#include <string>

#include "core/bytes.h"
#include "core/duration.h"
#include "core/hash.h"

namespace tidemark::core {
namespace {

// A hopping window is the merge of size / gcd(size, advance) slices, merged again at every firing
// and kept per key: the bound keeps one firing's cost and one key's state small.
constexpr int64_t hopping_slices_per_window_max = 10'000;

}  // namespace

Result<void> validate(const PipelineSpec& spec) {
    const size_t state_name_bytes = (spec.state_name.empty() ? spec.name : spec.state_name).size();
    if (state_name_bytes == 0 || state_name_bytes > state_name_bytes_max)
        return fail("the state name is " + std::to_string(state_name_bytes) + " bytes: use 1 to " +
                    std::to_string(state_name_bytes_max));
    const WindowSpec& w = spec.window;
    switch (w.type) {
        case WindowType::tumbling:
            if (w.size_ms <= 0) return fail("window size must be positive");
            if (w.offset_ms < 0 || w.offset_ms >= w.size_ms)
                return fail("window offset " + format_duration(w.offset_ms) +
                            " must be at least 0 and less than the size " +
                            format_duration(w.size_ms));
            break;
        case WindowType::hopping:
            if (w.size_ms <= 0) return fail("window size must be positive");
            if (w.advance_ms <= 0) return fail("hopping window advance must be positive");
            if (w.advance_ms > w.size_ms)
                return fail("hopping advance " + format_duration(w.advance_ms) +
                            " is longer than the size " + format_duration(w.size_ms) +
                            ": events between windows would belong to none; use an advance "
                            "no longer than the size");
            if (w.size_ms / std::gcd(w.size_ms, w.advance_ms) > hopping_slices_per_window_max)
                return fail("hopping window " + format_duration(w.size_ms) + " every " +
                            format_duration(w.advance_ms) + " needs more than " +
                            std::to_string(hopping_slices_per_window_max) +
                            " slices per window: choose an advance that "
                            "divides the size more evenly");
            break;
        case WindowType::session:
            if (w.gap_ms <= 0) return fail("session gap must be positive");
            if (w.max_duration_ms < w.gap_ms)
                return fail("session max_duration " + format_duration(w.max_duration_ms) +
                            " must be at least the gap " + format_duration(w.gap_ms) +
                            " (it bounds how long one session may grow)");
            break;
    }
    if (spec.watermark.delay_ms < 0) return fail("watermark delay must not be negative");
    if (spec.watermark.idle_timeout_ms <= 0) return fail("idle_timeout must be positive");
    if (spec.watermark.max_future_ms < 0) return fail("max_future must not be negative");
    if (spec.late.allowed_lateness_ms < 0) return fail("allowed_lateness must not be negative");
    if (spec.aggregates.empty()) return fail("a pipeline needs at least one aggregate");
    for (const AggregateSpec& a : spec.aggregates) {
        if (a.field >= static_cast<int>(spec.fields.size()))
            return fail("aggregate '" + a.name + "' names a field that is not in fields");
        if (a.field < 0 && a.fn != AggregateFn::count)
            return fail("aggregate '" + a.name + "' (" + std::string(aggregate_fn_name(a.fn)) +
                        ") needs a field");
        if (a.fn == AggregateFn::quantile && !(a.q >= 0.0 && a.q <= 1.0))
            return fail("aggregate '" + a.name + "': q must be between 0 and 1");
    }
    if (spec.limits.keys_max == 0) return fail("max_keys must be at least 1");
    if (spec.limits.open_windows_max == 0) return fail("max_open_windows must be at least 1");
    return {};
}

uint64_t state_fingerprint(const PipelineSpec& spec) {
    std::string buf;
    const WindowSpec& w = spec.window;
    buf.push_back(static_cast<char>(w.type));
    bytes::put_i64(buf, w.size_ms);
    bytes::put_i64(buf, w.offset_ms);
    bytes::put_i64(buf, w.advance_ms);
    bytes::put_i64(buf, w.gap_ms);
    bytes::put_i64(buf, w.max_duration_ms);
    buf.push_back(static_cast<char>(spec.late.corrections));
    for (const AggregateSpec& a : spec.aggregates) {
        bytes::put_str(buf, a.name);
        buf.push_back(static_cast<char>(a.fn));
        bytes::put_u32(buf, static_cast<uint32_t>(a.field));
        bytes::put_f64(buf, a.q);
    }
    bytes::put_f64(buf, spec.quantile.relative_error);
    bytes::put_u32(buf, spec.quantile.buckets_max);
    for (const std::string& f : spec.fields)
        bytes::put_str(buf, f);
    // Plain FNV-1a over the encoding, unmixed: checkpoints store this value
    // (tests/core/hash_test.cpp).
    return hash::fnv1a(hash::fnv_offset, buf);
}

uint64_t windows_per_key_estimate(const PipelineSpec& spec) {
    const WindowSpec& w = spec.window;
    const int64_t keep_ms = spec.watermark.delay_ms + spec.late.allowed_lateness_ms;
    switch (w.type) {
        case WindowType::tumbling: {
            // A fired window inside its lateness keeps two records: its slice and the fired
            // record (revision, and the values a retract must cancel).
            const uint64_t slices =
                1 + static_cast<uint64_t>((keep_ms + w.size_ms - 1) / w.size_ms);
            const int64_t lateness_ms = spec.late.allowed_lateness_ms;
            const uint64_t fired =
                lateness_ms > 0 ? static_cast<uint64_t>(lateness_ms / w.size_ms + 1) : 0;
            return slices + fired;
        }
        case WindowType::hopping: {
            // Slices of gcd(size, advance) cover the window, the delay and the lateness horizon;
            // fired windows kept for lateness add one record each.
            const int64_t slice_ms = std::gcd(w.size_ms, w.advance_ms);
            const uint64_t slices = static_cast<uint64_t>((w.size_ms + keep_ms) / slice_ms + 1);
            const uint64_t fired = static_cast<uint64_t>(keep_ms / w.advance_ms + 1);
            return slices + fired;
        }
        case WindowType::session:
            return 1 + static_cast<uint64_t>(keep_ms / w.gap_ms + 1);
    }
    return 1;
}

}  // namespace tidemark::core
