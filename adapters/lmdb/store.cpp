#include "adapters/lmdb/store.h"

#include <lmdb.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <system_error>
#include <utility>

#include "adapters/crash/crash_point.h"
#include "core/bytes.h"

namespace tidemark::lmdb {

namespace bytes = core::bytes;
using crash::crash_point;
using crash::CrashPoint;

std::string_view errc_name(errc code) {
    switch (code) {
        case errc::map_full:
            return "map_full";
        case errc::disk_full:
            return "disk_full";
        case errc::io:
            return "io";
        case errc::corrupt:
            return "corrupt";
        case errc::version:
            return "version";
        case errc::busy:
            return "busy";
        case errc::full:
            return "full";
        case errc::invalid:
            return "invalid";
        case errc::not_found:
            return "not_found";
        case errc::callback:
            return "callback";
    }
    return "unknown";
}

namespace {

// Named databases. The count is the env's max_dbs: a new one must be added here.
constexpr const char* db_meta = "meta";
constexpr const char* db_state = "state";
constexpr const char* db_outbox = "outbox";
constexpr const char* db_outbox_ids = "outbox_ids";
constexpr const char* db_outbox_id_seqs = "outbox_id_seqs";
constexpr const char* db_outbox_windows = "outbox_windows";
constexpr const char* db_side = "side";
constexpr unsigned named_dbs = 7;

// Keys of the meta database.
constexpr std::string_view meta_format_version = "format_version";
constexpr std::string_view meta_checkpoint = "checkpoint";
constexpr std::string_view meta_outbox_seq_next = "outbox_seq_next";
constexpr std::string_view meta_outbox_bytes = "outbox_bytes";
constexpr std::string_view meta_outbox_dropped = "outbox_dropped";
constexpr std::string_view meta_outbox_duplicates = "outbox_duplicates_skipped";
constexpr std::string_view meta_outbox_compacted = "outbox_compacted";
constexpr std::string_view meta_side_seq_next = "side_seq_next";
constexpr std::string_view meta_side_bytes = "side_bytes";
constexpr std::string_view meta_side_dropped = "side_dropped";
constexpr std::string_view meta_side_duplicates = "side_duplicates_skipped";
// The position (log offset, ordinal) of the last side record appended; missing in a store that
// never had a positioned one (e.g. written before side dedupe): nothing is skipped then. A new
// meta key, not a new row format: an older tidemark reads the store as before.
constexpr std::string_view meta_side_high_water = "side_high_water";

constexpr uint8_t checkpoint_encoding = 1;
// Seqs start at 1 so that 0 can mean "none" in stats.
constexpr uint64_t seq_first = 1;
// A row's cost against outbox_bytes_max / side_bytes_max: its stored value plus its 8-byte key.
constexpr uint64_t row_key_bytes = 8;
// The map's part that only deletes may fill (Impl::check_reserve): 1/32 of it, at least 32 pages
// (a one-row delete copies ~12: the paths in outbox, outbox_windows, meta, the free list; the
// pages it frees come back two transactions later) and at most 1024 (4 MiB of 4 KiB pages).
constexpr uint64_t map_reserve_divisor = 32;
constexpr uint64_t map_reserve_pages_min = 32;
constexpr uint64_t map_reserve_pages_max = 1024;

MDB_val val(std::string_view s) {
    return MDB_val{s.size(), const_cast<char*>(s.data())};
}
std::string_view view(const MDB_val& v) {
    return std::string_view(static_cast<const char*>(v.mv_data), v.mv_size);
}

// Big-endian, so that LMDB's byte order is numeric order (seq keys, id keys).
std::string be64(uint64_t v) {
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i)
        out[i] = static_cast<char>(v >> (8 * (7 - i)));
    return out;
}
uint64_t from_be64(std::string_view s) {
    TM_ASSERT(s.size() == 8);
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i)
        v = (v << 8) | static_cast<unsigned char>(s[i]);
    return v;
}
std::string le64(uint64_t v) {
    std::string out;
    bytes::put_u64(out, v);
    return out;
}

std::string encode_row(const OutboxRow& row) {
    std::string out;
    out.reserve(40 + row.pipeline.size() + row.key.size() + row.payload.size());
    bytes::put_u64(out, row.id);
    bytes::put_str(out, row.pipeline);
    bytes::put_str(out, row.key);
    bytes::put_i64(out, row.window_start_ms);
    bytes::put_i64(out, row.window_end_ms);
    bytes::put_u32(out, row.revision);
    bytes::put_u32(out, row.kind);
    bytes::put_str(out, row.payload);
    bytes::put_i64(out, row.enqueued_ms);  // format version 2
    return out;
}

bool get_str(std::string_view& in, std::string& out) {
    uint32_t n;
    if (!bytes::get_u32(in, n) || in.size() < n) return false;
    out.assign(in.data(), n);
    in.remove_prefix(n);
    return true;
}

bool decode_row(std::string_view in, uint64_t seq, OutboxRow& row) {
    uint32_t kind = 0;
    row.seq = seq;
    bool ok = bytes::get_u64(in, row.id) && get_str(in, row.pipeline) && get_str(in, row.key) &&
              bytes::get_i64(in, row.window_start_ms) && bytes::get_i64(in, row.window_end_ms) &&
              bytes::get_u32(in, row.revision) && bytes::get_u32(in, kind) &&
              get_str(in, row.payload) && kind <= 2;
    row.kind = static_cast<uint8_t>(kind);
    row.enqueued_ms = 0;  // a row written by format version 1: unknown
    if (ok && !in.empty()) ok = bytes::get_i64(in, row.enqueued_ms);
    return ok && in.empty();
}

// The compaction index key; nullopt when it would exceed LMDB's key limit (no compaction then).
std::optional<std::string> window_key(const OutboxRow& row) {
    std::string k;
    bytes::put_str(k, row.pipeline);
    bytes::put_str(k, row.key);
    bytes::put_i64_sortable(k, row.window_start_ms);
    bytes::put_i64_sortable(k, row.window_end_ms);
    if (k.size() > Store::max_key_bytes) return std::nullopt;
    return k;
}

std::string encode_checkpoint(const CheckpointMeta& m) {
    std::string out;
    out.push_back(static_cast<char>(checkpoint_encoding));
    bytes::put_u64(out, m.log_offset);
    bytes::put_u64(out, m.outbox_seq_next);
    bytes::put_i64(out, m.checkpoint_ms);
    bytes::put_str(out, m.config_fingerprint);
    return out;
}

struct SidePosition {
    uint64_t log_offset = 0;
    uint32_t ordinal = 0;
    auto operator<=>(const SidePosition&) const = default;
};

std::string encode_side_position(SidePosition p) {
    std::string out;
    bytes::put_u64(out, p.log_offset);
    bytes::put_u32(out, p.ordinal);
    return out;
}

bool decode_side_position(std::string_view in, SidePosition& p) {
    return bytes::get_u64(in, p.log_offset) && bytes::get_u32(in, p.ordinal) && in.empty();
}

