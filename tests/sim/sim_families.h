// The generator's parts that the families share (internal to tests/sim): random and changed
// pipeline definitions, a regular device, and the shape each family adds to a scenario.
#pragma once

#include <string>
#include <vector>

#include "tests/sim/sim_types.h"

namespace tidemark::sim {

PipelineDef random_def(Rng& rng, const std::string& name);
/// One or two parts drawn again: a new version, usually.
PipelineDef mutate(Rng& rng, const PipelineDef& from);
Device regular_device(Rng& rng, int index, int64_t end_ms);

/// Adds the family's shape (sim_generator.cpp names them) to a scenario whose configs[0],
/// devices and pacing are drawn: it may change those, and add ops with their configs (and the
/// definitions they use to `history`, per pipeline name a..c).
void shape_family(Rng& rng, Scenario& s, std::vector<std::vector<PipelineDef>>& history);

}  // namespace tidemark::sim
