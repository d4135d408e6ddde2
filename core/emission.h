// What the engine produces: window results (final, update, retract) and side output.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tidemark::core {

enum class EmissionKind : uint8_t { final_result, update, retract };
std::string_view emission_kind_name(EmissionKind kind);  // "final", "update", "retract"

/// Why a window's result was emitted: the watermark reached its end, the watermark advanced
/// because every partition was idle, a late event corrected it, or a late event merged it into
/// another session (the retract of a window that no longer exists).
enum class ClosedBy : uint8_t { watermark, idle, late, merge };
std::string_view closed_by_name(ClosedBy closed_by);

/// One result record (DESIGN.md section 7). Every field is a function of the log.
struct Emission {
    uint32_t pipeline = 0;  // index in the engine's pipeline list
    uint64_t id = 0;        // emission_id() of the fields below
    EmissionKind kind = EmissionKind::final_result;
    uint32_t revision = 0;  // for a retract: the revision it cancels
    std::string key;
    int64_t start_ms = 0;
    int64_t end_ms = 0;
    ClosedBy closed_by = ClosedBy::watermark;
    std::vector<std::optional<double>> values;  // in the pipeline's aggregate order
    int64_t watermark_ms = 0;
};

/// A stable 64-bit id of (node, pipeline, key, window, revision, kind): the same in every run.
/// The pipeline's version is part of it through emission_id_seed.
uint64_t emission_id(std::string_view node, std::string_view pipeline, std::string_view key,
                     int64_t start_ms, int64_t end_ms, uint32_t revision, EmissionKind kind);
/// emission_id() in two steps, for a caller that emits many ids of one (node, pipeline): the
/// seed depends on those only; emission_id_from_seed(seed, ...) equals emission_id(...) for an
/// empty version. A non-empty version (PipelineSpec::version) is hashed after the pipeline.
uint64_t emission_id_seed(std::string_view node, std::string_view pipeline,
                          std::string_view version = {});
uint64_t emission_id_from_seed(uint64_t seed, std::string_view key, int64_t start_ms,
                               int64_t end_ms, uint32_t revision, EmissionKind kind);

/// A too-late event routed to the side topic, with the reason and the window it missed.
struct SideOutput {
    uint32_t pipeline = 0;
    std::string reason;
    uint64_t order = 0;  // log offset of the record
    std::string key;
    int64_t event_ms = 0;
    int64_t ingest_ms = 0;
    int64_t window_start_ms = 0;
    int64_t window_end_ms = 0;
    int64_t watermark_ms = 0;
    std::string topic;
    std::string payload;
};

/// A window's too-late tally, for the consumer (LateSpec::report; README "Too-late report"):
/// the window's too-late events counted since `since_ms`, cumulative, so that a duplicate, a
/// re-send or an older tally arriving late changes nothing for a consumer that keeps the
/// highest `too_late` per (pipeline, version, window, since_ms). A window has a second tally
/// (a later since_ms) only when the engine let its first go (bounded table): the window's count
/// is the sum over its tallies. Every field is a function of the log.
struct LateReport {
    uint32_t pipeline = 0;  // index in the engine's pipeline list
    uint64_t id = 0;        // late_report_id() of the fields below
    int64_t start_ms = 0;   // the window, as in results
    int64_t end_ms = 0;
    int64_t since_ms = 0;   // ingest time of the tally's first too-late event
    uint64_t too_late = 0;  // too-late events of the window since since_ms, >= 1
    int64_t as_of_ms = 0;   // ingest time at which the tally was reported
};

/// A stable id of a tally's state, from the pipeline's emission_id_seed: the same in every run
/// and never the id of a result (a domain tag no result id hashes).
uint64_t late_report_id(uint64_t seed, int64_t start_ms, int64_t end_ms, int64_t since_ms,
                        uint64_t too_late);

/// Receives what the engine emits, in emission order.
class EmissionSink {
  public:
    virtual ~EmissionSink() = default;
    virtual void emit(const Emission& emission) = 0;
    virtual void side_output(const SideOutput& side) = 0;
    /// Too-late tallies (pipelines with LateSpec::report). A sink that sends nothing upstream
    /// (tests, replay's counters) may ignore them.
    virtual void late_report(const LateReport&) {}
};

}  // namespace tidemark::core