bool decode_checkpoint(std::string_view in, CheckpointMeta& m) {
    if (in.empty() || static_cast<uint8_t>(in[0]) != checkpoint_encoding) return false;
    in.remove_prefix(1);
    return bytes::get_u64(in, m.log_offset) && bytes::get_u64(in, m.outbox_seq_next) &&
           bytes::get_i64(in, m.checkpoint_ms) && get_str(in, m.config_fingerprint) && in.empty();
}

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
StoreError partly_done(StoreError e, size_t done, size_t total) {
    if (done > 0)
        e.message += " (" + std::to_string(done) + " of the " + std::to_string(total) +
                     " were done in smaller transactions first; doing them all again is fine)";
    return e;
}
}  // namespace

struct Store::Impl {
    std::string dir;
    MDB_env* env = nullptr;
    MDB_dbi meta = 0, state = 0, outbox = 0, ids = 0, id_seqs = 0, windows = 0, side = 0;
    // The map in pages, and the part of it that writes which add data leave free (see
    // write_within_reserve). Set by open().
    uint64_t map_pages = 0;
    uint64_t reserve_pages = 0;

    ~Impl() {
        if (env != nullptr) mdb_env_close(env);
    }

    // Every LMDB failure becomes a code the runtime can act on and a message naming the store.
    StoreError error(int rc, std::string_view what) const {
        std::string m = "LMDB store " + dir + ": " + std::string(what) + ": ";
        switch (rc) {
            case MDB_MAP_FULL:
                return {errc::map_full,
                        m + "the map is full (storage.map_size); nothing was written. Let the "
                            "outbox drain or trim it, or raise storage.map_size"};
            case ENOSPC:
            case EDQUOT:
                return {errc::disk_full, m + "the disk is full (" + mdb_strerror(rc) +
                                             "); nothing was written. Free space on the volume"};
            case MDB_INVALID:
            case MDB_CORRUPTED:
            case MDB_PAGE_NOTFOUND:
            case MDB_INCOMPATIBLE:
                return {
                    errc::corrupt,
                    m + mdb_strerror(rc) +
                        ". The store is damaged; it was left untouched. Move the directory "
                        "aside (state and outbox are rebuilt from the log) or restore a backup"};
            case MDB_VERSION_MISMATCH:
                return {errc::version, m + mdb_strerror(rc) +
                                           ". It was written by another LMDB version; it was "
                                           "left untouched. Use the matching tidemark build"};
            case MDB_READERS_FULL:
            case EBUSY:
            case EAGAIN:
                return {errc::busy, m + mdb_strerror(rc) + "; retry later"};
            case MDB_PANIC:
                return {errc::io, m + mdb_strerror(rc) +
                                      "; an earlier write failed fatally: restart the process"};
            default:
                return {errc::io, m + mdb_strerror(rc)};
        }
    }

    StoreResult<MDB_txn*> begin(bool write, std::string_view what) {
        MDB_txn* txn = nullptr;
        // Read txns take MDB_RDONLY (a snapshot; never blocks the writer). Write txns take 0:
        // no MDB_NOSYNC / MDB_NOMETASYNC override, so their commit is fully synced.
        unsigned flags = write ? 0u : static_cast<unsigned>(MDB_RDONLY);
        int rc = mdb_txn_begin(env, nullptr, flags, &txn);
        if (rc != 0) return std::unexpected(error(rc, what));
        return txn;
    }

    StoreResult<void> commit(MDB_txn* txn, std::string_view what) {
        // mdb_txn_commit frees the txn whether or not it succeeds: a failed commit wrote nothing
        // visible (the meta page is written last).
        int rc = mdb_txn_commit(txn);
        if (rc != 0) return std::unexpected(error(rc, what));
        return {};
    }

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
    StoreResult<uint64_t> tree_pages(MDB_txn* txn, std::string_view what) {
        uint64_t pages = 0;
        for (MDB_dbi dbi : {meta, state, outbox, ids, id_seqs, windows, side}) {
            MDB_stat st;
            if (int rc = mdb_stat(txn, dbi, &st); rc != 0) return std::unexpected(error(rc, what));
            pages += st.ms_branch_pages + st.ms_leaf_pages + st.ms_overflow_pages;
        }
        return pages;
    }

    // A write that grew the databases into the reserve is refused like a full map. LMDB copies
    // every page a write touches, a delete too: in a map with no free page even a one-row delete
    // fails, and the store could never be emptied. So writes that add data stop reserve_pages
    // short of the map, and the deletes (which never grow it) get that space.
    StoreResult<void> check_reserve(MDB_txn* txn, uint64_t pages_before, std::string_view what) {
        auto pages = tree_pages(txn, what);
        if (!pages) return std::unexpected(pages.error());
        if (*pages <= pages_before || *pages + reserve_pages <= map_pages) return {};
        StoreError e = error(MDB_MAP_FULL, what);
        e.message += " (" + std::to_string(reserve_pages) + " of its " + std::to_string(map_pages) +
                     " pages stay free for deletes)";
        return std::unexpected(std::move(e));
    }

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

    // Returns the value, nullopt when missing, or an error.
    StoreResult<std::optional<std::string_view>> get(MDB_txn* txn, MDB_dbi dbi,
                                                     std::string_view key, std::string_view what) {
        MDB_val k = val(key), v{};
        int rc = mdb_get(txn, dbi, &k, &v);
        if (rc == MDB_NOTFOUND) return std::optional<std::string_view>{};
        if (rc != 0) return std::unexpected(error(rc, what));
        return std::optional<std::string_view>{view(v)};
    }

    StoreResult<void> put(MDB_txn* txn, MDB_dbi dbi, std::string_view key, std::string_view value,
                          unsigned flags, std::string_view what) {
        MDB_val k = val(key), v = val(value);
        int rc = mdb_put(txn, dbi, &k, &v, flags);
        if (rc != 0) return std::unexpected(error(rc, what));
        return {};
    }

    // Deleting a missing key is fine: returns false.
    StoreResult<bool> del(MDB_txn* txn, MDB_dbi dbi, std::string_view key, std::string_view what) {
        MDB_val k = val(key);
        int rc = mdb_del(txn, dbi, &k, nullptr);
        if (rc == MDB_NOTFOUND) return false;
        if (rc != 0) return std::unexpected(error(rc, what));
        return true;
    }

    StoreResult<uint64_t> get_u64(MDB_txn* txn, std::string_view key, std::string_view what) {
        auto v = get(txn, meta, key, what);
        if (!v) return std::unexpected(v.error());
        if (!*v) return uint64_t{0};
        std::string_view in = **v;
        uint64_t out = 0;
        if (in.size() != 8 || !bytes::get_u64(in, out))
            return std::unexpected(StoreError{
                errc::corrupt, "LMDB store " + dir + ": meta entry '" + std::string(key) +
                                   "' is garbled (" + std::to_string((**v).size()) +
                                   " bytes, expected 8). Move the directory aside"});
        return out;
    }

    StoreResult<void> put_u64(MDB_txn* txn, std::string_view key, uint64_t v,
                              std::string_view what) {
        return put(txn, meta, key, le64(v), 0, what);
    }

