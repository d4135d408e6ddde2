// Store::outbox_append: a batch's ids deduplicated against the id index, the compaction of what
// a row supersedes, the rows in seq order, and the bound on the outbox's bytes.
//
// What a row costs is most of what a backfill costs (issue 31: its results are one row each,
// committed slice by slice): so the ids are looked up and put in key order with one cursor per
// generation (neighbouring keys, mostly on the page the cursor is on, not a walk from the root
// each), the rows are put through one cursor with MDB_APPEND (their seqs only grow), the keys
// are built without allocating, and the compaction index is written only when something reads it:
// compaction (compact_superseded) and the health row. Without compaction the index had no reader: a
// store opened again claims every row it holds (Store::open sets the claim to seq_next), so no
// entry written before that is ever used to compact, whatever the option is in the next run.
#include <lmdb.h>

#include <algorithm>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "adapters/lmdb/outbox_internal.h"
#include "adapters/lmdb/row_codec.h"
#include "adapters/lmdb/store.h"
#include "adapters/lmdb/store_internal.h"
#include "core/crash_point.h"

namespace tidemark::lmdb {

using namespace detail;
using core::crash_point;
using core::CrashPoint;

namespace {

constexpr std::string_view append_what = "appending to the outbox";

// One outbox_append transaction and what it has done so far.
struct AppendBatch {
    Store::Impl& impl;
    MDB_txn* txn;
    const StoreOptions& options;
    uint64_t claimed;  // rows with a seq below it may be on the wire: never compacted
    OutboxCounters counters;
    IdGenerations ids;
    uint64_t bytes_before = 0;     // the outbox's bytes before the batch
    uint64_t batch_seq_first = 0;  // the seq of the batch's first row
    AppendResult result;
    MDB_cursor* rows_cursor = nullptr;  // on impl.outbox: every row goes in with MDB_APPEND
};

// A cursor of the batch's write transaction, closed when the scope ends (an error or not): the
// transaction is aborted or committed only after.
class ScopedCursor {
  public:
    ScopedCursor() = default;
    ScopedCursor(const ScopedCursor&) = delete;
    ScopedCursor& operator=(const ScopedCursor&) = delete;
    ~ScopedCursor() { close(); }
    int open(MDB_txn* txn, MDB_dbi dbi) {
        close();
        return mdb_cursor_open(txn, dbi, &cursor_);
    }
    void close() {
        if (cursor_) mdb_cursor_close(cursor_);
        cursor_ = nullptr;
    }
    MDB_cursor* get() const { return cursor_; }

