// Pipeline versions as the store keeps them (DESIGN.md section 4): for each pipeline, the
// version that runs live and the one that backfills, with the definitions needed to run either
// after the config moved on, and the backfill's position in the log.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace tidemark::lmdb {
class Store;
}  // namespace tidemark::lmdb

namespace tidemark::firmware {

/// The state key of the registry: beside the engine's (0x01) and the decode counters (0x02).
inline constexpr std::string_view versions_key = "\x03versions";

/// One pipeline's versions. A pipeline that has only ever backfilled has no live version yet.
/// Versions are stored as run labels (VersionRegistry::start_run): the definition's hash, with a
/// run number after it when that version of that pipeline ran on this node before.
struct VersionEntry {
    std::string name;
    std::string live_version;     // empty: none runs live yet
    std::string live_definition;  // its JSON object (PipelineConfig::definition)
    std::string previous;         // the version live before it, for the version record
    int64_t since_ms = 0;         // the oldest event time its results cover (0: none)
    // The ingest time of the log record at which the live version became live (its first
    // start, or the switch): how a consumer orders two version records of one pipeline.
    int64_t switch_ms = 0;
    bool record_pending = false;   // its version record is not yet in the outbox
    std::string backfill_version;  // empty: no backfill
    std::string backfill_definition;
    uint64_t backfill_offset = 0;           // the next log record the backfill reads
    int64_t backfill_from_ms = INT64_MIN;   // records ingested before this are skipped
    int64_t backfill_since_ms = INT64_MAX;  // the oldest event time it fed; MAX: none yet
    // After a restart the backfill reads again, from backfill_offset, what it had read before
    // the crash: the outbox must still know the ids of the rows it emitted then (all at or
    // after outbox seq hold_seq) until it is past hold_offset, the log's end at the restart.
    // 0: no hold.
    uint64_t backfill_hold_seq = 0;
    uint64_t backfill_hold_offset = 0;
};

/// Operation: encoded with core/bytes.h into one state value, written in every checkpoint, so
/// that it always matches the state and log offset it is committed with. Beside the entries, what
/// makes a version run again distinct from its earlier runs (DESIGN.md section 4): the (pipeline,
/// version) pairs that have started a run on this node, kept when a pipeline is removed or
/// dropped, and a counter of the runs that needed a number.
/// Limits: one entry per pipeline name ever configured and not yet removed (the config allows 64);
/// ran_max pairs remembered: past them every new run is numbered (ran_saturated), so no run ever
/// takes a label an earlier one had.
struct VersionRegistry {
    static constexpr size_t ran_max = 1024;

    std::vector<VersionEntry> entries;
    std::vector<uint64_t> ran;  // a hash of each (pipeline, version) that started a run, sorted
    bool ran_saturated = false;
    uint64_t runs_numbered = 0;  // the last run number given

    VersionEntry* find(std::string_view name);
    const VersionEntry* find(std::string_view name) const;
    VersionEntry& get(std::string_view name);  // adds an empty entry when missing
    void remove(std::string_view name);
    /// The label a new run of `version` (a definition's hash) of `pipeline` takes: the hash
    /// for the first run, "hash.N" with a new N for any later one (or for every run once the
    /// registry remembers ran_max pairs). Records the run.
    std::string start_run(std::string_view pipeline, std::string_view version);
    std::string encode() const;
    static Result<VersionRegistry> decode(std::string_view value);
};

/// The registry `store` holds; none in a store from before versions (or without a checkpoint).
Result<std::optional<VersionRegistry>> read_registry(lmdb::Store& store);

/// Whether a run label (VersionRegistry::start_run) is a run of the definition hashed `version`.
bool is_run_of(std::string_view label, std::string_view version);

/// The state name of a backfilling version: its state lives apart from the live version's.
std::string backfill_state_name(std::string_view pipeline, std::string_view version);

/// The retained record on the results topic + "/version" that names the version consumers read
/// (DESIGN.md section 4): {"node", "pipeline", "version", "since_ms", "previous" (or null),
/// "switch_ms", "aggregates": {name: fn, ...}}, the aggregates in config order, read from the
/// live version's stored definition.
std::string version_record_json(std::string_view node, const VersionEntry& entry);

/// A stable id for a version record (node, pipeline, version), so that one appended again after
/// a crash is skipped by the outbox's id index.
uint64_t version_record_id(std::string_view node, std::string_view pipeline,
                           std::string_view version);

}  // namespace tidemark::firmware
