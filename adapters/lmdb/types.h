// Values the LMDB store takes and returns: options, rows, checkpoint meta, stats and errors.
#pragma once

#include <cstdint>
#include <expected>
#include <string>
#include <string_view>
#include <utility>

#include "core/emission.h"
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
    corrupt,    // LMDB reports damage, or the store's meta or one of its rows is garbled
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
    bool compact_superseded = false;               // upstream.compact_superseded (its default)
    uint64_t side_bytes_max = uint64_t{16} << 20;  // side output rows, oldest dropped beyond it
    unsigned readers_max = 32;  // concurrent read transactions over all processes (LMDB slots)
};

/// What a checkpoint records beside the engine's own state (which goes through StateWriter).
struct CheckpointMeta {
    uint64_t log_offset = 0;       // the log is durable up to here; replay resumes from it
    uint64_t outbox_seq_next = 0;  // outbox seq_next when the checkpoint was taken (see prune_ids)
    int64_t checkpoint_ms = 0;     // wall clock of the checkpoint, for health only
    // The node_id of the config that wrote it: a label for people reading the store. Nothing
    // reads it back to decide anything (stored where older builds stored "config_fingerprint",
    // which held the node_id too: the bytes are the same).
    std::string node_id;
};

/// One result record waiting for the upstream PUBACK.
struct OutboxRow {
    uint64_t seq = 0;  // assigned by outbox_append; ignored on input
    uint64_t id = 0;   // the emission id: unique; a row whose id was seen before is skipped
    std::string pipeline;
    // The version that produced it (DESIGN.md section 4): rows of two versions of a pipeline
    // share the outbox during a backfill, and compaction never lets one replace or cancel the
    // other's. Empty for version records and for rows stored before format 7.
    std::string version;
    std::string key;
    int64_t window_start_ms = 0;
    int64_t window_end_ms = 0;
    uint32_t revision = 0;  // for a retract: the revision it cancels
    core::EmissionKind kind = core::EmissionKind::final_result;
    int64_t enqueued_ms = 0;  // wall clock when appended (health: the oldest row's age); 0 unknown
    std::string payload;      // the JSON record as sent upstream
    // An update whose previous revision was retracted just before it (corrections: retract):
    // a consumer holds nothing of the window from the rows before it, so a retract of it may
    // cancel it unsent. Without it (upsert), the consumer may hold an earlier revision that
    // only the retract withdraws, and the retract must travel.
    bool after_retract = false;
    // A pipeline's version record (DESIGN.md section 4), not a result: sent retained on the
    // results topic + "/version" after every row before it; never compacted. Key and window
    // are empty; kind is final_result.
    bool version_record = false;
    // The gateway's own health record (health.upstream, since format 8), not a result: sent
    // retained on the health topic. Latest only: appending one replaces the health row before
    // it, sent or not (outbox_health_rows_max). Pipeline, key and window are empty; kind is
    // final_result.
    bool health_record = false;
    // A window's too-late tally (core::LateReport), not a result: sent on the results topic +
    // "/late". Key empty, kind final_result, revision its count (capped at UINT32_MAX), so an
    // unsent tally is compacted by the next tally of the same window (window_key adds
    // late_since_ms: one tally never replaces another, nor a result).
    bool late_record = false;
    int64_t late_since_ms = 0;

    bool operator==(const OutboxRow&) const = default;
};

/// The most health rows (OutboxRow::health_record) the outbox holds at once: appending one
/// replaces the one before it whether or not a peek has returned it. A superseded health record
/// that is already on the wire is harmless: the newer one follows it in seq order (the retained
/// topic ends at the newest), and the sink keeps the newest by its time. So an outage of any
/// length queues one health record, the latest, never one per interval.
inline constexpr uint64_t outbox_health_rows_max = 1;

struct AppendResult {
    uint64_t appended = 0;            // rows written (and still present after the batch)
    uint64_t duplicates_skipped = 0;  // rows whose id was already in the outbox index
    uint64_t compacted = 0;           // rows removed because a newer row superseded them (unsent
                                      // ones; a health row sent or not)
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
    uint64_t health_rows = 0;  // health records waiting (at most outbox_health_rows_max)
};

/// One side output record (a too-late event, an undecodable record) and the log record it came
/// from. After a crash the engine replays the log and produces the same side records at the
/// same positions again: side_append skips those (DESIGN.md section 5, like the outbox's ids).
/// Pipeline and key are stored as columns beside the record, as the outbox stores them, so the
/// forwarder routes a row without parsing its JSON.
struct SideRecord {
    uint64_t log_offset = 0;  // offset of the log record that produced it
    uint32_t ordinal = 0;     // its place among the side records of that log record: 0, 1, ...
    std::string record;       // the JSON record as sent upstream
    std::string pipeline;     // the pipeline it was produced for
    std::string key;          // its key; empty when it has none (an undecodable record)

    SideRecord() = default;
    SideRecord(uint64_t log_offset_in, uint32_t ordinal_in, std::string record_in,
               std::string pipeline_in, std::string key_in)
        : log_offset(log_offset_in),
          ordinal(ordinal_in),
          record(std::move(record_in)),
          pipeline(std::move(pipeline_in)),
          key(std::move(key_in)) {}
    bool operator==(const SideRecord&) const = default;
};

struct SideRow {
    uint64_t seq = 0;
    std::string record;
    std::string pipeline;  // the columns as appended; empty when columns_known is false
    std::string key;
    // False for a row stored without columns (written by format 2 or older): take pipeline and
    // key from the record.
    bool columns_known = false;

    bool operator==(const SideRow&) const = default;
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
