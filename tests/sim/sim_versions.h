// Which version of each pipeline runs over which part of the log, by DESIGN.md section 4's
// rules alone: the checker's expectation of what the appliance's versions host does. The
// simulation tells it what happened (a reload applied or refused, a start, a switch the host
// reported, how far a backfill read) and compares the host's registry with it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "adapters/config/config.h"
#include "firmware/service/versions.h"
#include "tests/sim/sim_types.h"

namespace tidemark::sim {

/// A pipeline as a config defines it: the simulation's definition and the parsed one.
struct Candidate {
    PipelineDef def;
    config::PipelineConfig config;
};

/// One run of one version: the records it reads are [start_offset, end_offset) of the log,
/// less those ingested before from_ms (backfill.from). A version run again is another Run.
struct Run {
    int index = 0;
    std::string pipeline;
    std::string version;  // the definition's hash (spec.version)
    Candidate candidate;
    uint64_t start_offset = 0;
    int64_t from_ms = INT64_MIN;
    uint64_t end_offset = offset_open;  // exclusive; open: to the end of the log
    bool live = false;
    bool became_live = false;  // at a (fresh) start or a switch: it has a version record
    bool switched_in = false;  // at a switch
    uint64_t live_from = 0;    // the offset at which it became live
    std::string previous;      // the version it replaced, when it became live at a switch
    uint64_t progress = 0;     // a backfill: the furthest offset it read
    std::string how;           // how it started and ended, for reports
};

class VersionTracker {
  public:
    /// A store without a registry (new, or no checkpoint committed yet): every pipeline of the
    /// config is live in its version over the whole log (a version already live continues).
    void fresh_start(const std::vector<Candidate>& wanted, uint64_t first_offset,
                     const std::string& why);
    /// A reload applied, or a start over a stored registry: a changed version backfills from
    /// first_offset (from_ms by backfill.from at now_ms) beside the live one, the same version
    /// resumes its backfill, a reverted one abandons it, a removed pipeline stops.
    void plan(const std::vector<Candidate>& wanted, uint64_t first_offset, int64_t now_ms,
              const std::string& why);
    /// The host made `version` of `pipeline` live at `at_offset`; a sentence when DESIGN's rules
    /// expected no such switch.
    std::optional<std::string> switched(const std::string& pipeline, const std::string& version,
                                        uint64_t at_offset, const std::string& why);
    void backfill_progress(const std::string& pipeline, uint64_t offset);
    void live_progress(uint64_t consumed_offset);
    /// The end of the simulation: open runs read to `end_of_log`.
    void close(uint64_t end_of_log);
    /// The host's registry against the rules; a sentence when they differ.
    std::optional<std::string> differs(const firmware::VersionRegistry& registry) const;
    /// What the rules say runs now, for reports.
    std::string summary() const;
    bool backfilling() const;
    std::vector<Run>& runs() { return runs_; }
    const std::vector<Run>& runs() const { return runs_; }
    /// Pipelines removed at some point (their version record is cleared then).
    const std::vector<std::string>& removed() const { return removed_; }

  private:
    struct Slot {
        int live = -1;
        int backfill = -1;
    };
    int start_run(const Candidate& c, uint64_t start, int64_t from_ms, bool live,
                  const std::string& how);
    void end_run(int index, uint64_t end, const std::string& how);

    std::vector<Run> runs_;
    std::map<std::string, Slot> slots_;
    std::vector<std::string> removed_;
    uint64_t live_offset_max_ = 0;
};

}  // namespace tidemark::sim
