// The one clock interface: what adapters and firmware read time through, so that backoff,
// ack timeouts, health intervals and ingest stamps can be stepped and skewed in tests.
#pragma once

#include <cstdint>

namespace tidemark::core {

/// Operation: `wall_ms` is milliseconds since the Unix epoch by the host's clock (it may step,
/// backwards too, when NTP syncs); `steady_ms` is a monotonic count with an arbitrary origin,
/// for intervals and timeouts only; `thread_cpu_us` is the CPU time the calling thread has used,
/// in microseconds from an arbitrary origin (time it spends blocked, in an fsync or asleep, is
/// not in it: what a share of a core is measured in).
/// Concurrency: implementations are safe to call from any thread.
/// Limits: core itself never reads a clock (its only "now" is the ingest_ms of the records it
/// is given); this is the type the layers above pass in. firmware/clock.h has the system's.
class Clock {
  public:
    virtual ~Clock() = default;
    virtual int64_t wall_ms() const = 0;
    virtual int64_t steady_ms() const = 0;
    virtual int64_t thread_cpu_us() const = 0;
};

}  // namespace tidemark::core
