// What the parts of the LMDB store share and nothing outside adapters/lmdb sees: the names of its
// databases and meta keys, the environment and its transactions (Store::Impl), and the split
// deletes used when the map is full. The bytes of the values are in row_codec.h.
#pragma once

#include <lmdb.h>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "adapters/lmdb/row_codec.h"
#include "adapters/lmdb/store.h"

namespace tidemark::lmdb {

namespace detail {

// Named databases. The count is the env's max_dbs: a new one must be added here and to
// Store::Impl's handles.
inline constexpr const char* db_meta = "meta";
inline constexpr const char* db_state = "state";
inline constexpr const char* db_outbox = "outbox";
// The id index in two generations (outbox.cpp, prune_ids). The second keeps the name it had up
// to format 5, when it mapped seq -> id; open() empties it when it upgrades such a store.
inline constexpr const char* db_outbox_ids = "outbox_ids";
inline constexpr const char* db_outbox_ids_b = "outbox_id_seqs";
inline constexpr const char* db_outbox_windows = "outbox_windows";
inline constexpr const char* db_side = "side";
inline constexpr unsigned named_dbs = 7;

// Keys of the meta database.
inline constexpr std::string_view meta_format_version = "format_version";
inline constexpr std::string_view meta_checkpoint = "checkpoint";
inline constexpr std::string_view meta_outbox_seq_next = "outbox_seq_next";
inline constexpr std::string_view meta_outbox_bytes = "outbox_bytes";
inline constexpr std::string_view meta_outbox_dropped = "outbox_dropped";
inline constexpr std::string_view meta_outbox_duplicates = "outbox_duplicates_skipped";
inline constexpr std::string_view meta_outbox_compacted = "outbox_compacted";
// Which id generation takes new ids (0: outbox_ids, 1: outbox_id_seqs), and the outbox seq_next
// when the other one stopped taking them (every id in it has a lower seq; 0: it is empty).
inline constexpr std::string_view meta_outbox_ids_current = "outbox_ids_current";
inline constexpr std::string_view meta_outbox_ids_older_below = "outbox_ids_older_below";
// Which id generations (bit 0: outbox_ids, bit 1: outbox_id_seqs) may still hold ids keyed as
// up to format 7 (the 8-byte id alone; format 8 keys by window end and id, row_codec.h id_key):
// set by the upgrade, a bit cleared when prune_ids drops that generation. Missing: none.
inline constexpr std::string_view meta_outbox_ids_legacy_slots = "outbox_ids_legacy_slots";
inline constexpr std::string_view meta_side_seq_next = "side_seq_next";
inline constexpr std::string_view meta_side_bytes = "side_bytes";
inline constexpr std::string_view meta_side_dropped = "side_dropped";
inline constexpr std::string_view meta_side_duplicates = "side_duplicates_skipped";
// The position (log offset, ordinal) of the last side record appended; missing in a store that
// never had a positioned one (e.g. written before side dedupe): nothing is skipped then. A new
// meta key, not a new row format: an older tidemark reads the store as before.
inline constexpr std::string_view meta_side_high_water = "side_high_water";

// Seqs start at 1 so that 0 can mean "none" in stats.
inline constexpr uint64_t seq_first = 1;
// A row's cost against outbox_bytes_max / side_bytes_max: its stored value plus its 8-byte key.
inline constexpr uint64_t row_key_bytes = 8;

inline MDB_val val(std::string_view s) {
    return MDB_val{s.size(), const_cast<char*>(s.data())};
}
inline std::string_view view(const MDB_val& v) {
    return std::string_view(static_cast<const char*>(v.mv_data), v.mv_size);
}

}  // namespace detail

/// The environment, its database handles and the transactions every part of the store uses.
/// Every LMDB failure leaves here as a StoreError naming the store (error()).
struct Store::Impl {
    std::string dir;
    MDB_env* env = nullptr;
    MDB_dbi meta = 0, state = 0, outbox = 0, windows = 0, side = 0;
    MDB_dbi ids[2] = {0, 0};  // the id index's two generations (outbox.cpp, prune_ids)
    // The map in pages, and the part of it that writes which add data leave free (see
    // check_reserve). Set by open().
    uint64_t map_pages = 0;
    uint64_t reserve_pages = 0;
    // The outbox_windows key the next outbox_delete sweeps from ("" = the first); a hint, used
    // inside the delete's write transaction only (LMDB serialises those). outbox.cpp says why.
    std::string windows_sweep_from;

