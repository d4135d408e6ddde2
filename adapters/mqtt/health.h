// The health topic: a retained JSON snapshot every interval, and online/offline status.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "adapters/mqtt/client_options.h"
#include "core/clock.h"
#include "core/result.h"

namespace tidemark::mqtt {

struct HealthOptions {
    /// The gateway broker, with a client id of its own (e.g. the source client id + "-health"):
    /// two connections under one id would throw each other off.
    BrokerOptions broker;
    /// Already expanded (expand_topic with the node id), e.g. "tidemark/gw-01/health".
    std::string topic;
    /// Empty = status_topic_for(topic).
    std::string status_topic;
    int64_t interval_ms = 10'000;
    /// What the interval, the backoff and the deadlines are measured by (steady_ms). A test
    /// clock must be advanced for them to pass. Required (create() refuses nullptr): firmware
    /// passes its SystemClock.
    const core::Clock* clock = nullptr;
};

/// The status topic next to a health topic: its last level replaced by "status"
/// ("tidemark/gw-01/health" -> "tidemark/gw-01/status"); a single-level topic, or one whose
/// last level is already "status", gets "/status" appended.
std::string status_topic_for(std::string_view health_topic);

struct HealthStats {
    bool connected = false;
    uint64_t published = 0;  ///< snapshots handed to the client
    uint64_t skipped = 0;    ///< intervals without a publish: broker down or previous one unacked
    std::string last_error;  ///< the latest failure, kept after recovery; "" if none
};

/// Publishes the appliance's health on the gateway broker.
///
/// Operation: a thread and an MQTT client of its own (clean session) connect with the last
/// will `offline` (retained, QoS1) on the status topic, publish `online` (retained, QoS1) on
/// every connect, then `snapshot()` (retained, QoS1) on the health topic at once and every
/// interval_ms. stop() publishes `offline` itself before disconnecting. Reconnects use
/// reconnect_delay() (client_options.h).
///
/// Concurrency: create/start/stop from one owner thread; stats() from any thread. snapshot() is
/// called on the publisher's thread: it must read counters without waiting on ingest's locks.
/// The client is libmosquitto driven from that thread, not Paho: Paho C runs the callbacks of
/// every client in a process under one mutex, which a slow ingest callback (an fdatasync) would
/// hold, and health must report exactly then (docs/DECISIONS.md, "Health on libmosquitto").
///
/// Limits: never queues: at most one snapshot is in flight; while the broker is down or the
/// previous snapshot is unacknowledged the interval is skipped (counted), so a dead broker costs
/// nothing but the skipped count and never blocks ingest.
class HealthPublisher {
  public:
    /// Checks the options (validate(broker), topics, interval); no I/O.
    static Result<std::unique_ptr<HealthPublisher>> create(HealthOptions options,
                                                           std::function<std::string()> snapshot);
    ~HealthPublisher();
    HealthPublisher(const HealthPublisher&) = delete;
    HealthPublisher& operator=(const HealthPublisher&) = delete;

    /// Starts the thread; the first connect happens there.
    Result<void> start();
    /// Publishes `offline` and disconnects, within `timeout`.
    void stop(std::chrono::milliseconds timeout);
    /// Publishes a snapshot now rather than at the next interval (an alarm was raised or
    /// cleared): within 100 ms, unless the previous one is still unacknowledged. Any thread.
    void publish_now();
    HealthStats stats() const;

    class Impl;

  private:
    explicit HealthPublisher(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace tidemark::mqtt
