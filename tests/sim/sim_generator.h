// From a seed, what one gateway lives through (tests/sim/appliance_sim.cpp has the overview):
// devices and their messages, the configs it is reloaded or restarted with, crashes, outages
// of the upstream and injected faults.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tests/sim/sim_types.h"

namespace tidemark::sim {

/// The families a seed may draw, each aimed at one kind of meeting of features (a seed's
/// family is `families()[seed % size]`); every family also draws the general events.
const std::vector<std::string>& families();

/// The same seed gives the same scenario on every platform.
Scenario generate(uint64_t seed);

/// What the scenario holds, for --verbose.
std::string describe(const Scenario& scenario);

}  // namespace tidemark::sim
