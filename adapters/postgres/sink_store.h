// The sink's tables in PostgreSQL: one transaction per batch of upstream records, holding the
// rows and the spool offset they reach (DESIGN.md section 10).
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "adapters/postgres/types.h"
#include "core/result.h"
#include "core/sink_batch.h"

namespace tidemark::postgres {

class Connection;

/// Operation: open() connects and migrates (schema.h). commit() writes one core::SinkBatch and
/// the sink's new SpoolMark in one transaction:
///   - results with one INSERT ... SELECT FROM unnest(...) ON CONFLICT (node, pipeline, version,
///     key, window_start, window_end) DO UPDATE ... WHERE the incoming (revision, retract wins)
///     rank is higher: a duplicate, a redelivery or an older revision changes nothing, and a
///     retract stays as a tombstone row that the views hide. The batch holds each window once
///     (core::SinkBatchBuilder), since one statement may not touch a row twice;
///   - version records in arrival order: a row per (node, pipeline), replaced only by a higher
///     switch_ms, and never by one at or below the switch_ms of a row an empty retained record
///     removed (versions_removed), so that a late redelivery cannot bring a removed pipeline
///     back; an empty retained record deletes the row with its topic. A record whose pipeline
///     would share its view with another pipeline's is rejected. Then each current_<pipeline>
///     view whose versions changed is made again from the versions it now has: one column per
///     aggregate named in any of them, bigint when every version says count, else double
///     precision (CREATE OR REPLACE; DROP and CREATE when a column goes or changes type; a view
///     PostgreSQL will not change is left and reported in view_problems);
///   - side output (repeats skipped by a digest of the record), rejected messages;
///   - gateways' health records (health.upstream): a row per node, replaced only by a record
///     with a later time_ms, so a redelivered or late older one changes nothing;
///   - sink_offsets: the mark, so that a restart resumes the spool exactly there.
/// An error rolls the transaction back and says what to do (types.h, ErrorKind). A batch that
/// PostgreSQL refuses for its data (ErrorKind::refused) goes again through commit_parts(): each
/// part under a savepoint of its own, a part refused rejected with PostgreSQL's message, so one
/// bad value costs its own record and not the stream.
/// Concurrency: one thread. Any number of sinks may write one schema at once: rows are written
/// in window order (no deadlock between two batches), and view changes take an advisory lock.
/// Limits: a batch goes as one statement per table: its size is the caller's (batch.max_rows).
class SinkStore {
  public:
    static Result<std::unique_ptr<SinkStore>> open(const StoreOptions& options);
    ~SinkStore();
    SinkStore(const SinkStore&) = delete;
    SinkStore& operator=(const SinkStore&) = delete;

    /// The spool position committed for `client_id`, if any.
    Result<std::optional<SpoolMark>> read_mark(std::string_view client_id);

    Result<CommitOutcome> commit(const core::SinkBatch& batch, const SpoolMark& mark);
    /// commit() in two halves, so that the caller can prepare its next batch while the database
    /// works: a batch without version records goes as one pipeline (BEGIN, the rows, the offset,
    /// COMMIT: one round trip), whose answers finish_commit() reads; one with version records
    /// (statements that depend on each other's answers) is committed here, and finish_commit()
    /// returns how it went. One commit in flight at a time; `batch` need not outlive the call.
    Result<void> start_commit(const core::SinkBatch& batch, const SpoolMark& mark);
    Result<CommitOutcome> finish_commit();
    /// As commit(), each part under its own savepoint; a part the database refuses for its
    /// data is rolled back and its records go to `rejected` with the reason.
    Result<CommitOutcome> commit_parts(std::span<const core::SinkBatch> parts,
                                       const SpoolMark& mark);

    int schema_version() const { return schema_version_; }
    int server_version() const;
    bool broken() const;

  private:
    SinkStore(std::unique_ptr<Connection> connection, std::string schema, int schema_version);
    // The batch statement by statement, in the open transaction.
    Result<void> write(const core::SinkBatch& batch, CommitOutcome& out);
    // versions.cpp
    Result<void> write_versions(const core::SinkBatch& batch, CommitOutcome& out,
                                std::vector<std::string>& changed_pipelines);
    Result<void> write_rejected(std::span<const core::RejectedMessage> rejected,
                                CommitOutcome& out);
    Result<void> write_mark(const SpoolMark& mark);
    // views.cpp
    Result<void> update_views(const std::vector<std::string>& pipelines, CommitOutcome& out);
    Result<void> update_view(const std::string& pipeline, CommitOutcome& out);
    Result<CommitOutcome> finish(Result<CommitOutcome> outcome);

    // The commit start_commit() began.
    struct InFlight {
        bool pipelined = false;
        Result<CommitOutcome> outcome;  // the statement-by-statement commit's, or partial counts
        uint64_t results = 0;
        uint64_t health = 0;
        uint64_t late = 0;
        // Their place in the pipeline.
        int results_at = -1, side_at = -1, health_at = -1, rejected_at = -1, late_at = -1;
    };
    std::optional<InFlight> in_flight_;
    std::unique_ptr<Connection> connection_;
    std::string schema_;  // as configured
    std::string s_;       // quoted, for statements
    std::string client_;  // the mark's client id, for rejected.sink
    int schema_version_ = 0;
};

}  // namespace tidemark::postgres
