// The generated input of the crash test, shared by crash_child (which appends it to the log) and
// crash_test (which checks that the log holds exactly it, once).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "adapters/log/record.h"

namespace tidemark::crash_test {

inline constexpr int64_t stream_ingest_ms_first = 1'700'000'000'000;
inline constexpr int64_t stream_ingest_step_ms = 10;
inline constexpr uint64_t stream_devices = 7;
/// A tick follows every this many messages, as ingest appends them when the broker is quiet.
inline constexpr uint64_t stream_tick_every = 100;
/// The last item is a tick this far past the last message: every window, however late, closes.
inline constexpr int64_t stream_final_tick_after_ms = 10 * 60 * 1000;

/// What the engine is given: deliberately late events (1 s delay, 5 s allowed lateness) so that
/// corrections, retractions, session merges and too-late drops all happen and all replay.
inline uint64_t stream_hash(uint64_t seed, uint64_t i) {
    uint64_t z = seed * 0x9E3779B97F4A7C15ULL + i + 1;  // splitmix64
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/// How far behind its ingest time message i is stamped.
inline int64_t stream_jitter_ms(uint64_t seed, uint64_t i) {
    const uint64_t h = stream_hash(seed, i);
    const uint64_t r = h % 1000;
    if (r < 3) return 7000 + static_cast<int64_t>((h >> 20) % 2000);   // too late: dropped
    if (r < 40) return 1500 + static_cast<int64_t>((h >> 20) % 3000);  // late: a correction
    return static_cast<int64_t>((h >> 20) % 400);
}

/// Values that are not exact binary fractions: a state restore that loses a bit shows up.
inline double stream_value(uint64_t seed, uint64_t i) {
    return static_cast<double>(stream_hash(seed ^ 0x5bd1e995ULL, i) % 100'000) / 1000.0 - 20.0;
}

/// Items (log records) for `messages` messages: N messages, a tick after each full hundred, and
/// the final tick.
inline uint64_t stream_items(uint64_t messages) {
    return messages + messages / stream_tick_every + 1;
}

struct StreamItem {
    log::RecordType type = log::RecordType::tick;
    int64_t ingest_ms = 0;
    std::string topic;    // empty for ticks
    std::string payload;  // empty for ticks
    bool is_message = false;
    uint64_t seq = 0;  // the message's seq; for a tick, the seq of the message before it
};

/// Item k (0-based) of the stream of `messages` messages.
inline StreamItem stream_item(uint64_t seed, uint64_t messages, uint64_t k) {
    StreamItem item;
    const uint64_t block = stream_tick_every + 1;
    if (k + 1 == stream_items(messages)) {
        item.seq = messages - 1;
        item.ingest_ms = stream_ingest_ms_first +
                         static_cast<int64_t>(messages - 1) * stream_ingest_step_ms +
                         stream_final_tick_after_ms;
        return item;
    }
    const uint64_t pos = k % block;
    if (pos == stream_tick_every) {
        item.seq = (k / block) * stream_tick_every + stream_tick_every - 1;
        item.ingest_ms =
            stream_ingest_ms_first + static_cast<int64_t>(item.seq) * stream_ingest_step_ms;
        return item;
    }
    const uint64_t i = (k / block) * stream_tick_every + pos;
    item.type = log::RecordType::message;
    item.is_message = true;
    item.seq = i;
    item.ingest_ms = stream_ingest_ms_first + static_cast<int64_t>(i) * stream_ingest_step_ms;
    item.topic = "sensors/dev-" + std::to_string(i % stream_devices) + "/telemetry";
    char text[128];
    std::snprintf(text, sizeof text, R"({"ts":%lld,"seq":%llu,"v":%.3f})",
                  static_cast<long long>(item.ingest_ms - stream_jitter_ms(seed, i)),
                  static_cast<unsigned long long>(i), stream_value(seed, i));
    item.payload = text;
    return item;
}

}  // namespace tidemark::crash_test
