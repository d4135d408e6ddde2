// The forwarder's time decisions (ack timeout, delete interval, outbox polling), read through
// one core::Clock so that tests can step them; the reconnect backoff is core/backoff.h's.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/clock.h"

namespace tidemark::mqtt {

/// Operation: the instants the forwarder's loop decides by, in the clock's steady ms: the
/// latest acknowledgement and the latest publish into an empty window (the ack timeout), the
/// oldest acknowledgement not yet handed to the deleter (the delete interval), the last look
/// at the outbox (the poll interval) and the latest connect.
/// Concurrency: the forwarder's thread only.
/// Limits: decides nothing by itself; the forwarder asks after each poll of its socket, so a
/// decision is taken at most one poll (poll_interval_ms) after it falls due.
class LinkTimers {
  public:
    LinkTimers(const core::Clock& clock, int64_t ack_timeout_ms, int64_t delete_interval_ms,
               int64_t poll_interval_ms)
        : clock_(clock),
          ack_timeout_ms_(ack_timeout_ms),
          delete_interval_ms_(delete_interval_ms),
          poll_interval_ms_(poll_interval_ms) {}

    int64_t now_ms() const { return clock_.steady_ms(); }

    /// A connect starts: the ack timeout counts from here.
    void connecting() { last_ack_ms_ = last_send_ms_ = now_ms(); }
    /// The broker accepted the connection.
    void connected() { connected_ms_ = now_ms(); }
    void sent_into_empty_window() { last_send_ms_ = now_ms(); }
    void acknowledged() { last_ack_ms_ = now_ms(); }
    /// The first of a batch of acknowledged rows awaits its delete.
    void first_undeleted() { oldest_undeleted_ms_ = now_ms(); }
    void looked() { last_look_ms_ = now_ms(); }

    /// With rows in flight, no acknowledgement (nor a publish into an empty window) for longer
    /// than the ack timeout: the link is taken as stalled.
    bool ack_overdue() const {
        return now_ms() - std::max(last_ack_ms_, last_send_ms_) > ack_timeout_ms_;
    }
    /// Milliseconds until the oldest undeleted acknowledgement is due for its delete (0: now).
    int64_t delete_due_in_ms() const {
        return std::max<int64_t>(delete_interval_ms_ - (now_ms() - oldest_undeleted_ms_), 0);
    }
    bool delete_due() const { return now_ms() - oldest_undeleted_ms_ >= delete_interval_ms_; }
    /// Time to look at the outbox again without a notify().
    bool look_due() const { return now_ms() - last_look_ms_ >= poll_interval_ms_; }
    int64_t since_connected_ms() const { return now_ms() - connected_ms_; }

  private:
    const core::Clock& clock_;
    const int64_t ack_timeout_ms_;
    const int64_t delete_interval_ms_;
    const int64_t poll_interval_ms_;
    int64_t last_ack_ms_ = 0;
    int64_t last_send_ms_ = 0;
    int64_t oldest_undeleted_ms_ = 0;
    int64_t last_look_ms_ = 0;
    int64_t connected_ms_ = 0;
};

}  // namespace tidemark::mqtt
