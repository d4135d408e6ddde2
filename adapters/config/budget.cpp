// The storage section and the budgets: keys against open windows per pipeline, all pipelines'
// state against the LMDB map, and the map against what the platform can address.
#include <algorithm>
#include "adapters/config/checker.h"
#include "core/aggregate.h"
#include "core/duration.h"

namespace tidemark::config {

using namespace detail;

std::optional<ConfigError> check_map_size(uint64_t map_size_bytes, size_t pointer_bytes) {
    const uint64_t limit = map_size_max_bytes(pointer_bytes);
    if (map_size_bytes <= limit) return std::nullopt;
    return ConfigError{
        "/storage/map_size",
        "storage.map_size " + core::format_size(map_size_bytes) + " > " + core::format_size(limit) +
            ", the most a " + std::to_string(pointer_bytes * 8) +
            "-bit gateway can map (LMDB maps the whole file as one piece of the 4GiB address "
            "space that the program, its libraries, stacks and heap share): set "
            "storage.map_size to " +
            core::format_size(limit) +
            " or less, and if the pipelines' state or the outbox then does not fit in half of "
            "it, lower limits.max_open_windows or upstream.outbox.max_bytes"};
}

namespace detail {
namespace {

std::string window_description(const core::PipelineSpec& spec) {
    using core::format_duration;
    const auto& w = spec.window;
    std::string text;
    switch (w.type) {
        case core::WindowType::tumbling:
            text = format_duration(w.size_ms) + " tumbling";
            break;
        case core::WindowType::hopping:
            text = format_duration(w.size_ms) + " hopping every " + format_duration(w.advance_ms);
            break;
        case core::WindowType::session:
            text = "sessions with a " + format_duration(w.gap_ms) + " gap, at most " +
                   format_duration(w.max_duration_ms) + " long";
            break;
    }
    std::vector<std::string> extras;
    if (spec.watermark.delay_ms > 0) {
        extras.push_back(format_duration(spec.watermark.delay_ms) + " delay");
    }
    if (spec.late.allowed_lateness_ms > 0) {
        extras.push_back(format_duration(spec.late.allowed_lateness_ms) + " allowed lateness");
    }
    if (!extras.empty()) text += ", plus " + join(extras, " and ");
    return text;
}

}  // namespace

void read_storage(Checker& c, const Json& root, StorageConfig& storage, size_t pointer_bytes) {
    Section s = c.section(root, "", "storage", R"({"map_size": "1GiB", "fsync": "interval"})",
                          {"map_size", "fsync", "fsync_interval", "log_retention", "segment_size",
                           "log_compression"});
    if (!s) return;
    if (c.read_size(*s, s.pointer, "map_size", storage.map_size_bytes, 1ULL << 20, 1ULL << 40)) {
        if (auto refused = check_map_size(storage.map_size_bytes, pointer_bytes)) {
            c.errors.push_back(std::move(*refused));
        }
    }
    c.read_choice(*s, s.pointer, "fsync", storage.fsync,
                  {{"always", FsyncPolicy::always},
                   {"interval", FsyncPolicy::interval},
                   {"never", FsyncPolicy::never}});
    c.read_duration(*s, s.pointer, "fsync_interval", storage.fsync_interval_ms, true);
    c.read_size(*s, s.pointer, "segment_size", storage.segment_bytes, 64ULL << 10, 4ULL << 30);
    c.read_choice(*s, s.pointer, "log_compression", storage.log_compression,
                  {{"none", LogCompression::none}, {"zstd", LogCompression::zstd}});
    Section r = c.section(*s, s.pointer, "log_retention",
                          R"({"max_age": "7d", "max_bytes": "512MiB"})", {"max_age", "max_bytes"});
    if (!r) return;
    c.read_duration(*r, r.pointer, "max_age", storage.log_retention.max_age_ms, true);
    c.read_size(*r, r.pointer, "max_bytes", storage.log_retention.max_bytes, 1ULL << 20,
                1ULL << 50);
}

void check_key_budget(Checker& c, const PipelineConfig& pipeline, const std::string& pointer) {
    const auto& spec = pipeline.spec;
    uint64_t per_key = core::windows_per_key_estimate(spec);
    uint64_t total = 0;
    bool overflow = __builtin_mul_overflow(spec.limits.keys_max, per_key, &total);
    if (!overflow && total <= spec.limits.open_windows_max) return;
    c.error(child(pointer, "limits"),
            std::to_string(spec.limits.keys_max) + " keys x " + std::to_string(per_key) +
                " windows per key (" + window_description(spec) +
                ") = " + (overflow ? std::string("more than 2^64") : std::to_string(total)) +
                " > max_open_windows " + std::to_string(spec.limits.open_windows_max) +
                ": raise max_open_windows or lower max_keys");
}

void check_map_budget(Checker& c, const Config& config, const std::vector<bool>& pipeline_ok,
                      bool with_outbox) {
    uint64_t total = 0;
    bool overflow = false;
    std::vector<std::string> terms;
    uint64_t largest = 0;
    for (size_t i = 0; i < config.pipelines.size(); ++i) {
        if (!pipeline_ok[i]) return;  // its numbers are not trustworthy; its errors say why
        const auto& spec = config.pipelines[i].spec;
        core::AggregateSet set(spec.aggregates, spec.quantile);
        uint64_t per_window = set.bytes_per_window() + window_overhead_bytes;
        uint64_t bytes = 0;
        overflow |= __builtin_mul_overflow(spec.limits.open_windows_max, per_window, &bytes);
        overflow |= __builtin_add_overflow(total, bytes, &total);
        largest = std::max(largest, bytes);
        terms.push_back(std::to_string(spec.limits.open_windows_max) + " windows x " +
                        std::to_string(per_window) + " bytes (" + spec.name + ")");
    }
    const auto total_text = [&](uint64_t t) {
        return overflow ? std::string("more than 2^64 bytes")
                        : std::to_string(t) + " bytes (" + approx_size(t) + ")";
    };
    const uint64_t half = config.storage.map_size_bytes / 2;
    if (overflow || total > half) {
        c.error("/storage/map_size",
                "the pipelines' state can reach " + join(terms, " + ") + " = " + total_text(total) +
                    ", more than half of storage.map_size " +
                    core::format_size(config.storage.map_size_bytes) + " (" + approx_size(half) +
                    "; the other half holds the outbox and checkpoint copies): raise "
                    "storage.map_size or lower limits.max_open_windows");
        return;
    }
    // While a new version backfills, its pipeline holds two versions' state (DESIGN.md section
    // 4). Backfills run one at a time, so the largest pipeline counts twice then; the outbox
    // and checkpoint copies keep a quarter of the map.
    uint64_t doubled = 0;
    overflow |= __builtin_add_overflow(total, largest, &doubled);
    const uint64_t three_quarters = config.storage.map_size_bytes / 4 * 3;
    if (overflow || doubled > three_quarters) {
        c.error("/storage/map_size",
                "while the largest pipeline backfills a new version, the pipelines' state can "
                "reach " +
                    total_text(total) + " + " + std::to_string(largest) +
                    " bytes (its second version) = " + total_text(doubled) +
                    ", more than three quarters of storage.map_size " +
                    core::format_size(config.storage.map_size_bytes) +
                    ": raise storage.map_size or lower limits.max_open_windows");
        return;
    }
    if (with_outbox) {
        check_map_sum(c, config, total, largest);
    }
}

// Everything the map holds at its fullest, together: each share alone fitting is not enough.
// With the upstream down the outbox grows to its bound while the state is at its own; were
// their sum more than the map, the map would fill first: map_full pauses ingest, and
// drop_oldest (or pause_ingest at the outbox's bound) never comes into play.
void check_map_sum(Checker& c, const Config& config, uint64_t state_bytes, uint64_t largest_bytes) {
    const uint64_t map = config.storage.map_size_bytes;
    const uint64_t outbox = config.upstream ? config.upstream->outbox.max_bytes : 0;
    const uint64_t side = side_bytes_max(map);
    const uint64_t reserve = map_reserve_bytes(map);
    // Bounded by the config's own ranges (state <= 3/4 of a map <= 1TiB, outbox <= 1TiB): no
    // overflow.
    const uint64_t sum =
        state_bytes + largest_bytes + row_store_factor * outbox + row_store_factor * side + reserve;
    if (sum <= map) return;
    std::string terms = "the pipelines' state " + std::to_string(state_bytes) + " bytes + " +
                        std::to_string(largest_bytes) +
                        " bytes (the largest pipeline's second version, while it backfills)";
    if (outbox > 0) {
        terms += " + " + std::to_string(row_store_factor) + " x " + core::format_size(outbox) +
                 " (upstream.outbox.max_bytes: LMDB's pages and the outbox's indexes take about "
                 "twice the rows' bytes)";
    }
    terms += " + " + std::to_string(row_store_factor) + " x " + approx_size(side) +
             " (side output: 16MiB, or a 16th of a smaller map) + " + approx_size(reserve) +
             " (LMDB's reserve for deletes: a 32nd of the map)";
    c.error("/storage/map_size",
            "the store holds at once " + terms + " = " + std::to_string(sum) + " bytes (" +
                approx_size(sum) + "), more than storage.map_size " + core::format_size(map) +
                ": the map would fill before the outbox reaches its bound, and map_full pauses "
                "ingest; raise storage.map_size to at least " +
                std::to_string(sum) +
                " bytes, or lower upstream.outbox.max_bytes or limits.max_open_windows");
}

}  // namespace detail
}  // namespace tidemark::config