    Impl() = default;
    Impl(const Impl&) = delete;
    Impl& operator=(const Impl&) = delete;
    ~Impl();

    // Every LMDB failure becomes a code the runtime can act on and a message naming the store.
    StoreError error(int rc, std::string_view what) const;

    StoreResult<MDB_txn*> begin(bool write, std::string_view what);
    StoreResult<void> commit(MDB_txn* txn, std::string_view what);

    // Runs body in a write txn and commits it; any error aborts it, leaving nothing behind.
    template <typename T, typename Body>
    StoreResult<T> write(std::string_view what, Body&& body) {
        auto txn = begin(true, what);
        if (!txn) return std::unexpected(txn.error());
        StoreResult<T> r = body(*txn);
        if (!r) {
            mdb_txn_abort(*txn);
            return r;
        }
        if (auto c = commit(*txn, what); !c) return std::unexpected(c.error());
        return r;
    }

    // Pages held by the named databases in txn's view, its own writes included. The main
    // database (one page per few hundred databases) and the free list's pages are not counted:
    // the reserve's margin covers them.
    StoreResult<uint64_t> tree_pages(MDB_txn* txn, std::string_view what);

    // A write that grew the databases into the reserve is refused like a full map. LMDB copies
    // every page a write touches, a delete too: in a map with no free page even a one-row delete
    // fails, and the store could never be emptied. So writes that add data stop reserve_pages
    // short of the map, and the deletes (which never grow it) get that space.
    StoreResult<void> check_reserve(MDB_txn* txn, uint64_t pages_before, std::string_view what);

    // write() for the writes that add data (appends, checkpoints): checked against the reserve.
    template <typename T, typename Body>
    StoreResult<T> write_within_reserve(std::string_view what, Body&& body) {
        return write<T>(what, [&](MDB_txn* txn) -> StoreResult<T> {
            auto before = tree_pages(txn, what);
            if (!before) return std::unexpected(before.error());
            StoreResult<T> r = body(txn);
            if (!r) return r;
            if (auto c = check_reserve(txn, *before, what); !c) return std::unexpected(c.error());
            return r;
        });
    }

    template <typename T, typename Body>
    StoreResult<T> read(std::string_view what, Body&& body) {
        auto txn = begin(false, what);
        if (!txn) return std::unexpected(txn.error());
        StoreResult<T> r = body(*txn);
        mdb_txn_abort(*txn);  // a read txn has nothing to commit; abort releases its slot
        return r;
    }

    // Up to limit rows of a seq-keyed database (outbox, side) from from_seq on, in seq order,
    // each decoded by decode(value, seq, row); a row that does not decode is errc::corrupt,
    // named `noun` ("outbox row", "side row").
    template <typename Row, typename Decode>
    StoreResult<std::vector<Row>> peek_rows(MDB_dbi dbi, uint64_t from_seq, size_t limit,
                                            std::string_view what, std::string_view noun,
                                            Decode&& decode) {
        return read<std::vector<Row>>(what, [&](MDB_txn* txn) -> StoreResult<std::vector<Row>> {
            std::vector<Row> out;
            MDB_cursor* cur;
            if (int rc = mdb_cursor_open(txn, dbi, &cur); rc != 0)
                return std::unexpected(error(rc, what));
            const std::string from = detail::u64_key(from_seq);
            MDB_val k = detail::val(from), v;
            int rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
            for (; rc == 0 && out.size() < limit; rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
                const uint64_t seq = detail::u64_of_key(detail::view(k));
                Row row;
                if (!decode(detail::view(v), seq, row)) {
                    mdb_cursor_close(cur);
                    return std::unexpected(
                        StoreError{errc::corrupt, "LMDB store " + dir + ": " + std::string(noun) +
                                                      " " + std::to_string(seq) + " is garbled"});
                }
                out.push_back(std::move(row));
            }
            mdb_cursor_close(cur);
            if (rc != 0 && rc != MDB_NOTFOUND) return std::unexpected(error(rc, what));
            return out;
        });
    }

