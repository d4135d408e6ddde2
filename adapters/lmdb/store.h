// The LMDB store: window state and checkpoint meta, the outbox and the side output, in one
// environment in StoreOptions::dir (the service passes data_dir/state; DESIGN.md sections 1
// and 5). The one public header of adapters/lmdb: store_internal.h and row_codec.h are its
// private parts, one .cpp per thing stored (env, checkpoint, state, outbox, side; the outbox's
// appends in outbox_append.cpp).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "adapters/lmdb/types.h"
#include "core/engine.h"

namespace tidemark::lmdb {

class CheckpointTxn;

/// Durable state of the appliance.
///
/// Operation: one LMDB environment (a directory: data.mdb + lock.mdb) with the named databases
/// `meta` (format_version, checkpoint, outbox/side seq and counters), `state` (engine state,
/// opaque sortable keys), `outbox` (seq -> row), `outbox_ids` and `outbox_id_seqs` ((window
/// end, id) -> seq, the unique index in two generations, so that prune_ids drops a whole tree),
/// `outbox_windows` (pipeline+version+key+window -> latest seq, written only with
/// compact_superseded, its one reader; and one key for the health row, always; the entries of
/// deleted rows are swept by later deletes, a few consecutive pages per commit) and `side` (seq ->
/// pipeline, key, record; meta keeps the high-water log position of the side records, for their
/// dedupe). Every write is one transaction committed with a full fsync: power loss costs at most
/// the writes not yet returned, never integrity. A failed write leaves nothing behind (the txn is
/// aborted), except that the deletes (outbox_delete, side_delete) split themselves into several
/// transactions when the map is full: a failure may then leave part of them done. open() checks an
/// existing store read-only before anything is written to it: a damaged store or one of an unknown
/// format version is refused and left byte for byte as it was.
///
/// Concurrency: all methods may be called from any thread. LMDB serialises write transactions;
/// reads (for_each_state, stats, side_peek) never block or are blocked by writes. outbox_peek is
/// the exception: it shares a lock with outbox_append's compaction, so it may wait for one
/// outbox_append to commit (one fsync), never for other writers. The thread holding
/// an open CheckpointTxn must not call another writing method before committing or dropping it
/// (it would wait for itself; asserted). Open one Store per directory per process: LMDB's locks
/// are per process and closing a second handle to the same files drops them. Other processes
/// (tidemark replay/inspect) open it read_only at the same time.
///
/// Limits: keys are at most max_key_bytes (511); values up to the map. The outbox is bounded by
/// outbox_bytes_max, the side output by side_bytes_max, the whole store by map_size_bytes:
/// writes that add data (appends, checkpoints) fail with errc::map_full once the databases would
/// reach into a reserve of the map (1/32 of it, 32 to 1024 pages) that only deletes may use, so
/// a full store can always be trimmed: delete rows (outbox, side, ids), then retry. A stale
/// reader (below) can still pin enough freed pages to make even that fail: clear it first.
/// The id index grows with every row appended until prune_ids() is called.
/// Reader slots: readers_max; a slot of a killed reader process stays taken, and pins the pages
/// of its snapshot, until open() or check_stale_readers() clears it.
class Store {
  public:
    /// Opens or creates the store in options.dir. Read-only: the store must exist.
    static StoreResult<std::unique_ptr<Store>> open(const StoreOptions& options);
    ~Store();
    Store(const Store&) = delete;
    Store& operator=(const Store&) = delete;

    /// Reader slots of dead processes cleared by open() and check_stale_readers() since.
    size_t stale_readers_cleared() const { return stale_readers_cleared_.load(); }
    /// Clears the reader slots of dead processes (a killed `tidemark inspect`), whose snapshots
    /// keep LMDB from reusing the pages freed after them, so the map grows; returns how many.
    /// Cheap (a scan of readers_max slots and one fcntl per other process with a slot): call it
    /// every checkpoint. Safe from any thread while others read or write: slots of this process
    /// are never touched.
    StoreResult<size_t> check_stale_readers();