    // Removes one outbox row and its compaction index entry; returns its byte cost (0 if absent).
    StoreResult<uint64_t> remove_outbox_row(MDB_txn* txn, uint64_t seq, std::string_view what) {
        std::string k = be64(seq);
        auto v = get(txn, outbox, k, what);
        if (!v) return std::unexpected(v.error());
        if (!*v) return uint64_t{0};
        uint64_t cost = (**v).size() + row_key_bytes;
        OutboxRow row;
        if (!decode_row(**v, seq, row))
            return std::unexpected(StoreError{
                errc::corrupt, "LMDB store " + dir + ": outbox row " + std::to_string(seq) +
                                   " is garbled. Move the directory aside"});
        if (auto wk = window_key(row)) {
            auto w = get(txn, windows, *wk, what);
            if (!w) return std::unexpected(w.error());
            if (*w && (**w).size() == 8 && from_be64(**w) == seq) {
                if (auto d = del(txn, windows, *wk, what); !d) return std::unexpected(d.error());
            }
        }
        if (auto d = del(txn, outbox, k, what); !d) return std::unexpected(d.error());
        return cost;
    }
};

namespace {

// Environment flags, each spelled out: the durability of the whole appliance rests on them.
unsigned env_flags(bool read_only) {
    unsigned flags = 0;
    // MDB_NOSUBDIR off: the store is a directory holding data.mdb and lock.mdb.
    // MDB_NOSYNC off: every commit fsyncs its pages, so a returned commit survives power loss.
    // MDB_NOMETASYNC off: the meta page is fsynced too, so the last commit is never lost.
    // MDB_WRITEMAP off: pages are written with pwrite(), not through a writable map, so a stray
    //   write in this process cannot reach the file and writes stay ordered (LMDB's caveat).
    // MDB_MAPASYNC off: only meaningful with WRITEMAP; never asynchronous flushes.
    // MDB_NOLOCK off: the lock file coordinates the service with replay/inspect processes.
    // MDB_NORDAHEAD off: default readahead; restore reads the state sequentially.
    // MDB_NOMEMINIT off: unused bytes of written pages are zeroed, no stale heap reaches disk.
    // MDB_NOTLS on: a read txn's reader slot belongs to the txn, not the thread, so runtime
    //   threads that come and go cannot pin slots. No effect on durability.
    flags |= MDB_NOTLS;
    // MDB_RDONLY for replay/inspect: this process can never write the files.
    if (read_only) flags |= MDB_RDONLY;
    return flags;
}

StoreResult<MDB_env*> open_env(const StoreOptions& o, bool read_only, Store::Impl& impl) {
    MDB_env* env = nullptr;
    int rc = mdb_env_create(&env);
    if (rc != 0) return std::unexpected(impl.error(rc, "creating the environment"));
    auto fail_env = [&](int code, std::string_view what) {
        mdb_env_close(env);
        return std::unexpected(impl.error(code, what));
    };
    if ((rc = mdb_env_set_maxdbs(env, named_dbs)) != 0) return fail_env(rc, "setting max_dbs");
    if ((rc = mdb_env_set_maxreaders(env, o.readers_max)) != 0)
        return fail_env(rc, "setting max_readers");
    if ((rc = mdb_env_set_mapsize(env, o.map_size_bytes)) != 0)
        return fail_env(rc, "setting the map size (storage.map_size)");
    if ((rc = mdb_env_open(env, o.dir.c_str(), env_flags(read_only), 0640)) != 0)
        return fail_env(rc, "opening");
    return env;
}

}  // namespace

Store::Store(StoreOptions options) : options_(std::move(options)), impl_(std::make_unique<Impl>()) {
    impl_->dir = options_.dir;
}

Store::~Store() = default;

namespace {

// Checks an existing store without writing to it. Returns true when it holds no database at
// all (created, but its initialising txn never committed): it is then initialised like a new one.
StoreResult<bool> check_existing(Store::Impl& impl) {
    auto checked = impl.read<bool>("checking the format", [&](MDB_txn* txn) -> StoreResult<bool> {
        MDB_dbi main_dbi;
        int rc = mdb_dbi_open(txn, nullptr, 0, &main_dbi);
        if (rc != 0) return std::unexpected(impl.error(rc, "opening the main database"));
        MDB_stat main_stat;
        if ((rc = mdb_stat(txn, main_dbi, &main_stat)) != 0)
            return std::unexpected(impl.error(rc, "reading the main database"));
        if (main_stat.ms_entries == 0) return true;
        MDB_dbi meta;
        rc = mdb_dbi_open(txn, db_meta, 0, &meta);
        if (rc == MDB_NOTFOUND)
            return std::unexpected(StoreError{
                errc::corrupt, "LMDB store " + impl.dir +
                                   ": holds LMDB data but no tidemark 'meta' database: "
                                   "not a tidemark store, or damaged. It was left "
                                   "untouched; point data_dir elsewhere or move it aside"});
        if (rc != 0) return std::unexpected(impl.error(rc, "opening the meta database"));
        impl.meta = meta;
        auto version = impl.get(txn, meta, meta_format_version, "reading format_version");
        if (!version) return std::unexpected(version.error());
        std::string_view v = version->value_or(std::string_view{});
        uint64_t n = 0;
        if (v.size() != 8 || !bytes::get_u64(v, n) || n == 0)
            return std::unexpected(StoreError{
                errc::corrupt, "LMDB store " + impl.dir +
                                   ": format_version is missing or garbled: the store is damaged. "
                                   "It was left untouched; move the directory aside (state and "
                                   "outbox are rebuilt from the log) or restore a backup"});
        if (n > Store::format_version)
            return std::unexpected(StoreError{
                errc::version, "LMDB store " + impl.dir + ": format version " + std::to_string(n) +
                                   " was written by a newer tidemark (this build reads version " +
                                   std::to_string(Store::format_version) +
                                   "). It was left untouched; run the newer tidemark or move the "
                                   "directory aside"});
        // Every database must be there, and its first and last pages readable.
        for (const char* name : {db_meta, db_state, db_outbox, db_outbox_ids, db_outbox_id_seqs,
                                 db_outbox_windows, db_side}) {
            MDB_dbi dbi;
            rc = mdb_dbi_open(txn, name, 0, &dbi);
            if (rc == MDB_NOTFOUND)
                return std::unexpected(StoreError{
                    errc::corrupt, "LMDB store " + impl.dir + ": the '" + name +
                                       "' database is missing: the store is damaged. It was left "
                                       "untouched; move the directory aside or restore a backup"});
            if (rc != 0) return std::unexpected(impl.error(rc, std::string("opening ") + name));
            MDB_cursor* cur;
            if ((rc = mdb_cursor_open(txn, dbi, &cur)) != 0)
                return std::unexpected(impl.error(rc, std::string("reading ") + name));
            MDB_val k, d;
            for (MDB_cursor_op op : {MDB_FIRST, MDB_LAST}) {
                rc = mdb_cursor_get(cur, &k, &d, op);
                if (rc != 0 && rc != MDB_NOTFOUND) break;
                rc = 0;
            }
            mdb_cursor_close(cur);
            if (rc != 0) return std::unexpected(impl.error(rc, std::string("reading ") + name));
        }
        auto cp = impl.get(txn, meta, meta_checkpoint, "reading the checkpoint");
        if (!cp) return std::unexpected(cp.error());
        CheckpointMeta m;
        if (*cp && !decode_checkpoint(**cp, m))
            return std::unexpected(StoreError{
                errc::corrupt, "LMDB store " + impl.dir +
                                   ": the checkpoint record is garbled: the store is damaged. It "
                                   "was left untouched; move the directory aside"});
        return false;
    });
    return checked;
}

}  // namespace

