// The checker, written from DESIGN.md sections 4 and 5 and independent of the code under test:
// it reads only what reached the simulated upstream, what the simulation appended to the log,
// the version runs of DESIGN's rules (sim_versions.h) and the reference model's results for
// each run (sim_expect.h). See tests/sim/appliance_sim.cpp for the list of properties.
#pragma once

#include <string>
#include <vector>

#include "tests/sim/sim_types.h"
#include "tests/sim/sim_world.h"

namespace tidemark::sim {

/// Every property that does not hold, one sentence each (the first of each kind, with a count
/// of the others); `summary` gets what was compared, for --verbose.
std::vector<std::string> check(const Scenario& s, const Recording& rec, std::string* summary);

}  // namespace tidemark::sim
