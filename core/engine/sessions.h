// Session windows (internal): the due time that the timers compute, inlined where they are.
#pragma once

#include <algorithm>

#include "core/engine/pipeline_run.h"

namespace tidemark::core::detail {

inline int64_t PipelineRun::session_due(const KeyState& k) const {
    int64_t due = time_max;
    for (const Unit& u : k.units)
        due = std::min(due, u.fired ? sat_add(u.end, lateness_ms_) : u.end);
    return due;
}

}  // namespace tidemark::core::detail
