// What a config would do to a data directory's pipeline versions: `tidemark check-config` and
// `tidemark inspect` show it (DESIGN.md section 8).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "adapters/config/config.h"
#include "adapters/lmdb/store.h"
#include "firmware/service/versions.h"

namespace tidemark::firmware {

/// One pipeline of the config against the stored versions.
struct VersionPlan {
    std::string pipeline;
    std::string version;       // the config's
    std::string live_version;  // the store's; empty: none (a new pipeline, or no store)
    bool backfill = false;     // the config's version would backfill (or is backfilling)
    bool resumes = false;      // a stored backfill of this version would resume
    uint64_t from_offset = 0;  // where it would read from
    uint64_t records = 0;      // log records from there to the end of the log
};

/// Reads the registry from `store` (read-only; none: a store from before versions, whose
/// pipelines all run as the config says) and counts the log records each backfill would read
/// in `log_dir`. An empty store (no checkpoint) backfills nothing: recovery replays the log.
Result<std::vector<VersionPlan>> read_version_plan(const config::Config& config, lmdb::Store& store,
                                                   const std::string& log_dir);

/// The config restricted to the pipelines whose stored state it can restore (their version is
/// the live one), for inspect's figures.
config::Config live_view(const config::Config& config, const std::vector<VersionPlan>& plan);

/// One line per pipeline, for check-config and inspect's text.
std::string version_plan_text(const std::vector<VersionPlan>& plan);

}  // namespace tidemark::firmware