StoreResult<std::unique_ptr<Store>> Store::open(const StoreOptions& options) {
    TM_ASSERT(!options.dir.empty());
    TM_ASSERT(options.readers_max > 0);
    std::unique_ptr<Store> store(new Store(options));
    Impl& impl = *store->impl_;
    namespace fs = std::filesystem;
    std::error_code ec;
    const bool exists = fs::exists(fs::path(options.dir) / "data.mdb", ec);
    bool fresh = !exists;
    if (exists) {
        // Check read-only first: a damaged or future-version store must stay as it is.
        auto env = open_env(options, true, impl);
        if (!env) return std::unexpected(env.error());
        impl.env = *env;
        auto empty = check_existing(impl);
        mdb_env_close(impl.env);
        impl.env = nullptr;
        if (!empty) return std::unexpected(empty.error());
        fresh = *empty;
    } else if (options.read_only) {
        return std::unexpected(StoreError{
            errc::not_found, "LMDB store " + options.dir +
                                 ": no store there (no data.mdb). Check data_dir; the service "
                                 "creates it on its first run"});
    } else {
        fs::create_directories(options.dir, ec);
        if (ec)
            return std::unexpected(StoreError{
                ec == std::errc::no_space_on_device || ec.value() == EDQUOT ? errc::disk_full
                                                                            : errc::io,
                "LMDB store " + options.dir + ": cannot create the directory: " + ec.message() +
                    ". Check data_dir, its permissions and free space"});
    }
    if (fresh && options.read_only)
        return std::unexpected(StoreError{
            errc::not_found, "LMDB store " + options.dir +
                                 ": the store was never initialised. Start the service once"});

    auto env = open_env(options, options.read_only, impl);
    if (!env) return std::unexpected(env.error());
    impl.env = *env;

    int dead = 0;
    if (int rc = mdb_reader_check(impl.env, &dead); rc != 0)
        return std::unexpected(impl.error(rc, "clearing stale readers"));
    store->stale_readers_cleared_ = static_cast<size_t>(dead);

    struct Handle {
        const char* name;
        MDB_dbi* dbi;
    };
    const Handle handles[] = {{db_meta, &impl.meta},
                              {db_state, &impl.state},
                              {db_outbox, &impl.outbox},
                              {db_outbox_ids, &impl.ids},
                              {db_outbox_id_seqs, &impl.id_seqs},
                              {db_outbox_windows, &impl.windows},
                              {db_side, &impl.side}};
    static_assert(std::size(handles) == named_dbs);
    auto open_dbs = [&](MDB_txn* txn, unsigned flags) -> StoreResult<void> {
        for (const Handle& h : handles) {
            int rc = mdb_dbi_open(txn, h.name, flags, h.dbi);
            if (rc != 0) return std::unexpected(impl.error(rc, std::string("opening ") + h.name));
        }
        return {};
    };
    if (options.read_only) {
        auto txn = impl.begin(false, "opening the databases");
        if (!txn) return std::unexpected(txn.error());
        if (auto r = open_dbs(*txn, 0); !r) {
            mdb_txn_abort(*txn);
            return std::unexpected(r.error());
        }
        // Committing (not aborting) a read txn keeps the handles it opened for the env.
        if (auto c = impl.commit(*txn, "opening the databases"); !c)
            return std::unexpected(c.error());
    } else {
        auto r = impl.write<void>("initialising", [&](MDB_txn* txn) -> StoreResult<void> {
            if (auto o = open_dbs(txn, MDB_CREATE); !o) return o;
            // An older store is read as it is and from now on written in this version's format
            // (version 1 -> 2: outbox rows gain their enqueue time), so an older tidemark
            // refuses it rather than misreading it.
            if (auto p = impl.put_u64(txn, meta_format_version, format_version, "initialising"); !p)
                return p;
            if (!fresh) return {};
            if (auto p = impl.put_u64(txn, meta_outbox_seq_next, seq_first, "initialising"); !p)
                return p;
            return impl.put_u64(txn, meta_side_seq_next, seq_first, "initialising");
        });
        if (!r) return std::unexpected(r.error());
    }
    MDB_envinfo info;
    MDB_stat env_stat;
    if (int rc = mdb_env_info(impl.env, &info); rc != 0)
        return std::unexpected(impl.error(rc, "reading the map size"));
    if (int rc = mdb_env_stat(impl.env, &env_stat); rc != 0)
        return std::unexpected(impl.error(rc, "reading the page size"));
    impl.map_pages = info.me_mapsize / env_stat.ms_psize;
    impl.reserve_pages = std::clamp<uint64_t>(impl.map_pages / map_reserve_divisor,
                                              map_reserve_pages_min, map_reserve_pages_max);
    auto stats = store->outbox_stats();
    if (!stats) return std::unexpected(stats.error());
    store->claimed_seq_next_ = stats->seq_next;
    return store;
}

StoreResult<size_t> Store::check_stale_readers() {
    // mdb_reader_check skips the slots of this process (its pid): the forwarder's read txns and
    // the engine's writes go on undisturbed. It locks the reader table only when it found a dead
    // process, to clear its slots.
    int dead = 0;
    if (int rc = mdb_reader_check(impl_->env, &dead); rc != 0)
        return std::unexpected(impl_->error(rc, "clearing stale readers"));
    stale_readers_cleared_ += static_cast<size_t>(dead);
    return static_cast<size_t>(dead);
}

namespace {
StoreError read_only_error(const std::string& dir) {
    return {errc::invalid,
            "LMDB store " + dir + ": opened read-only (replay/inspect); writes are refused"};
}
}  // namespace

#define TM_WRITABLE()                                                                  \
    do {                                                                               \
        if (options_.read_only) return std::unexpected(read_only_error(options_.dir)); \
        TM_ASSERT(checkpoint_owner_.load() != std::this_thread::get_id());             \
    } while (0)

// --- checkpoint ------------------------------------------------------------------------------

StoreResult<std::unique_ptr<CheckpointTxn>> Store::begin_checkpoint() {
    TM_WRITABLE();
    auto txn = impl_->begin(true, "beginning a checkpoint");
    if (!txn) return std::unexpected(txn.error());
    auto pages = impl_->tree_pages(*txn, "beginning a checkpoint");
    if (!pages) {
        mdb_txn_abort(*txn);
        return std::unexpected(pages.error());
    }
    checkpoint_owner_ = std::this_thread::get_id();
    auto checkpoint = std::unique_ptr<CheckpointTxn>(new CheckpointTxn(*this, *txn));
    checkpoint->tree_pages_before_ = *pages;
    return checkpoint;
}

CheckpointTxn::CheckpointTxn(Store& store, void* txn) : store_(store), txn_(txn) {}

CheckpointTxn::~CheckpointTxn() {
    abort();
}

void CheckpointTxn::abort() {
    if (txn_ == nullptr) return;
    mdb_txn_abort(static_cast<MDB_txn*>(txn_));
    txn_ = nullptr;
    store_.checkpoint_owner_ = std::thread::id{};
}

void CheckpointTxn::put(std::string_view key, std::string_view value) {
    if (error_ || txn_ == nullptr) return;
    if (key.empty() || key.size() > Store::max_key_bytes) {
        error_ = StoreError{errc::invalid, "LMDB store " + store_.dir() + ": a state key of " +
                                               std::to_string(key.size()) + " bytes (allowed 1.." +
                                               std::to_string(Store::max_key_bytes) + ")"};
        return;
    }
    auto r = store_.impl_->put(static_cast<MDB_txn*>(txn_), store_.impl_->state, key, value, 0,
                               "writing checkpoint state");
    if (!r) error_ = r.error();
    ++puts_;
}

