// The too-late alarm (late.alarm, issue 29): the share of a pipeline's events that were too late
// over the last span, from the counters health reads every second.
#pragma once

#include <cstdint>
#include <deque>

#include "adapters/config/config.h"

namespace tidemark::firmware {

/// Operation: update() is given the pipeline's events_in and too_late counters (too-late events
/// are among events_in) and says whether the alarm is raised: more than `share` of the events
/// since the sample taken at or before `over` ago were too late, and there were at least
/// 1 / share events in that span (one late event of three is not a rate). A counter that went
/// down (another version took over) starts the span again. Off: never raised.
/// Concurrency: the engine thread's (health refresh).
/// Limits: at most samples_max samples, one every over / (samples_max - 2).
class TooLateWatch {
  public:
    static constexpr size_t samples_max = 62;

    bool update(int64_t now_ms, uint64_t events_in, uint64_t too_late,
                const config::PipelineConfig::TooLateAlarm& alarm);
    /// The share over the span at the last update (0 without events).
    double share() const { return share_; }

  private:
    struct Sample {
        int64_t ms;
        uint64_t events;
        uint64_t too_late;
    };
    std::deque<Sample> samples_;
    double share_ = 0;
};

}  // namespace tidemark::firmware
