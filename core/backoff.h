// The one reconnect backoff: capped exponential growth with equal jitter, as arithmetic. Every
// reconnect loop uses it (MQTT ingest, forwarder and health; the sink's PostgreSQL writer);
// each draws its own jitter, so that core stays free of randomness.
#pragma once

#include <cstdint>

namespace tidemark::core {

/// Operation: the wait before the next attempt after `failures` failed ones in a row is
/// min_ms doubled per failure, capped at max_ms ("the cap"), then "equal jitter": somewhere in
/// [cap / 2, cap], where `jitter` (a fraction in [0, 1] the caller draws, uniformly for a fleet
/// to spread its reconnects) says where. No wait ever exceeds max_ms, and none is shorter than
/// half of min_ms.
/// Limits: `failures` may grow without bound (the doubling stops at the cap).
struct Backoff {
    int64_t min_ms = 250;
    int64_t max_ms = 30'000;

    /// The cap after `failures` failures: min_ms * 2^failures, at most max_ms.
    int64_t cap_ms(int failures) const;
    /// The wait: cap_ms(failures) scaled into [half, all] of itself by `jitter` in [0, 1].
    int64_t wait_ms(int failures, double jitter) const;
};

}  // namespace tidemark::core