void CheckpointTxn::erase(std::string_view key) {
    if (error_ || txn_ == nullptr) return;
    if (key.empty() || key.size() > Store::max_key_bytes) return;  // such a key was never stored
    auto r = store_.impl_->del(static_cast<MDB_txn*>(txn_), store_.impl_->state, key,
                               "erasing checkpoint state");
    if (!r) error_ = r.error();
    ++erases_;
}

StoreResult<void> CheckpointTxn::commit(const CheckpointMeta& meta) {
    TM_ASSERT(txn_ != nullptr);  // commit once
    if (error_) {
        abort();
        return std::unexpected(*error_);
    }
    auto* txn = static_cast<MDB_txn*>(txn_);
    Store::Impl& impl = *store_.impl_;
    auto seq_next = impl.get_u64(txn, meta_outbox_seq_next, "reading outbox_seq_next");
    if (!seq_next) {
        error_ = seq_next.error();
        abort();
        return std::unexpected(*error_);
    }
    // A checkpoint cannot claim emissions that were never appended: prune_ids trusts it.
    TM_ASSERT(meta.outbox_seq_next <= *seq_next);
    if (auto p = impl.put(txn, impl.meta, meta_checkpoint, encode_checkpoint(meta), 0,
                          "writing the checkpoint meta");
        !p) {
        error_ = p.error();
        abort();
        return std::unexpected(*error_);
    }
    if (auto c = impl.check_reserve(txn, tree_pages_before_, "committing the checkpoint"); !c) {
        error_ = c.error();
        abort();
        return std::unexpected(*error_);
    }
    crash_point(CrashPoint::mid_checkpoint);
    txn_ = nullptr;
    store_.checkpoint_owner_ = std::thread::id{};
    if (auto c = impl.commit(txn, "committing the checkpoint"); !c) {
        error_ = c.error();
        return std::unexpected(*error_);
    }
    crash_point(CrashPoint::after_checkpoint_commit);
    return {};
}

StoreResult<std::optional<CheckpointMeta>> Store::load_checkpoint() {
    return impl_->read<std::optional<CheckpointMeta>>(
        "loading the checkpoint", [&](MDB_txn* txn) -> StoreResult<std::optional<CheckpointMeta>> {
            auto v = impl_->get(txn, impl_->meta, meta_checkpoint, "loading the checkpoint");
            if (!v) return std::unexpected(v.error());
            if (!*v) return std::optional<CheckpointMeta>{};
            CheckpointMeta m;
            if (!decode_checkpoint(**v, m))
                return std::unexpected(StoreError{
                    errc::corrupt, "LMDB store " + dir() +
                                       ": the checkpoint record is garbled. Move the directory "
                                       "aside (state is rebuilt from the log)"});
            // Paired with commit's check: a loaded checkpoint never points past the outbox.
            auto seq_next = impl_->get_u64(txn, meta_outbox_seq_next, "loading the checkpoint");
            if (!seq_next) return std::unexpected(seq_next.error());
            if (m.outbox_seq_next > *seq_next)
                return std::unexpected(StoreError{
                    errc::corrupt, "LMDB store " + dir() + ": the checkpoint's outbox seq " +
                                       std::to_string(m.outbox_seq_next) +
                                       " is past the outbox's " + std::to_string(*seq_next) +
                                       ". Move the directory aside"});
            return std::optional<CheckpointMeta>{std::move(m)};
        });
}

StoreResult<void> Store::for_each_state(
    const std::function<Result<void>(std::string_view key, std::string_view value)>& fn) {
    return impl_->read<void>("reading the state", [&](MDB_txn* txn) -> StoreResult<void> {
        MDB_cursor* cur;
        if (int rc = mdb_cursor_open(txn, impl_->state, &cur); rc != 0)
            return std::unexpected(impl_->error(rc, "reading the state"));
        MDB_val k, v;
        int rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
        StoreResult<void> out;
        for (; rc == 0; rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
            if (auto r = fn(view(k), view(v)); !r) {
                out = std::unexpected(StoreError{errc::callback, r.error().message});
                break;
            }
        }
        mdb_cursor_close(cur);
        if (out && rc != MDB_NOTFOUND)
            return std::unexpected(impl_->error(rc, "reading the state"));
        return out;
    });
}

StoreResult<size_t> Store::drop_prefix(std::string_view prefix) {
    TM_WRITABLE();
    return impl_->write<size_t>("dropping state", [&](MDB_txn* txn) -> StoreResult<size_t> {
        MDB_cursor* cur;
        if (int rc = mdb_cursor_open(txn, impl_->state, &cur); rc != 0)
            return std::unexpected(impl_->error(rc, "dropping state"));
        MDB_val k = val(prefix), v;
        size_t n = 0;
        int rc = prefix.empty() ? mdb_cursor_get(cur, &k, &v, MDB_FIRST)
                                : mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
        while (rc == 0 && view(k).starts_with(prefix)) {
            if ((rc = mdb_cursor_del(cur, 0)) != 0) break;
            ++n;
            // Seek again rather than rely on where a delete leaves the cursor.
            k = val(prefix);
            rc = prefix.empty() ? mdb_cursor_get(cur, &k, &v, MDB_FIRST)
                                : mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
        }
        mdb_cursor_close(cur);
        if (rc != 0 && rc != MDB_NOTFOUND)
            return std::unexpected(impl_->error(rc, "dropping state"));
        return n;
    });
}

// --- outbox ----------------------------------------------------------------------------------

namespace {
struct OutboxCounters {
    uint64_t seq_next = 0, bytes = 0, dropped = 0, duplicates = 0, compacted = 0;
};

StoreResult<OutboxCounters> load_outbox_counters(Store::Impl& impl, MDB_txn* txn) {
    OutboxCounters c;
    struct Field {
        std::string_view key;
        uint64_t* out;
    };
    for (Field f :
         {Field{meta_outbox_seq_next, &c.seq_next}, Field{meta_outbox_bytes, &c.bytes},
          Field{meta_outbox_dropped, &c.dropped}, Field{meta_outbox_duplicates, &c.duplicates},
          Field{meta_outbox_compacted, &c.compacted}}) {
        auto v = impl.get_u64(txn, f.key, "reading outbox counters");
        if (!v) return std::unexpected(v.error());
        *f.out = *v;
    }
    if (c.seq_next < seq_first)
        return std::unexpected(StoreError{errc::corrupt, "LMDB store " + impl.dir +
                                                             ": outbox_seq_next is missing. Move "
                                                             "the directory aside"});
    return c;
}

StoreResult<void> store_outbox_counters(Store::Impl& impl, MDB_txn* txn, const OutboxCounters& c) {
    const std::string_view what = "writing outbox counters";
    for (auto [key, v] :
         {std::pair{meta_outbox_seq_next, c.seq_next}, std::pair{meta_outbox_bytes, c.bytes},
          std::pair{meta_outbox_dropped, c.dropped},
          std::pair{meta_outbox_duplicates, c.duplicates},
          std::pair{meta_outbox_compacted, c.compacted}}) {
        if (auto p = impl.put_u64(txn, key, v, what); !p) return p;
    }
    return {};
}
}  // namespace

