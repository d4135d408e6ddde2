// The outbox but its appends (outbox_append.cpp): peeks and their claim, deletes and the sweep
// of the compaction index (outbox_windows), the pruning of the id index's generations, the stats,
// and the durable counters in meta both files keep.
#include <lmdb.h>

#include <algorithm>
#include <limits>
#include <mutex>
#include <string>
#include <utility>

#include "adapters/lmdb/outbox_internal.h"
#include "adapters/lmdb/row_codec.h"
#include "adapters/lmdb/store.h"
#include "adapters/lmdb/store_internal.h"
#include "core/crash_point.h"

namespace tidemark::lmdb {

using namespace detail;
using core::crash_point;
using core::CrashPoint;

StoreError Store::Impl::garbled_outbox_row(uint64_t seq) const {
    return StoreError{errc::corrupt, "LMDB store " + dir + ": outbox row " + std::to_string(seq) +
                                         " is garbled. Move the directory aside"};
}

StoreResult<uint64_t> Store::Impl::remove_outbox_row(MDB_txn* txn, uint64_t seq,
                                                     std::string_view what) {
    std::string k = u64_key(seq);
    auto v = get(txn, outbox, k, what);
    if (!v) return std::unexpected(v.error());
    if (!*v) return uint64_t{0};
    uint64_t cost = (**v).size() + row_key_bytes;
    OutboxRow row;
    if (!decode_outbox_row(**v, seq, row)) return std::unexpected(garbled_outbox_row(seq));
    if (auto wk = window_key(row)) {
        auto w = get(txn, windows, *wk, what);
        if (!w) return std::unexpected(w.error());
        if (*w && (**w).size() == 8 && u64_of_key(**w) == seq) {
            if (auto d = del(txn, windows, *wk, what); !d) return std::unexpected(d.error());
        }
    }
    if (auto d = del(txn, outbox, k, what); !d) return std::unexpected(d.error());
    return cost;
}

namespace detail {

StoreResult<OutboxCounters> load_outbox_counters(Store::Impl& impl, MDB_txn* txn) {
    OutboxCounters c;
    auto read = impl.get_u64s(txn,
                              {{meta_outbox_seq_next, &c.seq_next},
                               {meta_outbox_bytes, &c.bytes},
                               {meta_outbox_dropped, &c.dropped},
                               {meta_outbox_duplicates, &c.duplicates},
                               {meta_outbox_compacted, &c.compacted}},
                              "reading outbox counters");
    if (!read) return std::unexpected(read.error());
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

StoreResult<IdGenerations> load_id_generations(Store::Impl& impl, MDB_txn* txn) {
    IdGenerations g;
    auto read = impl.get_u64s(txn,
                              {{meta_outbox_ids_current, &g.slot},
                               {meta_outbox_ids_older_below, &g.older_below},
                               {meta_outbox_ids_legacy_slots, &g.legacy_slots}},
                              "reading the id generations");
    if (!read) return std::unexpected(read.error());
    if (g.slot > 1 || g.legacy_slots > 3)
        return std::unexpected(StoreError{errc::corrupt, "LMDB store " + impl.dir +
                                                             ": outbox_ids_current or "
                                                             "outbox_ids_legacy_slots is "
                                                             "garbled. "
                                                             "Move the directory aside"});
    g.current = impl.ids[g.slot];
    g.older = impl.ids[1 - g.slot];
    return g;
}

// LMDB hands the pages a commit frees back only two commits later (the snapshot before it must
// stay whole until the next meta page is durable). In a map used up to its reserve, the pages a
// delete frees (the forwarder draining a full outbox) would wait for a commit that no refused
// append ever makes (a refused write commits nothing): appends, side output and checkpoints
// would stay refused with the outbox empty until some other write commits. So after a delete in
// such a map, one small commit (meta_key put back as it is) lets the next write have them; in a map
// with room, nothing (no extra fsync per delete). A failure here is left to the next delete. Used
// by side.cpp too.
void release_freed_pages(Store::Impl& impl, std::string_view meta_key) {
    MDB_envinfo info;
    if (mdb_env_info(impl.env, &info) != 0) return;
    if (info.me_last_pgno + 1 + 2 * impl.reserve_pages < impl.map_pages) return;
    const std::string_view what = "committing to reuse freed pages";
    (void)impl.write<void>(what, [&](MDB_txn* txn) -> StoreResult<void> {
        auto v = impl.get(txn, impl.meta, meta_key, what);
        if (!v) return std::unexpected(v.error());
        if (!*v) return {};
        const std::string same(**v);
        return impl.put(txn, impl.meta, meta_key, same, 0, what);
    });
}

}  // namespace detail

StoreResult<std::vector<OutboxRow>> Store::outbox_peek(uint64_t from_seq, size_t limit) {
    // The snapshot and the claim under one lock with outbox_append's compaction (see there): no
    // append can have decided to compact a returned row, nor decide it later.
    std::lock_guard claim_lock(claim_mutex_);
    auto rows = impl_->peek_rows<OutboxRow>(impl_->outbox, from_seq, limit, "reading the outbox",
                                            "outbox row", decode_outbox_row);
    if (rows && !rows->empty()) set_claimed(rows->back().seq + 1);
    return rows;
}

namespace {

constexpr std::string_view delete_what = "deleting outbox rows";

// outbox_delete leaves a deleted row's entry in outbox_windows: the index is keyed by window,
// so removing each entry there dirtied one page of the index per row, at random, and those
// pages were ~90 % of what a delete commit wrote (bench_forward's LMDB outbox drained ~30 %
// slower than a memory one). A stale entry is harmless: it names a seq that is never reused, and
// compaction finds that row gone (or below the claim). Each delete instead sweeps this many
// index entries per row deleted, from where the last sweep stopped, and removes those that
// point below the oldest row left: consecutive keys, so a few pages per commit. In one pass
// over the W entries at most W / 4 rows are deleted, so stale entries stay below a third of the
// rows the outbox holds (S <= (L + S) / 4), and an outbox that is drained empty leaves at most
// that many behind until the next deletes.
constexpr size_t windows_swept_per_deleted_row = 4;
// A sweep also looks at this many entries for a small delete, so that the few rows of a quiet
// link clear the index too.
constexpr size_t windows_swept_min = 64;

// Removes the rows (missing ones are fine) with one cursor: MDB_SET finds a seq on the page the
// cursor is on without a walk from the root when the seqs follow each other, as acknowledgements
// do. Each row is still decoded, into one reused row (no allocation once its strings have
// grown), so that a damaged row is refused here as in outbox_peek, not deleted unseen.
StoreResult<void> delete_rows(Store::Impl& impl, MDB_txn* txn, std::span<const uint64_t> seqs,
                              OutboxCounters& counters) {
    MDB_cursor* cur;
    if (int rc = mdb_cursor_open(txn, impl.outbox, &cur); rc != 0)
        return std::unexpected(impl.error(rc, delete_what));
    int rc = 0;
    OutboxRow row;
    for (uint64_t seq : seqs) {
        const std::string key = u64_key(seq);
        MDB_val k = val(key), v;
        rc = mdb_cursor_get(cur, &k, &v, MDB_SET);
        if (rc == MDB_NOTFOUND) {
            rc = 0;
            continue;
        }
        if (rc != 0) break;
        if (!decode_outbox_row(view(v), seq, row)) {
            mdb_cursor_close(cur);
            return std::unexpected(impl.garbled_outbox_row(seq));
        }
        const uint64_t cost = v.mv_size + row_key_bytes;
        TM_ASSERT(counters.bytes >= cost);
        counters.bytes -= cost;
        if ((rc = mdb_cursor_del(cur, 0)) != 0) break;
    }
    mdb_cursor_close(cur);
    if (rc != 0) return std::unexpected(impl.error(rc, delete_what));
    return {};
}

// Looks at up to `budget` outbox_windows entries from impl.windows_sweep_from on (on from the
// first at the end, once) and removes those naming a seq below the oldest row left: every row
// below it is gone. An entry above it whose row was deleted out of order stays until the
// oldest row passes it.
StoreResult<void> sweep_windows(Store::Impl& impl, MDB_txn* txn, size_t budget) {
    uint64_t oldest_seq = std::numeric_limits<uint64_t>::max();  // an empty outbox: all stale
    MDB_cursor* cur;
    if (int rc = mdb_cursor_open(txn, impl.outbox, &cur); rc != 0)
        return std::unexpected(impl.error(rc, delete_what));
    MDB_val k, v;
    int rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
    if (rc == 0) oldest_seq = u64_of_key(view(k));
    mdb_cursor_close(cur);
    if (rc != 0 && rc != MDB_NOTFOUND) return std::unexpected(impl.error(rc, delete_what));

    if ((rc = mdb_cursor_open(txn, impl.windows, &cur)) != 0)
        return std::unexpected(impl.error(rc, delete_what));
    bool from_first = impl.windows_sweep_from.empty();
    if (from_first) {
        rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
    } else {
        k = val(impl.windows_sweep_from);
        rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
    }
    for (size_t looked = 0;;) {
        if (rc == MDB_NOTFOUND && !from_first) {  // the end: on from the first, once
            from_first = true;
            rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
            continue;
        }
        if (rc != 0 || looked == budget) break;
        ++looked;
        // Entries are 8-byte seqs; anything else is of no use to compaction either.
        if (v.mv_size != 8 || u64_of_key(view(v)) < oldest_seq) {
            if ((rc = mdb_cursor_del(cur, 0)) != 0) break;
        }
        rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
    }
    // Where the next sweep starts: the first entry not looked at, or the start again.
    if (rc == 0) impl.windows_sweep_from.assign(view(k));
    if (rc == MDB_NOTFOUND) impl.windows_sweep_from.clear();
    mdb_cursor_close(cur);
    if (rc != 0 && rc != MDB_NOTFOUND) return std::unexpected(impl.error(rc, delete_what));
    return {};
}

}  // namespace

StoreResult<void> Store::outbox_delete(std::span<const uint64_t> seqs) {
    TM_WRITABLE();
    auto delete_txn = [&](std::span<const uint64_t> part) {
        return impl_->write<void>(delete_what, [&](MDB_txn* txn) -> StoreResult<void> {
            auto c = load_outbox_counters(*impl_, txn);
            if (!c) return std::unexpected(c.error());
            if (auto d = delete_rows(*impl_, txn, part, *c); !d) return d;
            // Not in the smaller transactions of a full map (delete_halving_on_map_full): there
            // the rows alone must fit, and the next delete sweeps.
            if (part.size() == seqs.size()) {
                const size_t budget =
                    std::max(windows_swept_min, windows_swept_per_deleted_row * part.size());
                if (auto s = sweep_windows(*impl_, txn, budget); !s) return s;
            }
            return store_outbox_counters(*impl_, txn, *c);
        });
    };
    size_t deleted = 0;
    auto r = delete_halving_on_map_full(seqs, delete_txn, deleted);
    if (!r) return std::unexpected(partly_done(std::move(r.error()), deleted, seqs.size()));
    release_freed_pages(*impl_, meta_outbox_seq_next);
    crash_point(CrashPoint::after_outbox_delete);
    return r;
}

StoreResult<size_t> Store::prune_ids(uint64_t below_seq) {
    TM_WRITABLE();
    // A drop frees the older generation's pages without writing them (LMDB walks its branch
    // pages only), so the cost no longer grows with the ids forgotten as deleting each did: the
    // index is keyed by the id, a hash, and a delete per id rewrote pages all over the tree.
    return impl_->write<size_t>("pruning outbox ids", [&](MDB_txn* txn) -> StoreResult<size_t> {
        const std::string_view what = "pruning outbox ids";
        auto g = load_id_generations(*impl_, txn);
        if (!g) return std::unexpected(g.error());
        auto c = load_outbox_counters(*impl_, txn);
        if (!c) return std::unexpected(c.error());
        size_t dropped = 0;
        // Twice at most: the older generation, then the current one if below_seq covers it too.
        for (int round = 0; round < 2 && g->older_below <= below_seq; ++round) {
            MDB_stat older, current;
            if (int rc = mdb_stat(txn, g->older, &older); rc != 0)
                return std::unexpected(impl_->error(rc, what));
            if (int rc = mdb_stat(txn, g->current, &current); rc != 0)
                return std::unexpected(impl_->error(rc, what));
            if (current.ms_entries == 0 && older.ms_entries == 0) break;
            if (int rc = mdb_drop(txn, g->older, 0); rc != 0)
                return std::unexpected(impl_->error(rc, what));
            g->legacy_slots &= ~(uint64_t{1} << (1 - g->slot));  // no format 7 ids left in it
            dropped += older.ms_entries;
            g->slot = 1 - g->slot;
            std::swap(g->current, g->older);
            g->older_below = current.ms_entries == 0 ? 0 : c->seq_next;
        }
        if (auto p = impl_->put_u64(txn, meta_outbox_ids_current, g->slot, what); !p)
            return std::unexpected(p.error());
        if (auto p = impl_->put_u64(txn, meta_outbox_ids_older_below, g->older_below, what); !p)
            return std::unexpected(p.error());
        if (auto p = impl_->put_u64(txn, meta_outbox_ids_legacy_slots, g->legacy_slots, what); !p)
            return std::unexpected(p.error());
        return dropped;
    });
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
            // The health row, if any: the one the health key names, when still there (the
            // entry of a delivered one stays until a sweep).
            auto health = impl_->get(txn, impl_->windows, health_key(), "reading outbox stats");
            if (!health) return std::unexpected(health.error());
            if (*health && (**health).size() == 8) {
                auto row = impl_->get(txn, impl_->outbox, **health, "reading outbox stats");
                if (!row) return std::unexpected(row.error());
                s.health_rows = *row ? 1 : 0;
            }
            MDB_cursor* cur;
            if (int rc = mdb_cursor_open(txn, impl_->outbox, &cur); rc != 0)
                return std::unexpected(impl_->error(rc, "reading outbox stats"));
            MDB_val k, v;
            int rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
            if (rc == 0) {
                s.oldest_seq = u64_of_key(view(k));
                OutboxRow oldest;
                if (decode_outbox_row(view(v), s.oldest_seq, oldest))
                    s.oldest_enqueued_ms = oldest.enqueued_ms;
            }
            mdb_cursor_close(cur);
            if (rc != 0 && rc != MDB_NOTFOUND)
                return std::unexpected(impl_->error(rc, "reading outbox stats"));
            return s;
        });
}

}  // namespace tidemark::lmdb
