// Opening a store, before and after its environment: the read-only check of an existing one
// (its format version and every database readable, before anything is written to it), the
// format upgrades of an older store, and the named databases with a fresh store's counters.
#include <lmdb.h>

#include <filesystem>
#include <string>
#include <system_error>

#include "adapters/lmdb/row_codec.h"
#include "adapters/lmdb/store.h"
#include "adapters/lmdb/store_internal.h"
#include "core/bytes.h"

namespace tidemark::lmdb::detail {

namespace {

// The format version of an existing store, refused when missing, garbled or newer than ours.
StoreResult<void> check_format_version(Store::Impl& impl, MDB_txn* txn) {
    auto version = impl.get(txn, impl.meta, meta_format_version, "reading format_version");
    if (!version) return std::unexpected(version.error());
    std::string_view v = version->value_or(std::string_view{});
    uint64_t n = 0;
    if (v.size() != 8 || !core::bytes::get_u64(v, n) || n == 0)
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
    return {};
}

// Every database must be there, and its first and last pages readable.
StoreResult<void> check_databases(Store::Impl& impl, MDB_txn* txn) {
    for (const char* name : {db_meta, db_state, db_outbox, db_outbox_ids, db_outbox_ids_b,
                             db_outbox_windows, db_side}) {
        MDB_dbi dbi;
        int rc = mdb_dbi_open(txn, name, 0, &dbi);
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
    return {};
}

// Checks an existing store without writing to it. Returns true when it holds no database at
// all (created, but its initialising txn never committed): it is then initialised like a new one.
StoreResult<bool> check_existing(Store::Impl& impl) {
    return impl.read<bool>("checking the format", [&](MDB_txn* txn) -> StoreResult<bool> {
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
        if (auto v = check_format_version(impl, txn); !v) return std::unexpected(v.error());
        if (auto d = check_databases(impl, txn); !d) return std::unexpected(d.error());
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
}

// Up to format 5 the second id database mapped seq -> id for prune_ids: emptied, it becomes the
// id index's second generation, and outbox_ids (every id the store knows) the current one.
StoreResult<void> upgrade_id_index(Store::Impl& impl, MDB_txn* txn) {
    auto version = impl.get_u64(txn, meta_format_version, "upgrading the id index");
    if (!version) return std::unexpected(version.error());
    if (*version >= 6) return {};
    if (int rc = mdb_drop(txn, impl.ids[1], 0); rc != 0)
        return std::unexpected(impl.error(rc, "upgrading the id index"));
    if (auto p = impl.put_u64(txn, meta_outbox_ids_current, 0, "upgrading the id index"); !p)
        return p;
    return impl.put_u64(txn, meta_outbox_ids_older_below, 0, "upgrading the id index");
}

// Up to format 7 the id index was keyed by the id alone; format 8 keys it by window end and id
// (row_codec.h id_key, issue 31). The ids a store holds are kept as they are: rewriting them
// would need each row's window, and a row already sent is gone. The generations holding any are
// marked, and looked up by the id alone too until prune_ids drops them (two checkpoints).
StoreResult<void> upgrade_id_keys(Store::Impl& impl, MDB_txn* txn) {
    const std::string_view what = "upgrading the id index keys";
    auto version = impl.get_u64(txn, meta_format_version, what);
    if (!version) return std::unexpected(version.error());
    if (*version >= 8) return {};
    uint64_t slots = 0;
    for (uint64_t s = 0; s < 2; ++s) {
        MDB_stat st;
        if (int rc = mdb_stat(txn, impl.ids[s], &st); rc != 0)
            return std::unexpected(impl.error(rc, what));
        if (st.ms_entries > 0) slots |= uint64_t{1} << s;
    }
    return impl.put_u64(txn, meta_outbox_ids_legacy_slots, slots, what);
}

// Up to format 6 the compaction index was keyed by (pipeline, key, window) without the version,
// so one version's row could replace another's (issue 24). Emptied, it starts again per
// version: the rows it indexed stay and are sent; only their compaction is given up.
StoreResult<void> upgrade_window_index(Store::Impl& impl, MDB_txn* txn) {
    auto version = impl.get_u64(txn, meta_format_version, "upgrading the compaction index");
    if (!version) return std::unexpected(version.error());
    if (*version >= 7) return {};
    if (int rc = mdb_drop(txn, impl.windows, 0); rc != 0)
        return std::unexpected(impl.error(rc, "upgrading the compaction index"));
    return {};
}

}  // namespace

// Before the store is opened for real: an existing one is checked read-only (a damaged or
// future-version store must stay as it is), a missing one created (or refused read-only).
// Returns whether the store is fresh (to be initialised).
StoreResult<bool> prepare(const StoreOptions& options, Store::Impl& impl) {
    namespace fs = std::filesystem;
    std::error_code ec;
    const bool exists = fs::exists(fs::path(options.dir) / "data.mdb", ec);
    bool fresh = !exists;
    if (exists) {
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
    return fresh;
}

// Opens (read-only: the existing; otherwise creates) the named databases, and writes the format
// version, and a fresh store's seq counters.
StoreResult<void> open_databases(Store::Impl& impl, bool read_only, bool fresh) {
    struct Handle {
        const char* name;
        MDB_dbi* dbi;
    };
    const Handle handles[] = {{db_meta, &impl.meta},
                              {db_state, &impl.state},
                              {db_outbox, &impl.outbox},
                              {db_outbox_ids, &impl.ids[0]},
                              {db_outbox_ids_b, &impl.ids[1]},
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
    if (read_only) {
        auto txn = impl.begin(false, "opening the databases");
        if (!txn) return std::unexpected(txn.error());
        if (auto r = open_dbs(*txn, 0); !r) {
            mdb_txn_abort(*txn);
            return std::unexpected(r.error());
        }
        // Committing (not aborting) a read txn keeps the handles it opened for the env.
        return impl.commit(*txn, "opening the databases");
    }
    return impl.write<void>("initialising", [&](MDB_txn* txn) -> StoreResult<void> {
        if (auto o = open_dbs(txn, MDB_CREATE); !o) return o;
        if (!fresh) {
            if (auto u = upgrade_id_index(impl, txn); !u) return u;
            if (auto u = upgrade_id_keys(impl, txn); !u) return u;  // after: it empties one
            if (auto u = upgrade_window_index(impl, txn); !u) return u;
        }
        // An older store is read as it is and from now on written in this version's format
        // (version 1 -> 2: outbox rows gain their enqueue time; 2 -> 3: side rows gain their
        // pipeline and key), so an older tidemark refuses it rather than misreading it.
        if (auto p = impl.put_u64(txn, meta_format_version, Store::format_version, "initialising");
            !p)
            return p;
        if (!fresh) return {};
        if (auto p = impl.put_u64(txn, meta_outbox_seq_next, seq_first, "initialising"); !p)
            return p;
        return impl.put_u64(txn, meta_side_seq_next, seq_first, "initialising");
    });
}

}  // namespace tidemark::lmdb::detail