StoreResult<AppendResult> Store::outbox_append(std::span<const OutboxRow> rows) {
    TM_WRITABLE();
    // Which rows may be compacted is decided against the claim under claim_mutex_, held until
    // the commit: a peek before it has claimed its rows, a peek after it sees the compaction.
    // Taken inside the write txn, so a peek waits for this append only, not for other writers.
    std::unique_lock claim_lock(claim_mutex_, std::defer_lock);
    uint64_t full_bytes = 0;
    auto r = impl_->write_within_reserve<AppendResult>(
        "appending to the outbox", [&](MDB_txn* txn) -> StoreResult<AppendResult> {
            if (options_.compact_superseded) claim_lock.lock();
            const uint64_t claimed = claimed_seq_next_.load();
            Impl& impl = *impl_;
            const std::string_view what = "appending to the outbox";
            auto counters = load_outbox_counters(impl, txn);
            if (!counters) return std::unexpected(counters.error());
            OutboxCounters c = *counters;
            const uint64_t bytes_before = c.bytes;
            const uint64_t batch_seq_first = c.seq_next;
            AppendResult res;
            for (const OutboxRow& row : rows) {
                TM_ASSERT(row.kind <= static_cast<uint8_t>(OutboxKind::retract));
                const std::string id_key = be64(row.id);
                auto seen = impl.get(txn, impl.ids, id_key, what);
                if (!seen) return std::unexpected(seen.error());
                if (*seen) {
                    ++res.duplicates_skipped;
                    continue;
                }
                const uint64_t seq = c.seq_next++;
                const std::string seq_key = be64(seq);
                // The id stays known even if the row is compacted or dropped: a regenerated
                // emission after a crash is recognised either way.
                if (auto p = impl.put(txn, impl.ids, id_key, seq_key, MDB_NOOVERWRITE, what); !p)
                    return std::unexpected(p.error());
                if (auto p = impl.put(txn, impl.id_seqs, seq_key, id_key, MDB_APPEND, what); !p)
                    return std::unexpected(p.error());

                const auto wkey = window_key(row);
                bool write_row = true;
                if (options_.compact_superseded && wkey) {
                    auto latest = impl.get(txn, impl.windows, *wkey, what);
                    if (!latest) return std::unexpected(latest.error());
                    const uint64_t old_seq =
                        (*latest && (**latest).size() == 8) ? from_be64(**latest) : 0;
                    OutboxRow old;
                    bool old_unsent = false;
                    if (old_seq != 0 && old_seq >= claimed) {
                        auto ov = impl.get(txn, impl.outbox, be64(old_seq), what);
                        if (!ov) return std::unexpected(ov.error());
                        old_unsent = *ov && decode_row(**ov, old_seq, old);
                    }
                    // Only a final/update is ever superseded: an unsent retract cancels a row
                    // that may have reached the consumer, so it must travel.
                    const auto retract = static_cast<uint8_t>(OutboxKind::retract);
                    if (old_unsent && old.kind != retract) {
                        if (row.kind == retract && row.revision == old.revision) {
                            // Neither was sent: nothing to show, nothing to cancel.
                            auto removed = impl.remove_outbox_row(txn, old_seq, what);
                            if (!removed) return std::unexpected(removed.error());
                            c.bytes -= *removed;
                            res.compacted += 2;
                            write_row = false;
                        } else if (row.kind != retract && row.revision > old.revision) {
                            auto removed = impl.remove_outbox_row(txn, old_seq, what);
                            if (!removed) return std::unexpected(removed.error());
                            c.bytes -= *removed;
                            res.compacted += 1;
                        }
                    }
                }
                if (!write_row) continue;
                const std::string value = encode_row(row);
                if (auto p = impl.put(txn, impl.outbox, seq_key, value, MDB_APPEND, what); !p)
                    return std::unexpected(p.error());
                c.bytes += value.size() + row_key_bytes;
                ++res.appended;
                if (wkey) {
                    if (auto p = impl.put(txn, impl.windows, *wkey, seq_key, 0, what); !p)
                        return std::unexpected(p.error());
                }
            }
            const bool over_bound = c.bytes > options_.outbox_bytes_max && c.bytes > bytes_before;
            if (over_bound && options_.outbox_when_full == WhenFull::pause_ingest) {
                // An empty outbox takes the batch whatever its size (one engine step's
                // results, bounded by the runtime): refused, a batch larger than the bound
                // would wait forever for a drain that has nothing left to drain.
                if (bytes_before > 0) {
                    full_bytes = c.bytes;
                    return std::unexpected(StoreError{errc::full, ""});
                }
            } else if (over_bound) {
                MDB_cursor* cur;
                if (int rc = mdb_cursor_open(txn, impl.outbox, &cur); rc != 0)
                    return std::unexpected(impl.error(rc, what));
                while (c.bytes > options_.outbox_bytes_max) {
                    MDB_val k, v;
                    int rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
                    if (rc == MDB_NOTFOUND) break;
                    if (rc != 0) {
                        mdb_cursor_close(cur);
                        return std::unexpected(impl.error(rc, what));
                    }
                    const uint64_t seq = from_be64(view(k));
                    auto removed = impl.remove_outbox_row(txn, seq, what);
                    if (!removed) {
                        mdb_cursor_close(cur);
                        return std::unexpected(removed.error());
                    }
                    c.bytes -= *removed;
                    ++res.dropped;
                    if (seq >= batch_seq_first) --res.appended;
                }
                mdb_cursor_close(cur);
            }
            c.dropped += res.dropped;
            c.duplicates += res.duplicates_skipped;
            c.compacted += res.compacted;
            if (auto s = store_outbox_counters(impl, txn, c); !s) return std::unexpected(s.error());
            return res;
        });
    if (claim_lock.owns_lock()) claim_lock.unlock();
    if (!r && r.error().code == errc::full) {
        r.error().message =
            "LMDB store " + dir() + ": the outbox is full (" + std::to_string(full_bytes) +
            " bytes with this batch, " +
            "upstream.outbox.max_bytes = " + std::to_string(options_.outbox_bytes_max) +
            ", when_full = pause_ingest); nothing was written. Ingest pauses "
            "until the forwarder drains it";
    }
    if (r) crash_point(CrashPoint::after_outbox_append);
    return r;
}

StoreResult<std::vector<OutboxRow>> Store::outbox_peek(uint64_t from_seq, size_t limit) {
    // The snapshot and the claim under one lock with outbox_append's compaction (see there): no
    // append can have decided to compact a returned row, nor decide it later.
    std::lock_guard claim_lock(claim_mutex_);
    auto rows = impl_->read<std::vector<OutboxRow>>(
        "reading the outbox", [&](MDB_txn* txn) -> StoreResult<std::vector<OutboxRow>> {
            std::vector<OutboxRow> out;
            MDB_cursor* cur;
            if (int rc = mdb_cursor_open(txn, impl_->outbox, &cur); rc != 0)
                return std::unexpected(impl_->error(rc, "reading the outbox"));
            std::string from = be64(from_seq);
            MDB_val k = val(from), v;
            int rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
            for (; rc == 0 && out.size() < limit; rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
                OutboxRow row;
                if (!decode_row(view(v), from_be64(view(k)), row)) {
                    mdb_cursor_close(cur);
                    return std::unexpected(StoreError{
                        errc::corrupt, "LMDB store " + dir() + ": outbox row " +
                                           std::to_string(from_be64(view(k))) + " is garbled"});
                }
                out.push_back(std::move(row));
            }
            mdb_cursor_close(cur);
            if (rc != 0 && rc != MDB_NOTFOUND)
                return std::unexpected(impl_->error(rc, "reading the outbox"));
            return out;
        });
    if (rows && !rows->empty()) set_claimed(rows->back().seq + 1);
    return rows;
}

