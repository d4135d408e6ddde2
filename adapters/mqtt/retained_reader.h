// Reading what a broker holds retained under some topic filters (health and status records for
// `tidemark status`), once, within a bounded time and memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "adapters/mqtt/client_options.h"
#include "core/clock.h"
#include "core/result.h"

namespace tidemark::mqtt {

struct RetainedReadOptions {
    /// The broker, with a client id no other client uses (two connections under one id throw
    /// each other off): firmware adds the process id.
    BrokerOptions broker;
    /// Filters to read, e.g. "tidemark/+/health"; at most 16, none empty.
    std::vector<std::string> filters;
    /// Everything (connect, subscribe, collect) ends by this; what arrived by then is the answer.
    int64_t timeout_ms = 3'000;
    /// Collecting ends this long after the last message (or the SUBACK) when the end marker
    /// (below) does not come back, as on a broker whose ACL refuses our publish.
    int64_t quiet_ms = 1'000;
    /// Bounds: topics kept, bytes kept (topics and payloads), and one payload (a larger one is
    /// skipped and counted). Reaching either of the first two ends the read, truncated.
    std::size_t topics_max = 40'000;
    std::size_t bytes_max = std::size_t{256} << 20;
    std::size_t payload_bytes_max = std::size_t{1} << 20;
    /// What the timeouts are measured by (steady_ms). Required.
    const core::Clock* clock = nullptr;
};

struct RetainedRead {
    std::string address;                        ///< the broker address that answered
    std::map<std::string, std::string> topics;  ///< topic -> latest payload (empty ones dropped)
    bool truncated = false;                     ///< topics_max or bytes_max reached
    std::size_t oversized = 0;                  ///< payloads over payload_bytes_max, skipped
    bool complete = false;                      ///< the end marker came back (all retained read)
};

/// Connects (clean session, MQTT 3.1.1, QoS 0 subscriptions), subscribes to the filters and a
/// marker topic of its own in one SUBSCRIBE, and after the SUBACK publishes one QoS 0 message
/// to the marker. A broker sends a subscription's retained messages right after its SUBACK and
/// delivers one client's messages in order, so the marker's return means every retained
/// message has arrived (mosquitto does; on a broker that does not, or refuses the publish, the
/// quiet period ends it instead). Tries the broker's addresses in order until one connects.
///
/// Concurrency: blocking, on the caller's thread; the client is its own (libmosquitto).
///
/// Limits: the bounds above; a payload over payload_bytes_max is still read off the socket by
/// libmosquitto before it is skipped (MQTT 3.1.1 cannot refuse it), so the broker's own
/// message_size_limit bounds that. Errors (no address reachable, refused connection or
/// subscription) name the address and the setting.
Result<RetainedRead> read_retained(const RetainedReadOptions& options);

}  // namespace tidemark::mqtt
