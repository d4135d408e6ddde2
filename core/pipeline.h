// What one pipeline computes: its window, watermark, late-data policy, aggregates and limits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/aggregate.h"
#include "core/result.h"

namespace tidemark::core {

enum class WindowType { tumbling, hopping, session };

/// tumbling: size, offset. hopping: size, advance (a window every `advance`, `size` long).
/// session: gap, max_duration.
struct WindowSpec {
    WindowType type = WindowType::tumbling;
    int64_t size_ms = 60'000;
    int64_t offset_ms = 0;
    int64_t advance_ms = 0;
    int64_t gap_ms = 0;
    int64_t max_duration_ms = 0;
};

/// global: one watermark for the pipeline, the minimum over partitions that are not idle.
/// partition: each partition's windows close on that partition's own watermark.
enum class WatermarkScope { global, partition };

struct WatermarkSpec {
    int64_t delay_ms = 0;
    int64_t idle_timeout_ms = 60'000;
    int64_t max_future_ms = 600'000;
    WatermarkScope scope = WatermarkScope::global;
};

enum class TooLate { drop, side_output };
enum class Corrections { upsert, retract };

struct LateSpec {
    int64_t allowed_lateness_ms = 0;
    TooLate too_late = TooLate::drop;
    Corrections corrections = Corrections::upsert;
    // late.report: each window's too-late tally goes to the consumer (LateReport), at most
    // once per window per report_every_ms of ingest time: when the ingest time crosses a
    // multiple of it, every tally that grew since its last report is reported. Operations
    // only: not part of the version (a changed interval changes when tallies travel, not the
    // counts a consumer ends with).
    bool report = false;
    int64_t report_every_ms = 60'000;
};

/// Bounds on state. Past a bound, a new key or window is refused and counted, never silently.
struct Limits {
    uint64_t keys_max = 100'000;
    uint64_t open_windows_max = 1'000'000;
};

struct PipelineSpec {
    std::string name;
    // The version of this definition (DESIGN.md section 4): in every result and its id. Empty
    // only in tests that predate versions.
    std::string version;
    // The name the state is stored under, when it is not `name`: a backfilling version keeps
    // its state apart from the live version of the same pipeline ("name@version").
    std::string state_name;
    std::vector<std::string> fields;  // names of Event::fields, in order
    WindowSpec window;
    WatermarkSpec watermark;
    LateSpec late;
    std::vector<AggregateSpec> aggregates;
    QuantileOptions quantile;
    Limits limits;
};

/// The longest key the engine keeps (a composite `partition|key` with its escapes included) and
/// the longest partition name, in bytes. A longer one is refused (counted in keys_refused, kept
/// as side output where the pipeline keeps too-late events): every state key stays within what
/// a store takes (state_key_bytes_max) whatever one device sends, so that one device's key can
/// never stop every checkpoint (issue 24).
inline constexpr size_t key_bytes_max = 384;
/// The longest name a pipeline's state is stored under (PipelineSpec::state_name, else name).
inline constexpr size_t state_name_bytes_max = 100;
/// The longest key the engine writes through a StateWriter: LMDB's limit.
inline constexpr size_t state_key_bytes_max = 511;

/// Refuses windows that cannot work (zero sizes, advance > size, a session without gap) with a
/// sentence naming the setting. Bounds-vs-budget checks live with the config, which knows sizes.
Result<void> validate(const PipelineSpec& spec);

/// A stable fingerprint of everything that gives stored state its meaning (window, aggregates,
/// fields): restoring state written under another definition is refused.
uint64_t state_fingerprint(const PipelineSpec& spec);

/// How many windows of this pipeline can be open per key at once in steady state (used by the
/// state-budget arithmetic): hopping keeps size/advance windows plus lateness, and so on.
uint64_t windows_per_key_estimate(const PipelineSpec& spec);

}  // namespace tidemark::core