    const std::string& dir() const { return options_.dir; }
    bool read_only() const { return options_.read_only; }
    // 2: outbox rows carry enqueued_ms. 3: side rows carry pipeline and key (rows of older
    // formats are still read). 4: outbox rows may be version records, state may hold two
    // versions of a pipeline. 5: the engine writes window state in its compact encoding
    // (core/engine/state_codec.cpp; it reads the old one, and the first checkpoint after a
    // restore rewrites those records in the new one). 6: the id index is kept in two
    // generations (outbox_id_seqs no longer maps seq -> id; open() empties it). 7: outbox rows
    // name their version, and the compaction index is per (pipeline, version, key, window)
    // (open() empties an older index: its rows are then sent uncompacted, never wrongly).
    // 8: outbox rows may be health records (health.upstream), compacted to the latest one, or
    // too-late tallies (late.report), and state may hold a pipeline's tally record ('L'): a
    // build of format 7 would take them for damage, so it refuses the store instead. And the id
    // index is keyed by (window end, id) (issue 31: keyed by the id, a hash, its inserts dirtied
    // a page each); an older store's ids stay as they are and are looked up by the id too until
    // prune_ids drops their generation. open() writes this version into an older store it opens
    // writable.
    static constexpr uint64_t format_version = 8;
    static constexpr size_t max_key_bytes = 511;  // LMDB's compiled-in MDB_MAXKEYSIZE

    // --- checkpoint and state -------------------------------------------------------------

    /// Starts the checkpoint write transaction (one at a time; waits for other writers).
    StoreResult<std::unique_ptr<CheckpointTxn>> begin_checkpoint();
    /// The last committed checkpoint, or nullopt for a store that never had one.
    StoreResult<std::optional<CheckpointMeta>> load_checkpoint();
    /// Calls fn for every state entry in key order, in one read snapshot; stops at fn's first
    /// error.
    StoreResult<void> for_each_state(
        const std::function<Result<void>(std::string_view key, std::string_view value)>& fn);
    /// One state entry, or nullopt when there is none.
    StoreResult<std::optional<std::string>> get_state(std::string_view key);
    /// Deletes every state entry whose key starts with prefix (one pipeline's state); returns how
    /// many.
    StoreResult<size_t> drop_prefix(std::string_view prefix);

    // --- outbox ---------------------------------------------------------------------------

    /// Appends a batch in one transaction: assigns seqs in order, skips rows whose id was seen,
    /// compacts superseded rows no outbox_peek has returned (compact_superseded), replaces the
    /// health row before a health row (always, sent or not: outbox_health_rows_max), enforces
    /// outbox_bytes_max.
    /// errc::full (pause_ingest) and errc::map_full write nothing: retry the same batch later.
    /// An empty outbox takes any batch, even one larger than outbox_bytes_max (pause_ingest):
    /// the bound is then exceeded by at most one batch, and a large batch cannot wait forever.
    StoreResult<AppendResult> outbox_append(std::span<const OutboxRow> rows);
    /// Up to limit rows with seq >= from_seq, in seq order. Claims them: every row with a seq up
    /// to the last one returned may now be on the wire, and compaction never deletes or rewrites
    /// it (the claim and outbox_append's compaction decision exclude each other). So a caller
    /// that only looks (tests, benchmarks) also stops compaction of what it saw.
    StoreResult<std::vector<OutboxRow>> outbox_peek(uint64_t from_seq, size_t limit);
    /// Deletes rows (on PUBACK); missing seqs are fine. Their ids stay in the index (prune_ids);
    /// their outbox_windows entries (if any) stay until a later delete's sweep (4 entries looked at
    /// per row deleted) removes them: at most about a third of the rows the outbox held stay stale.
    /// In a full map the rows go in smaller transactions (halves, down to one row); an error
    /// (map_full, disk_full) may leave part of them deleted: delete them all again.
    StoreResult<void> outbox_delete(std::span<const uint64_t> seqs);
    /// Forgets ids of rows with seq < below_seq, a generation at a time: new ids go into the
    /// current generation; when every id of the older one is below below_seq, the older one is
    /// dropped whole and the current one becomes the older (twice if the current one is covered
    /// too). Call with the outbox_seq_next of the last committed checkpoint: replay from it can
    /// never regenerate those emissions. An id is forgotten by the first prune_ids at or after
    /// the one that covers every id appended before it; the cost is a tree drop (the pages are
    /// freed, not rewritten), not a delete per id. Returns the number of ids forgotten.
    StoreResult<size_t> prune_ids(uint64_t below_seq);
    /// Claims every row with seq < seq_next (see outbox_peek); claims only move forward. The
    /// forwarder never calls it: outbox_peek claims what it returns (tests set a claim with it).
    /// Starts at the seq_next found at open: rows from before a restart may have reached the
    /// broker.
    void set_claimed(uint64_t seq_next);
    uint64_t claimed_seq_next() const { return claimed_seq_next_.load(); }
    StoreResult<OutboxStats> outbox_stats();

