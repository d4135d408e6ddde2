// The sink's spool: the upstream broker's messages, made durable locally before they are
// acknowledged, until the writer has committed them to PostgreSQL (docs/DECISIONS.md, "The sink
// acknowledges once its spool holds a message").
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "adapters/log/log_writer.h"
#include "adapters/mqtt/ingest.h"
#include "adapters/mqtt/redelivery_filter.h"
#include "core/clock.h"
#include "core/result.h"

namespace tidemark::firmware::sink {

struct SpoolOptions {
    std::string dir;  ///< the spool's segments in DIR/log, its id in DIR/spool-id
    log::FsyncPolicy fsync = log::FsyncPolicy::interval;
    int64_t fsync_interval_ms = 1000;
    uint64_t max_bytes = 256ULL << 20;  ///< spooled and not committed, at most
    uint64_t max_payload_bytes = 256ULL << 10;
};

struct SpoolStats {
    uint64_t appended = 0;              ///< messages appended since start
    uint64_t oversized = 0;             ///< of those, kept cut as a rejection
    uint64_t redeliveries_skipped = 0;  ///< DUP messages that were spooled already
    uint64_t held = 0;                  ///< handler calls answered retry_later (full, or an
                                        ///< append failed)
    uint64_t backlog_bytes = 0;
    uint64_t end_offset = 0;
    uint64_t committed_offset = 0;
    uint64_t disk_bytes = 0;
    uint64_t segments = 0;
    bool append_failing = false;  ///< the latest append failed (disk full, I/O error)
    std::string last_error;       ///< the latest append failure, kept after recovery
};

/// Operation: open() opens (or makes) the spool: a log::LogWriter over DIR/log with the
/// configured fsync policy (the gateway's: `interval` leaves the last interval of acknowledged
/// messages to a power cut, never to a crash), and a random id in DIR/spool-id, which the
/// database's offset row names so that a spool made anew is never read at an old offset. It
/// seeds the redelivery filter from the spool's last messages. handle() is ingest's handler:
/// a redelivered DUP message already spooled is skipped; a payload over max_payload_bytes is
/// spooled cut, as a malformed record with its reason (it becomes a `rejected` row); anything
/// else is appended as it came, with the wall clock as its receive time. Then Paho sends the
/// PUBACK. The writer reads the spool (log::LogReader on dir()), commits, and calls
/// committed(): whole segments below that offset are deleted.
/// Back-pressure: backlog_bytes() (appended, not committed) past max_bytes makes handle()
/// answer retry_later, which holds the message unacknowledged in Paho's callback. The service
/// pauses ingest well before that (pause_wanted()), so the hold is a last resort.
/// Concurrency: handle() on Paho's thread only; sync(), committed(), wait_for_data() and the
/// accessors from any thread (LogWriter's own rules).
/// Limits: the redelivery filter's (mqtt/redelivery_filter.h); disk use is the backlog plus
/// up to one segment (segments go whole).
class Spool {
  public:
    static Result<std::unique_ptr<Spool>> open(const SpoolOptions& options,
                                               const core::Clock& clock);
    ~Spool();
    Spool(const Spool&) = delete;
    Spool& operator=(const Spool&) = delete;

    mqtt::HandleResult handle(const mqtt::IncomingMessage& message);

    const std::string& id() const { return id_; }
    const std::string& log_dir() const { return log_dir_; }
    /// Where the spool ended when it was opened: what the writer may resume at, at most, if
    /// the database's offset is past it (the spool lost its tail; see writer.cpp).
    uint64_t end_offset_at_open() const { return end_offset_at_open_; }
    uint64_t first_offset() const { return writer_->first_offset(); }
    uint64_t end_offset() const { return writer_->end_offset(); }
    uint64_t durable_offset() const { return writer_->durable_offset(); }
    uint64_t backlog_bytes() const;
    /// The backlog is past three quarters of max_bytes: ingest should pause until it is below
    /// half (resume_wanted()).
    bool pause_wanted() const { return backlog_bytes() >= options_.max_bytes / 4 * 3; }
    bool resume_wanted() const { return backlog_bytes() <= options_.max_bytes / 2; }

    /// Everything appended so far is durable (the writer calls it before each commit).
    Result<void> sync();
    /// FsyncPolicy::interval: a sync when `fsync_interval_ms` passed since the last one.
    Result<void> sync_if_due(int64_t now_steady_ms);
    /// The database holds everything below `offset`: segments wholly below it go.
    Result<void> committed(uint64_t offset);
    /// Waits until the spool ends past `offset`, at most `timeout_ms`; whether it does.
    bool wait_for_data(uint64_t offset, int64_t timeout_ms);
    bool poisoned() const { return writer_->poisoned(); }
    std::string poison_error() const { return writer_->poison_error(); }

    SpoolStats stats() const;

  private:
    Spool(SpoolOptions options, const core::Clock& clock);
    Result<void> seed_redelivery_filter();

    const SpoolOptions options_;
    const core::Clock& clock_;
    std::string log_dir_;
    std::string id_;
    std::unique_ptr<log::LogWriter> writer_;
    uint64_t end_offset_at_open_ = 0;
    mqtt::RedeliveryFilter filter_;  // Paho's thread only
    uint64_t connection_seen_ = 0;   // likewise
    std::atomic<uint64_t> committed_{0};
    std::atomic<int64_t> last_sync_steady_ms_{0};

    std::atomic<uint64_t> appended_{0}, oversized_{0}, skipped_{0}, held_{0};
    mutable std::mutex mutex_;  // guards last_error_; wakes wait_for_data
    std::condition_variable grew_;
    std::atomic<bool> waiting_{false};
    std::atomic<bool> failing_{false};
    std::string last_error_;
};

}  // namespace tidemark::firmware::sink
