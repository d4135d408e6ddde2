// The sink's writer: spooled messages to PostgreSQL, one transaction per batch, with the spool
// offset the batch reaches.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "adapters/codec/upstream_record.h"
#include "adapters/log/log_reader.h"
#include "adapters/postgres/sink_store.h"
#include "core/clock.h"
#include "core/lag_histogram.h"
#include "firmware/sink/spool.h"

namespace tidemark::firmware::sink {

struct WriterOptions {
    postgres::StoreOptions store;
    std::string client_id;  ///< names the offset row: one per sink
    uint64_t batch_rows_max = 1000;
    int64_t batch_delay_ms = 50;
    int64_t reconnect_delay_min_ms = 250;
    int64_t reconnect_delay_max_ms = 10'000;
};

/// What health shows of the writer.
struct WriterStats {
    uint64_t rows_written = 0;  ///< results inserted or replaced
    uint64_t rows_older = 0;    ///< results the revision guard refused (duplicates included)
    uint64_t rejected = 0;
    uint64_t side_rows = 0;
    uint64_t health_rows = 0;   ///< gateways' health rows inserted or replaced by a newer record
    uint64_t health_older = 0;  ///< health records no newer than the row the table had
    uint64_t late_rows = 0;     // too-late tallies inserted or raised
    uint64_t late_older = 0;    // tallies refused: not a higher count
    uint64_t versions_changed = 0, versions_older = 0, versions_removed = 0, views_updated = 0;
    uint64_t records_committed = 0;  ///< spooled messages committed, of every kind
    uint64_t commits = 0;
    uint64_t isolated_commits = 0;  ///< batches PostgreSQL refused, committed message by message
    uint64_t postgres_failures = 0;
    uint64_t postgres_connects = 0;
    bool postgres_up = false;
    std::string postgres_error;              ///< why it is not up; "" while up
    std::string last_postgres_error;         ///< kept after recovery
    std::string resume_problem;              ///< the spool and the database disagreed at a connect
    std::vector<std::string> view_problems;  ///< the latest few
    int schema_version = 0;
    int server_version = 0;
    uint64_t last_batch_records = 0;
    int64_t last_commit_ms = 0;  ///< wall clock of the latest commit; 0: none yet
    int64_t last_commit_duration_ms = 0;
    bool fatal = false;  ///< the spool cannot be synced: the process must restart
    std::string fatal_error;
    /// Receive (the spool's stamp) to commit, and a result's watermark to commit, over the
    /// commits since the previous stats(true).
    core::LagHistogram commit_lag;
    core::LagHistogram watermark_lag;
};

/// Operation: a thread of its own. It connects (postgres::SinkStore::open: connect and
/// migrate), reads the spool offset the database holds for client_id and resumes the spool
/// there (a spool made anew, or one the database is ahead of or behind, is resumed at its own
/// start or end and said so in resume_problem: nothing spooled is skipped). Then, in a loop:
/// read spooled messages (up to batch_rows_max, waiting at most batch_delay_ms once the first is
/// there), parse them (codec::UpstreamParser), reduce them (core::SinkBatchBuilder), make the
/// spool durable up to the batch's end (sync before commit: the database must never point past
/// the durable spool), commit batch and offset in one transaction, then let the spool delete
/// what is committed. The next batch is read and parsed while the database commits this one
/// (SinkStore::start_commit sends a whole transaction in one round trip). PostgreSQL down or
/// refusing: the batch is read again from the spool after a reconnect with backoff
/// (reconnect_delay_*), and the offset read back then settles a commit whose answer was lost. A
/// batch refused for its data goes again message by message (SinkStore::commit_parts): the message
/// at fault ends in `rejected`, the stream goes on. Concurrency: start()/stop() from one owner
/// thread; stats() and heartbeat_steady_ms() from any thread. Limits: one batch in memory
/// (batch_rows_max messages, as spooled); view_problems keeps the last view_problems_max.
class SinkWriter {
  public:
    static constexpr size_t view_problems_max = 8;

    SinkWriter(WriterOptions options, Spool& spool, const core::Clock& clock);
    ~SinkWriter();
    SinkWriter(const SinkWriter&) = delete;
    SinkWriter& operator=(const SinkWriter&) = delete;

    Result<void> start();
    /// Finishes the commit in progress (statement_timeout bounds it) and stops.
    void stop();
    /// `take_lag`: hand over the lag histograms and start new ones.
    WriterStats stats(bool take_lag = false);
    /// Why the writer stopped for good (the spool cannot be synced), or "" while it runs.
    std::string fatal_error() const;
    /// The writer loop's last sign of life (steady clock), for the watchdog.
    int64_t heartbeat_steady_ms() const { return heartbeat_ms_.load(); }

  private:
    struct Pending {
        core::SinkBatch batch;
        uint64_t end_offset = 0;
        std::vector<int64_t> receive_ms;
        std::vector<int64_t> watermark_ms;
    };

    void run();
    bool connect();
    Result<void> read_batch(Pending& out);
    /// The messages in [from, to), one part each, for commit_parts().
    Result<std::vector<core::SinkBatch>> read_parts(uint64_t from, uint64_t to);
    Result<void> start_commit(Pending& pending);
    /// The outcome; a batch refused for its data goes again message by message.
    Result<postgres::CommitOutcome> finish_commit(Pending& pending);
    void record(const Pending& pending, const postgres::CommitOutcome& outcome, int64_t started_ms);
    void disconnected(const Error& error);
    void wait(int64_t ms);             // sliced, until stop()
    int64_t backoff_ms(int failures);  // core::Backoff with jitter from rng_

    const WriterOptions options_;
    Spool& spool_;
    const core::Clock& clock_;
    std::minstd_rand rng_{std::random_device{}()};  // the writer's thread only
    codec::UpstreamParser parser_;
    std::unique_ptr<postgres::SinkStore> store_;
    std::unique_ptr<log::LogReader> reader_;
    uint64_t position_ = 0;       // the first spooled message not committed
    uint64_t attempted_end_ = 0;  // the end of the latest batch sent to commit
    std::thread thread_;
    std::atomic<int64_t> heartbeat_ms_{0};

    static constexpr int64_t rejected_log_interval_ms = 10'000;
    uint64_t rejected_unlogged_ = 0;  // the writer thread's
    int64_t rejected_logged_ms_ = INT64_MIN / 2;

    mutable std::mutex mutex_;  // guards stats_ and stopping_
    std::condition_variable wake_;
    bool stopping_ = false;
    WriterStats stats_;
};

}  // namespace tidemark::firmware::sink
