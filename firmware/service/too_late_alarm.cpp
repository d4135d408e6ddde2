#include "firmware/service/too_late_alarm.h"

#include <algorithm>
#include <cmath>

namespace tidemark::firmware {

bool TooLateWatch::update(int64_t now_ms, uint64_t events_in, uint64_t too_late,
                          const config::PipelineConfig::TooLateAlarm& alarm) {
    share_ = 0;
    if (!alarm.enabled) {
        samples_.clear();
        return false;
    }
    if (!samples_.empty() &&
        (events_in < samples_.back().events || too_late < samples_.back().too_late))
        samples_.clear();
    const int64_t step_ms = std::max<int64_t>(1, alarm.over_ms / (samples_max - 2));
    if (samples_.empty() || now_ms - samples_.back().ms >= step_ms)
        samples_.push_back({now_ms, events_in, too_late});
    // Keep one sample at or before the span's start, the base of the differences.
    while (samples_.size() >= 2 && samples_[1].ms <= now_ms - alarm.over_ms)
        samples_.pop_front();
    while (samples_.size() > samples_max)
        samples_.pop_front();
    const Sample& base = samples_.front();
    const uint64_t events = events_in - base.events;
    const uint64_t late = too_late - base.too_late;
    if (events == 0) return false;
    share_ = static_cast<double>(late) / static_cast<double>(events);
    const auto events_needed = static_cast<uint64_t>(std::ceil(1.0 / alarm.share));
    return events >= events_needed && share_ > alarm.share;
}

}  // namespace tidemark::firmware
