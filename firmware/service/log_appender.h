// The service's writes to the log: ingest's messages (inside the Paho callback, before the
// PUBACK), the ticker's idle ticks (ticker.h), and the markers that say ingest listens again or
// the clock changed trust. One lock orders them all. The appender owns what ingest's thread
// needs beside the log: the redelivery filter, seeded from the log's tail after a restart.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "adapters/config/config.h"
#include "adapters/mqtt/ingest.h"
#include "adapters/mqtt/redelivery_filter.h"
#include "core/clock.h"
#include "core/result.h"

namespace tidemark::log {
class LogWriter;
}  // namespace tidemark::log

namespace tidemark::firmware {

class Alarms;

/// The topic the redelivery filter knows a malformed record by: its topic field as the log
/// keeps it (reason, separator, the topic as cut), with the payload prefix the log keeps
/// (log::malformed_payload_bytes_max). The same live (LogAppender) and when the filter is seeded
/// from the log after a restart (seed_redelivery_filter).
std::string malformed_filter_topic(std::string_view reason, std::string_view topic);

/// Seeds `filter` with the log's last messages, wherever the checkpoint is (after a clean stop
/// it is at the end): a broker that lost their PUBACKs redelivers them on our first connection.
/// Reads the newest segment, and the one before only when the newest holds too few. Every
/// message and malformed record of a message the broker may send again (not QoS0, not ticks),
/// known by what the log keeps of it, as handle() remembers them live.
Result<void> seed_redelivery_filter(const log::LogWriter& log, mqtt::RedeliveryFilter& filter);

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
    /// `log`, `alarms` and `clock` must outlive the appender. Seeds the redelivery filter from
    /// the log (seed_redelivery_filter), so open it once recovery has replayed the log.
    static Result<std::unique_ptr<LogAppender>> open(const config::Config& config,
                                                     log::LogWriter& log, Alarms& alarms,
                                                     const core::Clock& clock);

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
    /// Redelivered duplicates skipped so far (any thread).
    uint64_t redeliveries_skipped() const { return redeliveries_skipped_.load(); }

  private:
    LogAppender(const config::Config& config, log::LogWriter& log, Alarms& alarms,
                const core::Clock& clock);
    // Under mutex_. False when the marker could not be appended.
    bool mark_resumed(uint64_t connection);

    const config::Config& config_;
    log::LogWriter& log_;
    Alarms& alarms_;
    const core::Clock& clock_;
    std::mutex mutex_;
    std::atomic<int64_t> last_append_steady_ms_;
    std::atomic<bool> live_{false};
    std::atomic<uint64_t> redeliveries_skipped_{0};
    mqtt::RedeliveryFilter filter_;  // under mutex_
    uint64_t connection_seen_ = 0;   // under mutex_, like the redelivery filter
    uint64_t resumed_for_ = 0;       // the connection whose start is marked in the log
};

}  // namespace tidemark::firmware
