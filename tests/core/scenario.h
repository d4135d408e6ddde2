// Seeded scenarios for the engine's differential and restore properties: a generator, a runner
// for the real engine (optionally cut and restored from checkpoints), a comparison against the
// reference model and a shrinker that prints a reproduction a unit test can paste.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/engine.h"
#include "tests/core/reference_model.h"

namespace tidemark::model {

inline constexpr const char* scenario_node = "gw";

struct Scenario {
    uint64_t seed = 0;
    std::string family;  // what the generator aimed at, for the failure report
    core::PipelineSpec spec;
    std::vector<Record> records;
};

/// The same seed gives the same scenario on every platform (no std distributions).
Scenario generate_scenario(uint64_t seed);

/// One event of `key` (and `partition`, when it is not the key) with one field, `value`; the
/// order of arrival is that of the calls. And an idle tick at `ingest_ms`.
Record event_record(int64_t ingest_ms, std::string key, int64_t event_ms, double value,
                    std::string partition = {});
Record tick_record(int64_t ingest_ms);

/// How the engine is driven: checkpoints into one in-memory store after the records named in
/// `checkpoint_after`, and at the records named in `cut_after` also a checkpoint, then a new
/// engine restored from the store. At `failed_checkpoint_after` a checkpoint goes into a scratch
/// store that is thrown away and the engine is told with checkpoint_failed().
struct RunOptions {
    std::set<size_t> checkpoint_after;
    std::set<size_t> cut_after;
    std::set<size_t> failed_checkpoint_after;
};

struct EngineRun {
    std::vector<core::Emission> emissions;
    std::vector<std::string> lines;  // the harness's canonical text of each emission
    std::vector<core::SideOutput> side;
    core::PipelineStats stats;
    std::string error;  // a restore that failed
};

EngineRun run_engine(const core::PipelineSpec& spec, const std::vector<Record>& records,
                     const RunOptions& options = {});
ReferenceModel run_model(const core::PipelineSpec& spec, const std::vector<Record>& records);

/// The harness's text of an emission (tests/core/engine_harness.h Recorder).
std::string emission_text(const core::Emission& e);

/// The first difference between the engine and the model (emissions in order, side output,
/// counters and gauges), or nullopt when they agree.
std::optional<std::string> compare(const core::PipelineSpec& spec, const EngineRun& engine,
                                   const ReferenceModel& model);

/// Drops records while `fails` still holds (chunks, then single records): a local minimum.
std::vector<Record> shrink(std::vector<Record> records,
                           const std::function<bool(const std::vector<Record>&)>& fails);

/// C++ that rebuilds the spec (`core::PipelineSpec spec;` then assignments) and the records
/// (`std::vector<model::Record> records = {...};`), for pasting into a unit test.
std::string spec_code(const core::PipelineSpec& spec);
std::string records_code(const std::vector<Record>& records);

/// The engine against the model on these records, the engine in a child process so that a
/// crash is reported rather than fatal: nullopt when they agree, else the first difference.
std::optional<std::string> engine_differs(const core::PipelineSpec& spec,
                                          const std::vector<Record>& records);
/// Engine and model side by side, record by record (what each emitted, and their counters).
std::string side_by_side(const core::PipelineSpec& spec, const std::vector<Record>& records);

/// One seed of the differential property: nullopt when the engine agrees with the model, else
/// a report with the seed, the spec, the first difference and a minimised reproduction.
/// Minimising runs the scenario hundreds of times: callers do it for the first few failures.
std::optional<std::string> differential_failure(uint64_t seed, bool minimise = true);

/// One seed of the restore property: runs the scenario uncut, then with `cuts` random cuts
/// (and checkpoints in between); nullopt when every run's output equals the uncut one.
/// `with_failed_checkpoint` also throws one checkpoint away (Engine::checkpoint_failed).
/// Minimising (records dropped while the cut run still differs) is for the first few failures.
std::optional<std::string> restore_failure(uint64_t seed, bool with_failed_checkpoint,
                                           bool minimise = true);

/// Seeds from TIDEMARK_SEEDS (a count) or the default; TIDEMARK_SEED_BASE moves the range.
uint64_t seeds_from_env(uint64_t default_count);
uint64_t seed_base_from_env();

}  // namespace tidemark::model
