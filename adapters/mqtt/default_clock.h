// TODO(issue 15): remove once firmware passes its clock (firmware/clock.h) to the forwarder
// and the health publisher; until then a caller that names no clock gets this one.
#pragma once

#include "core/clock.h"

namespace tidemark::mqtt {

/// The host's clocks (std::chrono::system_clock and steady_clock), process-wide.
const core::Clock& default_clock();

}  // namespace tidemark::mqtt