StoreResult<void> Store::outbox_delete(std::span<const uint64_t> seqs) {
    TM_WRITABLE();
    auto delete_txn = [&](std::span<const uint64_t> part) {
        return impl_->write<void>("deleting outbox rows", [&](MDB_txn* txn) -> StoreResult<void> {
            auto c = load_outbox_counters(*impl_, txn);
            if (!c) return std::unexpected(c.error());
            for (uint64_t seq : part) {
                auto removed = impl_->remove_outbox_row(txn, seq, "deleting outbox rows");
                if (!removed) return std::unexpected(removed.error());
                TM_ASSERT(c->bytes >= *removed);
                c->bytes -= *removed;
            }
            return store_outbox_counters(*impl_, txn, *c);
        });
    };
    size_t deleted = 0;
    auto r = delete_halving_on_map_full(seqs, delete_txn, deleted);
    if (!r) return std::unexpected(partly_done(std::move(r.error()), deleted, seqs.size()));
    crash_point(CrashPoint::after_outbox_delete);
    return r;
}

namespace {
// One transaction of prune_ids: at most limit ids; attempted says how many it got to.
StoreResult<size_t> prune_ids_txn(Store::Impl& impl, uint64_t below_seq, size_t limit,
                                  size_t& attempted) {
    return impl.write<size_t>("pruning outbox ids", [&](MDB_txn* txn) -> StoreResult<size_t> {
        const std::string_view what = "pruning outbox ids";
        MDB_cursor* cur;
        if (int rc = mdb_cursor_open(txn, impl.id_seqs, &cur); rc != 0)
            return std::unexpected(impl.error(rc, what));
        size_t n = 0;
        MDB_val k, v;
        int rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
        while (rc == 0 && n < limit && from_be64(view(k)) < below_seq) {
            attempted = n + 1;
            const std::string id_key(view(v));
            const std::string seq_key(view(k));
            auto owner = impl.get(txn, impl.ids, id_key, what);
            if (!owner) {
                mdb_cursor_close(cur);
                return std::unexpected(owner.error());
            }
            if (*owner && **owner == seq_key) {
                if (auto d = impl.del(txn, impl.ids, id_key, what); !d) {
                    mdb_cursor_close(cur);
                    return std::unexpected(d.error());
                }
            }
            if ((rc = mdb_cursor_del(cur, 0)) != 0) break;
            ++n;
            rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
        }
        mdb_cursor_close(cur);
        if (rc != 0 && rc != MDB_NOTFOUND) return std::unexpected(impl.error(rc, what));
        return n;
    });
}
}  // namespace

StoreResult<size_t> Store::prune_ids(uint64_t below_seq) {
    TM_WRITABLE();
    // In a full map, fewer ids per transaction (as delete_halving_on_map_full): the limit starts
    // at what the failed transaction tried and halves down to one id.
    size_t pruned = 0;
    size_t limit = std::numeric_limits<size_t>::max();
    for (;;) {
        size_t attempted = 0;
        auto r = prune_ids_txn(*impl_, below_seq, limit, attempted);
        if (r) {
            pruned += *r;
            if (*r < limit) return pruned;
            continue;
        }
        if (r.error().code != errc::map_full || attempted <= 1) {
            StoreError e = std::move(r.error());
            if (pruned > 0)
                e.message += " (" + std::to_string(pruned) +
                             " ids were pruned in smaller transactions first; prune again)";
            return std::unexpected(std::move(e));
        }
        limit = attempted / 2;
    }
}

void Store::set_claimed(uint64_t seq_next) {
    // Claims only move forward: a forwarder restarting its scan must not re-open compaction of
    // rows it already published.
    uint64_t cur = claimed_seq_next_.load();
    while (seq_next > cur && !claimed_seq_next_.compare_exchange_weak(cur, seq_next)) {
    }
}

StoreResult<OutboxStats> Store::outbox_stats() {
    return impl_->read<OutboxStats>(
        "reading outbox stats", [&](MDB_txn* txn) -> StoreResult<OutboxStats> {
            auto c = load_outbox_counters(*impl_, txn);
            if (!c) return std::unexpected(c.error());
            OutboxStats s;
            s.bytes = c->bytes;
            s.seq_next = c->seq_next;
            s.dropped = c->dropped;
            s.duplicates_skipped = c->duplicates;
            s.compacted = c->compacted;
            MDB_stat st;
            if (int rc = mdb_stat(txn, impl_->outbox, &st); rc != 0)
                return std::unexpected(impl_->error(rc, "reading outbox stats"));
            s.rows = st.ms_entries;
            MDB_cursor* cur;
            if (int rc = mdb_cursor_open(txn, impl_->outbox, &cur); rc != 0)
                return std::unexpected(impl_->error(rc, "reading outbox stats"));
            MDB_val k, v;
            int rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
            if (rc == 0) {
                s.oldest_seq = from_be64(view(k));
                OutboxRow oldest;
                if (decode_row(view(v), s.oldest_seq, oldest))
                    s.oldest_enqueued_ms = oldest.enqueued_ms;
            }
            mdb_cursor_close(cur);
            if (rc != 0 && rc != MDB_NOTFOUND)
                return std::unexpected(impl_->error(rc, "reading outbox stats"));
            return s;
        });
}

// --- side output -----------------------------------------------------------------------------

