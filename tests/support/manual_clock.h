// A clock that moves only when the test says so.
#pragma once

#include <atomic>
#include <cstdint>

#include "core/clock.h"

namespace tidemark::test {

class ManualClock final : public core::Clock {
  public:
    explicit ManualClock(int64_t wall_ms = 1'700'000'000'000, int64_t steady_ms = 1'000)
        : wall_ms_(wall_ms), steady_ms_(steady_ms) {}
    int64_t wall_ms() const override { return wall_ms_.load(); }
    int64_t steady_ms() const override { return steady_ms_.load(); }
    /// The thread's CPU time moves with the steady clock: all the time a test steps is busy,
    /// so what is measured in CPU time moves as it did by steady time.
    int64_t thread_cpu_us() const override { return steady_ms_.load() * 1000; }
    /// Moves both clocks forward by `ms` (steady never goes back).
    void advance(int64_t ms) {
        wall_ms_ += ms;
        steady_ms_ += ms;
    }
    /// Steps the wall clock only, as NTP does.
    void set_wall(int64_t ms) { wall_ms_ = ms; }

  private:
    std::atomic<int64_t> wall_ms_;
    std::atomic<int64_t> steady_ms_;
};

}  // namespace tidemark::test
