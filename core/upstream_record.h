// The records a downstream consumer (`tidemark sink`) reads from the upstream broker, as typed
// values: results (DESIGN.md section 7), version records (section 4), side output, gateways'
// health records, and what it refuses. adapters/codec parses them, adapters/postgres writes them;
// both only know this file.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/emission.h"

namespace tidemark::core {

/// One result record as received. Every text field is valid UTF-8 without NUL (PostgreSQL text
/// cannot hold a NUL byte): the parser refuses a record that breaks this.
struct ReceivedResult {
    std::string id;
    std::string node;
    std::string pipeline;
    std::string version;  ///< opaque (the gateway may add a run suffix); "" when absent
    std::string key;
    int64_t window_start_ms = 0;
    int64_t window_end_ms = 0;
    uint32_t revision = 0;  ///< at most revision_max
    EmissionKind kind = EmissionKind::final_result;
    std::string closed_by;
    /// The values as one compact JSON object, name -> number or null, in the record's order.
    std::string values_json;
    int64_t watermark_ms = 0;

    /// PostgreSQL's integer: the column `revision` holds it.
    static constexpr uint32_t revision_max = 2'147'483'647;
};

/// One aggregate a version record names: its name and its function ("count", "mean", ...).
struct AggregateColumn {
    std::string name;
    std::string fn;
    bool operator==(const AggregateColumn&) const = default;
};

/// A retained version record (DESIGN.md section 4) on `topic`: the version a consumer reads
/// for (node, pipeline), ordered against others by switch_ms.
struct ReceivedVersion {
    std::string topic;
    std::string node;
    std::string pipeline;
    std::string version;
    int64_t since_ms = 0;
    std::optional<std::string> previous;
    int64_t switch_ms = 0;
    std::vector<AggregateColumn> aggregates;  ///< in the record's order
    std::string record_json;                  ///< the payload, kept in case it is rejected
};

/// An empty retained message on a version topic: the gateway removed that pipeline.
struct VersionRemoved {
    std::string topic;
};

/// A side output record (too-late event, refused or undecodable record), kept as it came.
struct ReceivedSide {
    std::string node;
    std::string pipeline;
    std::string record_json;  ///< the payload, a JSON object
};

/// A gateway's health record (health.upstream: README, "Health"), kept as it came; the sink
/// keeps the newest per node, by time_ms.
struct ReceivedHealth {
    std::string topic;
    std::string node;
    int64_t time_ms = 0;
    std::string record_json;  ///< the payload, a JSON object
};

/// A window's too-late tally (core::LateReport as the gateway sent it, README "Too-late
/// report"): the table keeps, per (node, pipeline, version, window, since_ms), the highest
/// too_late.
struct ReceivedLate {
    std::string id;
    std::string node;
    std::string pipeline;
    std::string version;  ///< "" when absent
    int64_t window_start_ms = 0;
    int64_t window_end_ms = 0;
    int64_t since_ms = 0;
    int64_t too_late = 0;  ///< 1 .. INT64_MAX (PostgreSQL's bigint)
    int64_t as_of_ms = 0;
};

/// The identity a consumer upserts a tally by: (node, pipeline, version, start, end, since).
int compare_tally(const ReceivedLate& a, const ReceivedLate& b);

/// A message the sink cannot take, and why (a sentence a person can act on).
struct Refusal {
    std::string reason;
};

using UpstreamRecord = std::variant<ReceivedResult, ReceivedVersion, VersionRemoved, ReceivedSide,
                                    ReceivedHealth, Refusal, ReceivedLate>;

/// The window identity a consumer upserts by: (node, pipeline, version, key, start, end).
/// Negative, zero or positive as `a` orders before, with or after `b`.
int compare_window(const ReceivedResult& a, const ReceivedResult& b);

/// Whether `a` replaces `b` for the same window: a higher revision, or the same revision and
/// `a` a retract where `b` is not (DESIGN.md section 4). Equal ranks replace nothing, so a
/// duplicate changes nothing.
bool outranks(const ReceivedResult& a, const ReceivedResult& b);

/// The view of one pipeline's current results, "current_<pipeline>", with the name made an SQL
/// identifier: ASCII letters lower-cased, '-' and '.' made '_'. nullopt when it cannot be one:
/// a character outside letters, digits, '-', '_' and '.', or longer than
/// pipeline_view_name_bytes_max (PostgreSQL cuts identifiers at 63 bytes, and two pipelines
/// must not share a view because their names agree on the first 63).
std::optional<std::string> pipeline_view_name(std::string_view pipeline);
inline constexpr std::size_t identifier_bytes_max = 63;  // PostgreSQL's NAMEDATALEN - 1
inline constexpr std::string_view pipeline_view_prefix = "current_";
inline constexpr std::size_t pipeline_view_name_bytes_max =
    identifier_bytes_max - pipeline_view_prefix.size();

/// The columns every current_<pipeline> view starts with; an aggregate may not be named so.
inline constexpr std::string_view pipeline_view_fixed_columns[] = {
    "node", "key", "window_start", "window_end", "revision", "closed_by"};

/// Why `column` cannot name an aggregate's column in a current_<pipeline> view (empty, longer
/// than identifier_bytes_max, or one of the fixed columns), or "" when it can. Any other text
/// can: the view quotes it.
std::string aggregate_column_problem(std::string_view column);

}  // namespace tidemark::core