namespace {

// Both side_append overloads: record(i) is the i-th record, position(i) its log position or
// nullopt (the deprecated overload: no dedupe, the high-water stays).
template <typename RecordAt, typename PositionAt>
StoreResult<SideAppendResult> append_side(Store::Impl& impl, uint64_t side_bytes_max, size_t count,
                                          const RecordAt& record, const PositionAt& position) {
    return impl.write_within_reserve<SideAppendResult>(
        "appending side output", [&](MDB_txn* txn) -> StoreResult<SideAppendResult> {
            const std::string_view what = "appending side output";
            auto seq_next = impl.get_u64(txn, meta_side_seq_next, what);
            auto bytes = impl.get_u64(txn, meta_side_bytes, what);
            auto dropped = impl.get_u64(txn, meta_side_dropped, what);
            auto duplicates = impl.get_u64(txn, meta_side_duplicates, what);
            auto high_water_value = impl.get(txn, impl.meta, meta_side_high_water, what);
            if (!seq_next) return std::unexpected(seq_next.error());
            if (!bytes) return std::unexpected(bytes.error());
            if (!dropped) return std::unexpected(dropped.error());
            if (!duplicates) return std::unexpected(duplicates.error());
            if (!high_water_value) return std::unexpected(high_water_value.error());
            std::optional<SidePosition> high_water;
            if (*high_water_value) {
                SidePosition p;
                if (!decode_side_position(**high_water_value, p))
                    return std::unexpected(StoreError{
                        errc::corrupt, "LMDB store " + impl.dir +
                                           ": meta entry 'side_high_water' is garbled. Move the "
                                           "directory aside"});
                high_water = p;
            }
            const std::optional<SidePosition> high_water_before = high_water;
            uint64_t seq = std::max(*seq_next, seq_first), b = *bytes;
            SideAppendResult res;
            for (size_t i = 0; i < count; ++i) {
                const std::optional<SidePosition> at = position(i);
                if (at && high_water && *at <= *high_water) {
                    ++res.duplicates_skipped;
                    continue;
                }
                if (at) high_water = at;
                const std::string& rec = record(i);
                if (auto p = impl.put(txn, impl.side, be64(seq++), rec, MDB_APPEND, what); !p)
                    return std::unexpected(p.error());
                b += rec.size() + row_key_bytes;
                ++res.appended;
            }
            const uint64_t batch_seq_first = seq - res.appended;
            if (b > side_bytes_max) {
                MDB_cursor* cur;
                if (int rc = mdb_cursor_open(txn, impl.side, &cur); rc != 0)
                    return std::unexpected(impl.error(rc, what));
                MDB_val k, v;
                int rc = 0;
                while (b > side_bytes_max && (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST)) == 0) {
                    const uint64_t cost = v.mv_size + row_key_bytes;
                    const uint64_t dropped_seq = from_be64(view(k));
                    if ((rc = mdb_cursor_del(cur, 0)) != 0) break;
                    b -= cost;
                    ++res.dropped;
                    if (dropped_seq >= batch_seq_first) --res.appended;
                }
                mdb_cursor_close(cur);
                if (rc != 0 && rc != MDB_NOTFOUND) return std::unexpected(impl.error(rc, what));
            }
            if (auto p = impl.put_u64(txn, meta_side_seq_next, seq, what); !p)
                return std::unexpected(p.error());
            if (auto p = impl.put_u64(txn, meta_side_bytes, b, what); !p)
                return std::unexpected(p.error());
            if (auto p = impl.put_u64(txn, meta_side_dropped, *dropped + res.dropped, what); !p)
                return std::unexpected(p.error());
            if (res.duplicates_skipped > 0) {
                if (auto p = impl.put_u64(txn, meta_side_duplicates,
                                          *duplicates + res.duplicates_skipped, what);
                    !p)
                    return std::unexpected(p.error());
            }
            if (high_water != high_water_before) {
                if (auto p = impl.put(txn, impl.meta, meta_side_high_water,
                                      encode_side_position(*high_water), 0, what);
                    !p)
                    return std::unexpected(p.error());
            }
            return res;
        });
}

}  // namespace

StoreResult<SideAppendResult> Store::side_append(std::span<const SideRecord> records) {
    TM_WRITABLE();
    return append_side(
        *impl_, options_.side_bytes_max, records.size(),
        [&](size_t i) -> const std::string& { return records[i].record; },
        [&](size_t i) {
            return std::optional<SidePosition>{
                SidePosition{records[i].log_offset, records[i].ordinal}};
        });
}

StoreResult<void> Store::side_append(std::span<const std::string> records) {
    TM_WRITABLE();
    auto r = append_side(
        *impl_, options_.side_bytes_max, records.size(),
        [&](size_t i) -> const std::string& { return records[i]; },
        [](size_t) { return std::optional<SidePosition>{}; });
    if (!r) return std::unexpected(r.error());
    return {};
}

StoreResult<std::vector<SideRow>> Store::side_peek(uint64_t from_seq, size_t limit) {
    return impl_->read<std::vector<SideRow>>(
        "reading side output", [&](MDB_txn* txn) -> StoreResult<std::vector<SideRow>> {
            std::vector<SideRow> out;
            MDB_cursor* cur;
            if (int rc = mdb_cursor_open(txn, impl_->side, &cur); rc != 0)
                return std::unexpected(impl_->error(rc, "reading side output"));
            std::string from = be64(from_seq);
            MDB_val k = val(from), v;
            int rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
            for (; rc == 0 && out.size() < limit; rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT))
                out.push_back(SideRow{from_be64(view(k)), std::string(view(v))});
            mdb_cursor_close(cur);
            if (rc != 0 && rc != MDB_NOTFOUND)
                return std::unexpected(impl_->error(rc, "reading side output"));
            return out;
        });
}

StoreResult<void> Store::side_delete(std::span<const uint64_t> seqs) {
    TM_WRITABLE();
    auto delete_txn = [&](std::span<const uint64_t> part) {
        return impl_->write<void>("deleting side output", [&](MDB_txn* txn) -> StoreResult<void> {
            const std::string_view what = "deleting side output";
            auto bytes = impl_->get_u64(txn, meta_side_bytes, what);
            if (!bytes) return std::unexpected(bytes.error());
            uint64_t b = *bytes;
            for (uint64_t seq : part) {
                auto v = impl_->get(txn, impl_->side, be64(seq), what);
                if (!v) return std::unexpected(v.error());
                if (!*v) continue;
                const uint64_t cost = (**v).size() + row_key_bytes;
                if (auto d = impl_->del(txn, impl_->side, be64(seq), what); !d)
                    return std::unexpected(d.error());
                TM_ASSERT(b >= cost);
                b -= cost;
            }
            return impl_->put_u64(txn, meta_side_bytes, b, what);
        });
    };
    size_t deleted = 0;
    auto r = delete_halving_on_map_full(seqs, delete_txn, deleted);
    if (!r) return std::unexpected(partly_done(std::move(r.error()), deleted, seqs.size()));
    return r;
}

StoreResult<SideStats> Store::side_stats() {
    return impl_->read<SideStats>(
        "reading side stats", [&](MDB_txn* txn) -> StoreResult<SideStats> {
            SideStats s;
            auto b = impl_->get_u64(txn, meta_side_bytes, "reading side stats");
            auto d = impl_->get_u64(txn, meta_side_dropped, "reading side stats");
            auto dup = impl_->get_u64(txn, meta_side_duplicates, "reading side stats");
            if (!b) return std::unexpected(b.error());
            if (!d) return std::unexpected(d.error());
            if (!dup) return std::unexpected(dup.error());
            s.bytes = *b;
            s.dropped = *d;
            s.duplicates_skipped = *dup;
            MDB_stat st;
            if (int rc = mdb_stat(txn, impl_->side, &st); rc != 0)
                return std::unexpected(impl_->error(rc, "reading side stats"));
            s.rows = st.ms_entries;
            return s;
        });
}

// --- health ----------------------------------------------------------------------------------

StoreResult<uint64_t> Store::map_used_bytes() {
    MDB_envinfo info;
    MDB_stat st;
    if (int rc = mdb_env_info(impl_->env, &info); rc != 0)
        return std::unexpected(impl_->error(rc, "reading map use"));
    if (int rc = mdb_env_stat(impl_->env, &st); rc != 0)
        return std::unexpected(impl_->error(rc, "reading map use"));
    return (static_cast<uint64_t>(info.me_last_pgno) + 1) * st.ms_psize;
}

uint64_t Store::map_size_bytes() const {
    MDB_envinfo info;
    if (mdb_env_info(impl_->env, &info) != 0) return options_.map_size_bytes;
    return info.me_mapsize;
}

}  // namespace tidemark::lmdb