    // --- side output ----------------------------------------------------------------------

    /// Appends records in one transaction; beyond side_bytes_max the oldest are dropped
    /// (counted). A record whose (log_offset, ordinal) is at or below the highest one appended
    /// before (kept in the same transaction) is skipped and counted: the engine replaying the log
    /// after a crash regenerates the same records. So records must come in ascending position,
    /// over calls too. A store written before this had no high-water: nothing is skipped then.
    /// Each record's pipeline and key are stored beside it (side_peek returns them); a row's cost
    /// against side_bytes_max is its record, pipeline and key plus 21 bytes.
    StoreResult<SideAppendResult> side_append(std::span<const SideRecord> records);
    /// Up to limit rows with seq >= from_seq, in seq order. A row whose columns are garbled is
    /// refused as errc::corrupt, like a garbled outbox row.
    StoreResult<std::vector<SideRow>> side_peek(uint64_t from_seq, size_t limit);
    /// Deletes rows; missing seqs are fine. In a full map, smaller transactions as outbox_delete.
    StoreResult<void> side_delete(std::span<const uint64_t> seqs);
    StoreResult<SideStats> side_stats();

    // --- health ---------------------------------------------------------------------------

    /// Bytes of the map in use (high-water mark of pages; freed pages are reused before it grows).
    StoreResult<uint64_t> map_used_bytes();
    uint64_t map_size_bytes() const;

    struct Impl;

  private:
    explicit Store(StoreOptions options);
    friend class CheckpointTxn;

    StoreOptions options_;
    std::unique_ptr<Impl> impl_;
    std::atomic<size_t> stale_readers_cleared_{0};
    // Held by outbox_peek from its snapshot to its claim, and by outbox_append from reading the
    // claim to its commit: a row a peek returned can never be compacted.
    std::mutex claim_mutex_;
    std::atomic<uint64_t> claimed_seq_next_{0};
    std::atomic<std::thread::id> checkpoint_owner_{};
};

/// One checkpoint: the engine writes its changed state through put/erase, then commit() records
/// the meta and commits everything in one fully synced transaction.
///
/// Operation: errors are latched: after the first failed put/erase the txn is poisoned, further
/// calls do nothing and commit() returns that first error. Erasing a missing key is fine.
/// Destroying the txn without a successful commit aborts it: the previous checkpoint stays.
/// Concurrency: use it from the thread that began it; it holds the store's write lock until
/// commit or destruction.
class CheckpointTxn final : public core::StateWriter {
  public:
    ~CheckpointTxn() override;
    CheckpointTxn(const CheckpointTxn&) = delete;
    CheckpointTxn& operator=(const CheckpointTxn&) = delete;

    void put(std::string_view key, std::string_view value) override;
    void erase(std::string_view key) override;
    /// Erases every state entry whose key starts with `prefix` (a version's state going).
    void erase_prefix(std::string_view prefix);
    /// Renames every state entry under `from` to start with `to` instead, overwriting what is
    /// there (a backfilled version taking over its pipeline's live name). Costs one delete and
    /// one put per entry, in this transaction.
    void rename_prefix(std::string_view from, std::string_view to);
    /// Writes meta and commits. meta.outbox_seq_next must not exceed the outbox's seq_next.
    StoreResult<void> commit(const CheckpointMeta& meta);
    /// The first error, if poisoned.
    const std::optional<StoreError>& error() const { return error_; }
    uint64_t puts() const { return puts_; }
    uint64_t erases() const { return erases_; }

  private:
    friend class Store;
    CheckpointTxn(Store& store, void* txn);
    void abort();

    Store& store_;
    void* txn_;  // MDB_txn*, kept opaque so this header stays free of lmdb.h
    std::optional<StoreError> error_;
    uint64_t tree_pages_before_ = 0;  // for the map reserve: a checkpoint may not grow into it
    uint64_t puts_ = 0;
    uint64_t erases_ = 0;
};

}  // namespace tidemark::lmdb
