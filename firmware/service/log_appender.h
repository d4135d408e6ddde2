// The service's writes to the log: ingest's messages (inside the Paho callback, before the
// PUBACK), the ticker's idle ticks and interval fsync, and the markers that say ingest listens
// again or the clock changed trust. One lock orders them all.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "adapters/config/config.h"
#include "adapters/mqtt/ingest.h"
#include "core/clock.h"

namespace tidemark::firmware {

class ServiceParts;

/// The topic the redelivery filter knows a malformed record by: its topic field as the log
/// keeps it (reason, separator, the topic as cut), with the payload prefix the log keeps
/// (log::malformed_payload_bytes_max). The same live (LogAppender) and when the filter is seeded
/// from the log after a restart (EngineHost).
std::string malformed_filter_topic(std::string_view reason, std::string_view topic);

/// Operation: handle() is ingest's handler: a redelivered duplicate is skipped, an oversized
/// payload is kept as a malformed record with its reason, anything else is appended as a
/// message. Before the first message or tick of a connection, a marker tick says that ingest
/// listens again: the time since the last record was our silence (stopped, paused,
/// disconnected), not the devices'.
/// Concurrency: handle() runs on Paho's thread, tick() on the ticker's, set_live() and
/// append_clock_marker() on the engine loop's; all take the one append lock.
/// Limits: a failed append raises the append alarm and answers retry_later (the broker keeps
/// the message); the redelivery filter's bound is its own (mqtt/redelivery_filter.h).
class LogAppender {
  public:
    LogAppender(const config::Config& config, ServiceParts& parts, const core::Clock& clock);

    mqtt::HandleResult handle(const mqtt::IncomingMessage& message);
    /// Ingest can hear the devices (connected on `connection`, not paused) or not. Ticks say
    /// that the devices are silent: only while ingest could hear them, so that our own silence
    /// does not make a backlog the broker keeps late.
    void set_live(bool live, uint64_t connection);
    /// An idle tick when nothing was appended for `tick_interval_ms` and ingest is live.
    void tick_if_idle(int64_t tick_interval_ms);
    /// Appends the marker tick for a change of clock trust; false when the append failed (the
    /// caller tries again at its next look at the clock).
    bool append_clock_marker(bool trusted);

  private:
    // Under mutex_. False when the marker could not be appended.
    bool mark_resumed(uint64_t connection);

    const config::Config& config_;
    ServiceParts& parts_;
    const core::Clock& clock_;
    std::mutex mutex_;
    std::atomic<int64_t> last_append_steady_ms_;
    std::atomic<bool> live_{false};
    uint64_t connection_seen_ = 0;  // under mutex_, like the redelivery filter
    uint64_t resumed_for_ = 0;      // the connection whose start is marked in the log
};

/// The ticker thread: idle ticks (the engine's clock while nothing arrives) and, with
/// fsync=interval, the log's fdatasync outside the append lock, so ingest never waits for the
/// disk. Stops (and joins) on destruction.
class Ticker {
  public:
    Ticker(const config::Config& config, ServiceParts& parts, LogAppender& appender,
           const core::Clock& clock);
    ~Ticker();
    Ticker(const Ticker&) = delete;
    Ticker& operator=(const Ticker&) = delete;

  private:
    void run();

    const config::Config& config_;
    ServiceParts& parts_;
    LogAppender& appender_;
    const core::Clock& clock_;
    std::mutex mutex_;
    std::condition_variable wake_;
    bool stop_ = false;  // under mutex_
    std::thread thread_;
};

}  // namespace tidemark::firmware
