// The appliance's config as the simulation writes it: one JSON text per ConfigState, parsed by
// the real config reader (adapters/config), so that versions are the ones the appliance hashes.
#pragma once

#include <string>

#include "adapters/config/config.h"
#include "core/result.h"
#include "tests/sim/sim_types.h"

namespace tidemark::sim {

/// The pipeline's JSON object (DESIGN.md section 6, docs/CONFIG.md).
std::string pipeline_json(const PipelineDef& def);

/// The whole config: fsync never (step() reads what was written), a small map and small log
/// segments, an upstream section (compaction is a store option), max_share 1 (the simulation
/// paces the backfill itself through records_max).
std::string config_json(const ConfigState& state, const std::string& data_dir);

/// The config the appliance reads from config_json; an error names the refusal.
Result<config::Config> parse(const ConfigState& state, const std::string& data_dir);

/// One line saying what a definition is, for --verbose and failure reports.
std::string describe(const PipelineDef& def);

}  // namespace tidemark::sim
