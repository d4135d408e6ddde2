// One transaction's worth of upstream records for the sink, reduced the way the table's upsert
// would reduce them, so that one INSERT ... ON CONFLICT touches each window at most once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "core/upstream_record.h"

namespace tidemark::core {

/// A message the sink refused, with what is needed to find it again.
struct RejectedMessage {
    std::string topic;
    std::string payload;
    std::string reason;
    int64_t receive_ms = 0;
    uint64_t spool_offset = 0;
};

/// A version record or a removal, in arrival order (a removal and a re-add in one batch must
/// stay in that order).
using VersionChange = std::variant<ReceivedVersion, VersionRemoved>;

/// What one transaction writes.
struct SinkBatch {
    /// One per window identity, the highest-ranked of the batch (outranks(); the first of equal
    /// ranks), ordered by compare_window: two sinks lock rows in the same order, so their
    /// transactions cannot deadlock on each other.
    std::vector<ReceivedResult> results;
    std::vector<VersionChange> version_changes;
    /// Too-late tallies, one per tally identity (compare_tally), the highest count of the
    /// batch, in compare_tally order (the same locking order for every sink).
    std::vector<ReceivedLate> late;
    std::vector<ReceivedSide> side;
    /// One per node, the newest of the batch (highest time_ms; the first of equal times), ordered
    /// by node, as results are ordered by window.
    std::vector<ReceivedHealth> health;
    std::vector<RejectedMessage> rejected;
    /// Results dropped by the reduction: a record of the same batch outranked them, or equalled
    /// them first (a duplicate). The table would have refused them too: counted as rows_older.
    uint64_t results_superseded = 0;
    /// Health records dropped by the reduction: a newer one of the same node was in the batch.
    uint64_t health_superseded = 0;
    uint64_t records = 0;  ///< messages that went into the batch, of every kind
    /// Only for a part of postgres::SinkStore::commit_parts (one message, usually): the
    /// messages themselves (reason empty), rejected with the database's reason if it refuses
    /// the part.
    std::vector<RejectedMessage> sources;

    bool empty() const { return records == 0; }
};

/// Builds a SinkBatch record by record.
///
/// Operation: add() files each record by kind; take() reduces the results (a stable sort by
/// window identity, then by rank, keeping the best of each window) and hands the batch over,
/// leaving the builder empty.
/// Concurrency: one thread.
/// Limits: holds what it is given until take(): the caller bounds a batch (records_max of its
/// own, e.g. the sink's batch.max_rows). take() costs O(n log n) in the results it holds.
class SinkBatchBuilder {
  public:
    /// `topic` and `payload` are kept only when the record is a Refusal.
    void add(UpstreamRecord record, std::string_view topic, std::string_view payload,
             int64_t receive_ms, uint64_t spool_offset);
    std::size_t records() const { return batch_.records; }
    SinkBatch take();

  private:
    SinkBatch batch_;
};

}  // namespace tidemark::core