  private:
    MDB_cursor* cursor_ = nullptr;
};

// The batch's rows in id key order, each with its key, what the dedupe found and, once appended,
// its seq. The key is in the slot, not looked up by row: sorting compares it (4,096 rows: ~50 k
// comparisons a batch).
struct BatchIds {
    struct Slot {
        IdKey key;
        uint32_t row = 0;
        bool seen = false;  // in the index already, or an earlier row of the batch has the id
        uint64_t seq = 0;   // 0: not appended (seen)
    };
    std::vector<Slot> by_key;
    std::vector<uint32_t> slot_of_row;  // row -> its place in by_key
};

// Marks the slots whose key is in generation dbi: one cursor, the keys in ascending order, each
// found with MDB_SET_RANGE from where the previous one left it.
StoreResult<void> look_up_ids(AppendBatch& b, BatchIds& ids, MDB_dbi dbi) {
    ScopedCursor cur;
    if (int rc = cur.open(b.txn, dbi); rc != 0)
        return std::unexpected(b.impl.error(rc, append_what));
    for (BatchIds::Slot& slot : ids.by_key) {
        if (slot.seen) continue;
        const std::string_view key = slot.key.view();
        MDB_val k = val(key), v;
        const int rc = mdb_cursor_get(cur.get(), &k, &v, MDB_SET_RANGE);
        if (rc == MDB_NOTFOUND) break;  // every key from here on is above the generation's last
        if (rc != 0) return std::unexpected(b.impl.error(rc, append_what));
        if (view(k) == key) slot.seen = true;
    }
    return {};
}

// Which rows of the batch are duplicates: of an id in either generation, or of an earlier row of
// the batch (the first of a repeated id is kept, as when each row was looked up after the rows
// before it were put).
StoreResult<BatchIds> dedupe_ids(AppendBatch& b, std::span<const OutboxRow> rows) {
    BatchIds ids;
    ids.by_key.resize(rows.size());
    for (uint32_t i = 0; i < rows.size(); ++i) {
        ids.by_key[i].key = id_key(rows[i]);
        ids.by_key[i].row = i;
    }
    std::sort(ids.by_key.begin(), ids.by_key.end(), [](const auto& x, const auto& y) {
        const auto c = x.key <=> y.key;
        return c < 0 || (c == 0 && x.row < y.row);
    });
    for (size_t i = 1; i < ids.by_key.size(); ++i)
        ids.by_key[i].seen = ids.by_key[i].key == ids.by_key[i - 1].key;
    const MDB_dbi generations[] = {b.ids.current, b.ids.older};
    const size_t looked_in = b.ids.older_below == 0 ? 1 : 2;  // 0: the older one is empty
    for (size_t g = 0; g < looked_in; ++g) {
        if (auto l = look_up_ids(b, ids, generations[g]); !l) return std::unexpected(l.error());
        // Until prune_ids drops a generation an upgrade found ids in, they are found by the id
        // alone, as format 7 keyed them.
        if (!b.ids.legacy(g == 0)) continue;
        for (BatchIds::Slot& slot : ids.by_key) {
            if (slot.seen) continue;
            auto seen = b.impl.get(b.txn, generations[g], u64_key(rows[slot.row].id), append_what);
            if (!seen) return std::unexpected(seen.error());
            slot.seen = seen->has_value();
        }
    }
    ids.slot_of_row.resize(rows.size());
    for (uint32_t s = 0; s < ids.by_key.size(); ++s)
        ids.slot_of_row[ids.by_key[s].row] = s;
    return ids;
}

// Puts the appended rows' ids (key -> seq) into the current generation, in key order through one
// cursor. The id stays known even if its row was compacted or dropped: a regenerated emission
// after a crash is recognised either way.
//
// When every new key sorts after the generation's last one (results of windows that end after
// every one indexed so far: a stream of results in window-end order), they go in with
// MDB_APPEND: no search for each key's place, and a full page splits at its end, so the index's
// pages fill instead of being left half empty. Otherwise (a backfill's old windows after live
// ones' newer ones, or windows out of order) ordinary puts. Either way a key already there is
// refused (MDB_APPEND refuses any key not above the last: MDB_KEYEXIST): dedupe_ids found none
// of them, so one would be a bug, and fails the batch.
StoreResult<void> put_ids(AppendBatch& b, const BatchIds& ids) {
    const auto first_new = std::find_if(ids.by_key.begin(), ids.by_key.end(),
                                        [](const BatchIds::Slot& s) { return !s.seen; });
    if (first_new == ids.by_key.end()) return {};
    ScopedCursor cur;
    if (int rc = cur.open(b.txn, b.ids.current); rc != 0)
        return std::unexpected(b.impl.error(rc, append_what));
    MDB_val last_k, last_v;
    const int last = mdb_cursor_get(cur.get(), &last_k, &last_v, MDB_LAST);
    if (last != 0 && last != MDB_NOTFOUND) return std::unexpected(b.impl.error(last, append_what));
    // std::string_view compares as memcmp, then the shorter first: LMDB's default order.
    const bool after_last = last == MDB_NOTFOUND || view(last_k) < first_new->key.view();
    const unsigned flags = after_last ? MDB_APPEND : MDB_NOOVERWRITE;
    for (auto it = first_new; it != ids.by_key.end(); ++it) {
        if (it->seen) continue;
        TM_ASSERT(it->seq >= b.batch_seq_first);
        const SeqKey seq = seq_key(it->seq);
        MDB_val k = val(it->key.view()), v = val(seq.view());
        if (int rc = mdb_cursor_put(cur.get(), &k, &v, flags); rc != 0)
            return std::unexpected(b.impl.error(rc, append_what));
    }
    return {};
}

// Compacts the unsent row that row supersedes in its window, if any. Returns whether row itself
// is still to be written.
StoreResult<bool> compact_superseded(AppendBatch& b, const OutboxRow& row, std::string_view wkey) {
    auto latest = b.impl.get(b.txn, b.impl.windows, wkey, append_what);
    if (!latest) return std::unexpected(latest.error());
    const uint64_t old_seq = (*latest && (**latest).size() == 8) ? u64_of_key(**latest) : 0;
    OutboxRow old;
    bool old_unsent = false;
    if (old_seq != 0 && old_seq >= b.claimed) {
        auto ov = b.impl.get(b.txn, b.impl.outbox, seq_key(old_seq).view(), append_what);
        if (!ov) return std::unexpected(ov.error());
        old_unsent = *ov && decode_outbox_row(**ov, old_seq, old);
    }
    // Only a final/update is ever superseded: an unsent retract cancels a row that may have
    // reached the consumer, so it must travel.
    const auto retract = core::EmissionKind::retract;
    if (!old_unsent || old.kind == retract) return true;
    // A retract of the unsent row cancels it only when the consumer can hold nothing of the
    // window from before it (it is the window's first row, or its previous revision was
    // retracted first); else the consumer may hold an earlier revision, which only the retract
    // withdraws: it replaces the unsent row and travels (issue 24: a session merged away in
    // upsert mode, its update and the merge's retract both dropped, left the consumer with the
    // final it had been sent).
    const bool nothing_before_old =
        (old.revision == 0 && old.kind == core::EmissionKind::final_result) || old.after_retract;
    const bool retracts_old = row.kind == retract && row.revision == old.revision;
    const bool cancels_old = retracts_old && nothing_before_old;
    const bool replaces_old =
        (row.kind != retract && row.revision > old.revision) || (retracts_old && !cancels_old);
    if (!cancels_old && !replaces_old) return true;
    auto removed = b.impl.remove_outbox_row(b.txn, old_seq, append_what);
    if (!removed) return std::unexpected(removed.error());
    b.counters.bytes -= *removed;
    // A retract of a row never sent: neither was sent, nothing to show, nothing to cancel.
    b.result.compacted += cancels_old ? 2 : 1;
    return !cancels_old;
}

// A health row replaces the health row before it, whether or not a peek has returned it
// (outbox_health_rows_max says why that is safe), and whatever compact_superseded says.
StoreResult<void> replace_health_row(AppendBatch& b, std::string_view wkey) {
    auto latest = b.impl.get(b.txn, b.impl.windows, wkey, append_what);
    if (!latest) return std::unexpected(latest.error());
    if (!*latest || (**latest).size() != 8) return {};
    auto removed = b.impl.remove_outbox_row(b.txn, u64_of_key(**latest), append_what);
    if (!removed) return std::unexpected(removed.error());
    if (*removed == 0) return {};  // delivered (or dropped) already: a stale index entry
    b.counters.bytes -= *removed;
    ++b.result.compacted;
    return {};
}

// Appends one row dedupe_ids did not find: its seq, compaction of the row it supersedes, the row
// itself and, where something reads it, its window's latest seq. Returns the seq.
StoreResult<uint64_t> append_row(AppendBatch& b, const OutboxRow& row) {
    Store::Impl& impl = b.impl;
    const uint64_t seq = b.counters.seq_next++;
    const SeqKey key = seq_key(seq);
    // The index's readers: a health row's replacement, always; compaction, when on.
    std::optional<std::string> wkey;
    if (row.health_record || b.options.compact_superseded) wkey = window_key(row);
    if (row.health_record) {
        TM_ASSERT(wkey);
        if (auto r = replace_health_row(b, *wkey); !r) return std::unexpected(r.error());
    } else if (wkey) {
        auto write_row = compact_superseded(b, row, *wkey);
        if (!write_row) return std::unexpected(write_row.error());
        if (!*write_row) return seq;
    }
    // MDB_APPEND: seqs only grow, so each row goes after the last (a smaller seq, a bug, is
    // refused with MDB_KEYEXIST). Through the batch's cursor, which compact_superseded's and
    // replace_health_row's deletes leave valid (LMDB fixes up a transaction's open cursors).
    // MDB_RESERVE: the row is encoded straight into the page, not into a buffer LMDB copies.
    const size_t row_bytes = outbox_row_bytes(row);
    MDB_val k = val(key.view()), v{row_bytes, nullptr};
    if (int rc = mdb_cursor_put(b.rows_cursor, &k, &v, MDB_APPEND | MDB_RESERVE); rc != 0)
        return std::unexpected(impl.error(rc, append_what));
    encode_outbox_row(row, static_cast<char*>(v.mv_data));
    b.counters.bytes += row_bytes + row_key_bytes;
    ++b.result.appended;
    if (wkey) {
        if (auto p = impl.put(b.txn, impl.windows, *wkey, key.view(), 0, append_what); !p)
            return std::unexpected(p.error());
    }
    return seq;
}

// when_full = drop_oldest: deletes the oldest rows, sent or not, until the outbox is within
// outbox_bytes_max. Rows of this batch may go too (then they count as dropped, not appended).
StoreResult<void> drop_oldest(AppendBatch& b) {
    ScopedCursor cur;
    if (int rc = cur.open(b.txn, b.impl.outbox); rc != 0)
        return std::unexpected(b.impl.error(rc, append_what));
    while (b.counters.bytes > b.options.outbox_bytes_max) {
        MDB_val k, v;
        int rc = mdb_cursor_get(cur.get(), &k, &v, MDB_FIRST);
        if (rc == MDB_NOTFOUND) break;
        if (rc != 0) return std::unexpected(b.impl.error(rc, append_what));
        const uint64_t seq = u64_of_key(view(k));
        auto removed = b.impl.remove_outbox_row(b.txn, seq, append_what);
        if (!removed) return std::unexpected(removed.error());
        b.counters.bytes -= *removed;
        ++b.result.dropped;
        if (seq >= b.batch_seq_first) --b.result.appended;
    }
    return {};
}

// The bound, once the batch is in: nothing to do within it; beyond it drop_oldest, or refuse
// the batch (pause_ingest: errc::full with an empty message, filled in by outbox_append).
StoreResult<void> enforce_bound(AppendBatch& b) {
    const uint64_t bytes = b.counters.bytes;
    if (bytes <= b.options.outbox_bytes_max || bytes <= b.bytes_before) return {};
    if (b.options.outbox_when_full == WhenFull::drop_oldest) return drop_oldest(b);
    // An empty outbox takes the batch whatever its size (one engine step's results, bounded by
    // the runtime): refused, a batch larger than the bound would wait forever for a drain that
    // has nothing left to drain.
    if (b.bytes_before == 0) return {};
    return std::unexpected(StoreError{errc::full, ""});
}

}  // namespace

StoreResult<AppendResult> Store::outbox_append(std::span<const OutboxRow> rows) {
    TM_WRITABLE();
    TM_ASSERT(rows.size() <= UINT32_MAX);  // BatchIds numbers the rows in 32 bits
    // Which rows may be compacted is decided against the claim under claim_mutex_, held until
    // the commit: a peek before it has claimed its rows, a peek after it sees the compaction.
    // Taken inside the write txn, so a peek waits for this append only, not for other writers.
    std::unique_lock claim_lock(claim_mutex_, std::defer_lock);
    uint64_t full_bytes = 0;
    auto r = impl_->write_within_reserve<AppendResult>(
        append_what, [&](MDB_txn* txn) -> StoreResult<AppendResult> {
            if (options_.compact_superseded) claim_lock.lock();
            auto counters = load_outbox_counters(*impl_, txn);
            if (!counters) return std::unexpected(counters.error());
            auto generations = load_id_generations(*impl_, txn);
            if (!generations) return std::unexpected(generations.error());
            AppendBatch b{*impl_,        txn,          options_,        claimed_seq_next_.load(),
                          *counters,     *generations, counters->bytes, counters->seq_next,
                          AppendResult{}};
            auto ids = dedupe_ids(b, rows);
            if (!ids) return std::unexpected(ids.error());
            {
                ScopedCursor rows_cursor;
                if (int rc = rows_cursor.open(txn, impl_->outbox); rc != 0)
                    return std::unexpected(impl_->error(rc, append_what));
                b.rows_cursor = rows_cursor.get();
                for (uint32_t i = 0; i < rows.size(); ++i) {
                    BatchIds::Slot& slot = ids->by_key[ids->slot_of_row[i]];
                    if (slot.seen) {
                        ++b.result.duplicates_skipped;
                        continue;
                    }
                    auto seq = append_row(b, rows[i]);
                    if (!seq) return std::unexpected(seq.error());
                    slot.seq = *seq;
                }
                b.rows_cursor = nullptr;
            }
            if (auto p = put_ids(b, *ids); !p) return std::unexpected(p.error());
            if (auto e = enforce_bound(b); !e) {
                full_bytes = b.counters.bytes;
                return std::unexpected(e.error());
            }
            b.counters.dropped += b.result.dropped;
            b.counters.duplicates += b.result.duplicates_skipped;
            b.counters.compacted += b.result.compacted;
            if (auto s = store_outbox_counters(*impl_, txn, b.counters); !s)
                return std::unexpected(s.error());
            return b.result;
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

}  // namespace tidemark::lmdb
