// Values the LMDB store takes and returns: options, rows, checkpoint meta, stats and errors.
#pragma once

#include <cstdint>
#include <expected>
#include <string>
#include <string_view>

#include "core/result.h"

namespace tidemark::lmdb {

/// Expected failures of the store. The runtime reacts to the code: `map_full` and `disk_full`
/// mean trim (retention, outbox) and then back-pressure ingest; `full` means the outbox is at
/// outbox_bytes_max under when_full = pause_ingest (back-pressure, retry the same batch later);
/// `corrupt` and `version` stop the service with the message; `busy` is transient.
enum class errc {
    map_full,   // MDB_MAP_FULL: the map (storage.map_size) is full; nothing was written
    disk_full,  // ENOSPC / EDQUOT from the file system; nothing was written
    io,         // any other I/O or LMDB error (including MDB_PANIC: restart the process)
    corrupt,    // LMDB reports damage, or the store's meta is missing or garbled
    version,    // a format version (ours or LMDB's) this build does not understand
    busy,       // MDB_READERS_FULL and the like: retry later
    full,       // the outbox is at outbox_bytes_max with when_full = pause_ingest
    invalid,    // a caller error that is not a bug: key too large, write on a read-only store
    not_found,  // read-only open of a directory that holds no store
    callback,   // a for_each_state callback returned an error (its message is kept)
};
std::string_view errc_name(errc code);

/// The code lets the runtime decide; the message names the directory and what to do.
struct StoreError {
    errc code = errc::io;
    std::string message;
};

template <typename T>
using StoreResult = std::expected<T, StoreError>;

/// A StoreError as a plain tidemark::Error, for callers that only report.
inline Error to_error(const StoreError& e) {
    return Error{e.message};
}

enum class WhenFull : uint8_t {
    drop_oldest,   // delete the oldest rows (sent or not) until the batch fits; counted
    pause_ingest,  // refuse the whole batch with errc::full; nothing is dropped
};

struct StoreOptions {
    std::string dir;                              // a directory; created if missing (not read-only)
    uint64_t map_size_bytes = uint64_t{1} << 30;  // storage.map_size: the hard bound of the store
    bool read_only = false;  // tidemark replay/inspect beside a running service
    uint64_t outbox_bytes_max = uint64_t{256} << 20;  // upstream.outbox.max_bytes
    WhenFull outbox_when_full = WhenFull::drop_oldest;
    bool compact_superseded = true;                // upstream.compact_superseded
    uint64_t side_bytes_max = uint64_t{16} << 20;  // side output rows, oldest dropped beyond it
    unsigned readers_max = 32;  // concurrent read transactions over all processes (LMDB slots)
};

/// What a checkpoint records beside the engine's own state (which goes through StateWriter).
struct CheckpointMeta {
    uint64_t log_offset = 0;       // the log is durable up to here; replay resumes from it
    uint64_t outbox_seq_next = 0;  // outbox seq_next when the checkpoint was taken (see prune_ids)
    int64_t checkpoint_ms = 0;     // wall clock of the checkpoint, for health only
    std::string config_fingerprint;  // the config the state was written under
};

enum class OutboxKind : uint8_t { final_result = 0, update = 1, retract = 2 };

/// One result record waiting for the upstream PUBACK.
struct OutboxRow {
    uint64_t seq = 0;  // assigned by outbox_append; ignored on input
    uint64_t id = 0;   // the emission id: unique; a row whose id was seen before is skipped
    std::string pipeline;
    std::string key;
    int64_t window_start_ms = 0;
    int64_t window_end_ms = 0;
    uint32_t revision = 0;    // for a retract: the revision it cancels
    uint8_t kind = 0;         // OutboxKind: 0 final, 1 update, 2 retract
    int64_t enqueued_ms = 0;  // wall clock when appended (health: the oldest row's age); 0 unknown
    std::string payload;      // the JSON record as sent upstream

    bool operator==(const OutboxRow&) const = default;
};

struct AppendResult {
    uint64_t appended = 0;            // rows written (and still present after the batch)
    uint64_t duplicates_skipped = 0;  // rows whose id was already in the outbox index
    uint64_t compacted = 0;           // unsent rows removed because a newer row superseded them
    uint64_t dropped = 0;             // rows removed by when_full = drop_oldest
};

/// Counters are durable (kept in the meta database) and cumulative over the store's life.
struct OutboxStats {
    uint64_t rows = 0;
    uint64_t bytes = 0;              // the bound's measure: encoded row bytes, see outbox_bytes_max
    uint64_t oldest_seq = 0;         // 0 when empty
    int64_t oldest_enqueued_ms = 0;  // the oldest row's enqueued_ms; 0 when empty or unknown
    uint64_t seq_next = 0;
    uint64_t dropped = 0;
    uint64_t duplicates_skipped = 0;
    uint64_t compacted = 0;
};

/// One side output record (a too-late event, an undecodable record) and the log record it came
/// from. After a crash the engine replays the log and produces the same side records at the
/// same positions again: side_append skips those (DESIGN.md section 5, like the outbox's ids).
struct SideRecord {
    uint64_t log_offset = 0;  // offset of the log record that produced it
    uint32_t ordinal = 0;     // its place among the side records of that log record: 0, 1, ...
    std::string record;       // the JSON record as sent upstream

    bool operator==(const SideRecord&) const = default;
};

struct SideRow {
    uint64_t seq = 0;
    std::string record;
};

struct SideAppendResult {
    uint64_t appended = 0;            // records written (and still present after the call)
    uint64_t duplicates_skipped = 0;  // records at or below the high-water position
    uint64_t dropped = 0;             // oldest rows removed to stay within side_bytes_max
};

/// Counters are durable (kept in the meta database) and cumulative over the store's life.
struct SideStats {
    uint64_t rows = 0;
    uint64_t bytes = 0;
    uint64_t dropped = 0;
    uint64_t duplicates_skipped = 0;  // replayed side records not appended again
};

}  // namespace tidemark::lmdb
