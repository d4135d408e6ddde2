// The service's alarms: conditions that last until something clears them, shown in health
// (`alarms`) and in the systemd status line.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "firmware/clock.h"

namespace tidemark::firmware {

/// Operation: the outbox alarm (outbox_full | map_full | disk_full) pauses ingest while it
/// lasts; the checkpoint alarm stays until a checkpoint commits; the append alarm until an
/// append succeeds (it pauses ingest too, and a full disk under the log shows as disk_full
/// beside it); the clock's state is the one refresh_clock() read last. Each change is
/// said once in the journal, not once per attempt.
/// Concurrency: any thread. ingest_paused() and append_succeeded() are lock-free when nothing
/// changed, because the ingest callback calls them for every message.
class Alarms {
  public:
    /// "" clears it. A set outbox alarm pauses ingest (the broker keeps the messages).
    void set_outbox(const std::string& alarm);
    std::string outbox() const;
    bool ingest_paused() const { return paused_.load(); }
    /// "" clears it.
    void set_checkpoint(const std::string& alarm);
    void append_failed(const std::string& message);
    /// Clears the append alarm after a failure; cheap when there was none.
    void append_succeeded();
    /// A log append failed and none has succeeded since: ingest stays paused (the run loop
    /// stops it and tries again when the disk has room).
    bool append_failing() const { return append_alarm_.load(); }
    uint64_t append_errors() const { return append_errors_.load(); }
    void set_clock(const ClockStatus& status);
    /// Whether a log append or the outbox reports a full disk.
    bool disk_full() const;

    struct Snapshot {
        std::vector<std::string> alarms;  // in the order health lists them
        ClockStatus clock;
    };
    Snapshot snapshot() const;

  private:
    mutable std::mutex mutex_;
    std::atomic<bool> paused_{false};
    std::atomic<bool> append_alarm_{false};
    std::atomic<uint64_t> append_errors_{0};
    std::string outbox_;        // under mutex_
    std::string checkpoint_;    // under mutex_
    std::string append_error_;  // under mutex_: the latest log append failure
    ClockStatus clock_;         // under mutex_
};

}  // namespace tidemark::firmware
