// The environment: its flags, opening (the read-only check of an existing store before anything
// is written to it, the format upgrades and the databases are in store_open.cpp), the
// transactions and errors every part of the store uses, the map reserve that keeps a full map
// deletable, stale readers and map use.
#include <lmdb.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>

#include "adapters/lmdb/row_codec.h"
#include "adapters/lmdb/store.h"
#include "adapters/lmdb/store_internal.h"
#include "core/bytes.h"

namespace tidemark::lmdb {

using namespace detail;

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

namespace detail {

StoreError partly_done(StoreError e, size_t done, size_t total) {
    if (done > 0)
        e.message += " (" + std::to_string(done) + " of the " + std::to_string(total) +
                     " were done in smaller transactions first; doing them all again is fine)";
    return e;
}

StoreError read_only_error(const std::string& dir) {
    return {errc::invalid,
            "LMDB store " + dir + ": opened read-only (replay/inspect); writes are refused"};
}

}  // namespace detail

namespace {

// The map's part that only deletes may fill (Impl::check_reserve): 1/32 of it, at least 32 pages
// (a one-row delete copies ~12: the paths in outbox, outbox_windows, meta, the free list; the
// pages it frees come back two transactions later) and at most 1024 (4 MiB of 4 KiB pages).
constexpr uint64_t map_reserve_divisor = 32;
constexpr uint64_t map_reserve_pages_min = 32;
constexpr uint64_t map_reserve_pages_max = 1024;

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

}  // namespace

namespace detail {

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

}  // namespace detail

// --- Store::Impl -----------------------------------------------------------------------------

Store::Impl::~Impl() {
    if (env != nullptr) mdb_env_close(env);
}

StoreError Store::Impl::error(int rc, std::string_view what) const {
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
            return {errc::corrupt,
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

StoreResult<MDB_txn*> Store::Impl::begin(bool write, std::string_view what) {
    MDB_txn* txn = nullptr;
    // Read txns take MDB_RDONLY (a snapshot; never blocks the writer). Write txns take 0:
    // no MDB_NOSYNC / MDB_NOMETASYNC override, so their commit is fully synced.
    unsigned flags = write ? 0u : static_cast<unsigned>(MDB_RDONLY);
    int rc = mdb_txn_begin(env, nullptr, flags, &txn);
    if (rc != 0) return std::unexpected(error(rc, what));
    return txn;
}

StoreResult<void> Store::Impl::commit(MDB_txn* txn, std::string_view what) {
    // mdb_txn_commit frees the txn whether or not it succeeds: a failed commit wrote nothing
    // visible (the meta page is written last).
    int rc = mdb_txn_commit(txn);
    if (rc != 0) return std::unexpected(error(rc, what));
    return {};
}

StoreResult<uint64_t> Store::Impl::tree_pages(MDB_txn* txn, std::string_view what) {
    uint64_t pages = 0;
    for (MDB_dbi dbi : {meta, state, outbox, ids[0], ids[1], windows, side}) {
        MDB_stat st;
        if (int rc = mdb_stat(txn, dbi, &st); rc != 0) return std::unexpected(error(rc, what));
        pages += st.ms_branch_pages + st.ms_leaf_pages + st.ms_overflow_pages;
    }
    return pages;
}

StoreResult<void> Store::Impl::check_reserve(MDB_txn* txn, uint64_t pages_before,
                                             std::string_view what) {
    auto pages = tree_pages(txn, what);
    if (!pages) return std::unexpected(pages.error());
    if (*pages <= pages_before || *pages + reserve_pages <= map_pages) return {};
    StoreError e = error(MDB_MAP_FULL, what);
    e.message += " (" + std::to_string(reserve_pages) + " of its " + std::to_string(map_pages) +
                 " pages stay free for deletes)";
    return std::unexpected(std::move(e));
}

StoreResult<std::optional<std::string_view>> Store::Impl::get(MDB_txn* txn, MDB_dbi dbi,
                                                              std::string_view key,
                                                              std::string_view what) {
    MDB_val k = val(key), v{};
    int rc = mdb_get(txn, dbi, &k, &v);
    if (rc == MDB_NOTFOUND) return std::optional<std::string_view>{};
    if (rc != 0) return std::unexpected(error(rc, what));
    return std::optional<std::string_view>{view(v)};
}

StoreResult<void> Store::Impl::put(MDB_txn* txn, MDB_dbi dbi, std::string_view key,
                                   std::string_view value, unsigned flags, std::string_view what) {
    MDB_val k = val(key), v = val(value);
    int rc = mdb_put(txn, dbi, &k, &v, flags);
    if (rc != 0) return std::unexpected(error(rc, what));
    return {};
}

StoreResult<bool> Store::Impl::del(MDB_txn* txn, MDB_dbi dbi, std::string_view key,
                                   std::string_view what) {
    MDB_val k = val(key);
    int rc = mdb_del(txn, dbi, &k, nullptr);
    if (rc == MDB_NOTFOUND) return false;
    if (rc != 0) return std::unexpected(error(rc, what));
    return true;
}

StoreResult<uint64_t> Store::Impl::get_u64(MDB_txn* txn, std::string_view key,
                                           std::string_view what) {
    auto v = get(txn, meta, key, what);
    if (!v) return std::unexpected(v.error());
    if (!*v) return uint64_t{0};
    std::string_view in = **v;
    uint64_t out = 0;
    if (in.size() != 8 || !core::bytes::get_u64(in, out))
        return std::unexpected(
            StoreError{errc::corrupt, "LMDB store " + dir + ": meta entry '" + std::string(key) +
                                          "' is garbled (" + std::to_string((**v).size()) +
                                          " bytes, expected 8). Move the directory aside"});
    return out;
}

StoreResult<void> Store::Impl::get_u64s(MDB_txn* txn, std::initializer_list<Counter> counters,
                                        std::string_view what) {
    for (const Counter& c : counters) {
        auto v = get_u64(txn, c.key, what);
        if (!v) return std::unexpected(v.error());
        *c.out = *v;
    }
    return {};
}

StoreResult<void> Store::Impl::put_u64(MDB_txn* txn, std::string_view key, uint64_t v,
                                       std::string_view what) {
    return put(txn, meta, key, u64_value(v), 0, what);
}

// --- open ------------------------------------------------------------------------------------

namespace {

// The reserve is a share of the map as the environment has it (LMDB may round the size).
StoreResult<void> size_reserve(Store::Impl& impl) {
    MDB_envinfo info;
    MDB_stat env_stat;
    if (int rc = mdb_env_info(impl.env, &info); rc != 0)
        return std::unexpected(impl.error(rc, "reading the map size"));
    if (int rc = mdb_env_stat(impl.env, &env_stat); rc != 0)
        return std::unexpected(impl.error(rc, "reading the page size"));
    impl.map_pages = info.me_mapsize / env_stat.ms_psize;
    impl.reserve_pages = std::clamp<uint64_t>(impl.map_pages / map_reserve_divisor,
                                              map_reserve_pages_min, map_reserve_pages_max);
    return {};
}

}  // namespace

Store::Store(StoreOptions options) : options_(std::move(options)), impl_(std::make_unique<Impl>()) {
    impl_->dir = options_.dir;
}

Store::~Store() = default;

StoreResult<std::unique_ptr<Store>> Store::open(const StoreOptions& options) {
    TM_ASSERT(!options.dir.empty());
    TM_ASSERT(options.readers_max > 0);
    std::unique_ptr<Store> store(new Store(options));
    Impl& impl = *store->impl_;
    auto fresh = prepare(options, impl);
    if (!fresh) return std::unexpected(fresh.error());

    auto env = open_env(options, options.read_only, impl);
    if (!env) return std::unexpected(env.error());
    impl.env = *env;
    int dead = 0;
    if (int rc = mdb_reader_check(impl.env, &dead); rc != 0)
        return std::unexpected(impl.error(rc, "clearing stale readers"));
    store->stale_readers_cleared_ = static_cast<size_t>(dead);

    if (auto r = open_databases(impl, options.read_only, *fresh); !r)
        return std::unexpected(r.error());
    if (auto r = size_reserve(impl); !r) return std::unexpected(r.error());
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