    // Returns the value, nullopt when missing, or an error.
    StoreResult<std::optional<std::string_view>> get(MDB_txn* txn, MDB_dbi dbi,
                                                     std::string_view key, std::string_view what);
    StoreResult<void> put(MDB_txn* txn, MDB_dbi dbi, std::string_view key, std::string_view value,
                          unsigned flags, std::string_view what);
    // Deleting a missing key is fine: returns false.
    StoreResult<bool> del(MDB_txn* txn, MDB_dbi dbi, std::string_view key, std::string_view what);

    // A meta counter; 0 when missing.
    StoreResult<uint64_t> get_u64(MDB_txn* txn, std::string_view key, std::string_view what);
    // Several meta counters at once, each into its place.
    struct Counter {
        std::string_view key;
        uint64_t* out;
    };
    StoreResult<void> get_u64s(MDB_txn* txn, std::initializer_list<Counter> counters,
                               std::string_view what);
    StoreResult<void> put_u64(MDB_txn* txn, std::string_view key, uint64_t v,
                              std::string_view what);

    // Removes one outbox row and its compaction index entry; returns its byte cost (0 if absent).
    StoreResult<uint64_t> remove_outbox_row(MDB_txn* txn, uint64_t seq, std::string_view what);
    /// The error for an outbox row that does not decode.
    StoreError garbled_outbox_row(uint64_t seq) const;
};

namespace detail {

// LMDB copies every page a write touches and frees the old ones only for later transactions, so
// a full map may lack the pages to delete many rows in one go, and yet have them for fewer.
// On map_full the rows are deleted in halves, each its own transaction, down to one row:
// deleting a row twice is fine, so a failure part way leaves nothing inconsistent. Worst case
// 2 * seqs.size() - 1 transactions, only when the map is full. deleted counts the rows of the
// transactions that committed.
template <typename DeleteTxn>
StoreResult<void> delete_halving_on_map_full(std::span<const uint64_t> seqs,
                                             const DeleteTxn& delete_txn, size_t& deleted) {
    auto r = delete_txn(seqs);
    if (r) deleted += seqs.size();
    if (r || r.error().code != errc::map_full || seqs.size() <= 1) return r;
    const size_t half = seqs.size() / 2;
    if (auto first = delete_halving_on_map_full(seqs.first(half), delete_txn, deleted); !first)
        return first;
    return delete_halving_on_map_full(seqs.subspan(half), delete_txn, deleted);
}

// The error of a delete that was split (see above) and failed after some parts committed.
StoreError partly_done(StoreError e, size_t done, size_t total);

StoreError read_only_error(const std::string& dir);

// The environment of `o.dir`, its flags spelled out in env.cpp (read-only: MDB_RDONLY).
StoreResult<MDB_env*> open_env(const StoreOptions& o, bool read_only, Store::Impl& impl);

// Before the store's environment is opened (store_open.cpp): an existing store is checked
// read-only, a missing one created (or refused read-only). Returns whether it is fresh.
StoreResult<bool> prepare(const StoreOptions& options, Store::Impl& impl);

// After it: the named databases opened (created unless read-only), an older format upgraded,
// the format version and a fresh store's seq counters written.
StoreResult<void> open_databases(Store::Impl& impl, bool read_only, bool fresh);

// After a delete in a map used up to its reserve, one small commit that rewrites `meta_key`
// with its own value, so that the pages the delete freed reach the next write (outbox.cpp says
// why). Nothing in a map with room.
void release_freed_pages(Store::Impl& impl, std::string_view meta_key);

}  // namespace detail

// Opens every writing method: a read-only store refuses the write, and the thread holding a
// CheckpointTxn would wait for itself.
#define TM_WRITABLE()                                                                          \
    do {                                                                                       \
        if (options_.read_only) return std::unexpected(detail::read_only_error(options_.dir)); \
        TM_ASSERT(checkpoint_owner_.load() != std::this_thread::get_id());                     \
    } while (0)

}  // namespace tidemark::lmdb
