// The side output: too-late events and undecodable records in seq order, each stored with its
// pipeline and key as columns (row_codec.h), bounded by side_bytes_max (oldest dropped), and
// deduplicated by the log position of the record that produced it (the high-water in meta).
#include <lmdb.h>

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "adapters/lmdb/row_codec.h"
#include "adapters/lmdb/store.h"
#include "adapters/lmdb/store_internal.h"

namespace tidemark::lmdb {

using namespace detail;

namespace {

constexpr std::string_view side_append_what = "appending side output";

// A side record to append: its stored value, and its log position.
struct SideValue {
    std::string value;
    SidePosition position;
};

struct SideCounters {
    uint64_t seq_next = 0, bytes = 0, dropped = 0, duplicates = 0;
    std::optional<SidePosition> high_water;  // nullopt: no positioned record appended yet
};

StoreResult<SideCounters> load_side_counters(Store::Impl& impl, MDB_txn* txn) {
    SideCounters c;
    auto read = impl.get_u64s(txn,
                              {{meta_side_seq_next, &c.seq_next},
                               {meta_side_bytes, &c.bytes},
                               {meta_side_dropped, &c.dropped},
                               {meta_side_duplicates, &c.duplicates}},
                              side_append_what);
    if (!read) return std::unexpected(read.error());
    c.seq_next = std::max(c.seq_next, seq_first);
    auto high_water = impl.get(txn, impl.meta, meta_side_high_water, side_append_what);
    if (!high_water) return std::unexpected(high_water.error());
    if (*high_water) {
        SidePosition p;
        if (!decode_side_position(**high_water, p))
            return std::unexpected(
                StoreError{errc::corrupt, "LMDB store " + impl.dir +
                                              ": meta entry 'side_high_water' is garbled. Move the "
                                              "directory aside"});
        c.high_water = p;
    }
    return c;
}

// seq_next, bytes and dropped always; duplicates and the high-water only when they moved, so a
// store without a high-water (written before side dedupe) keeps none until a positioned record.
StoreResult<void> store_side_counters(Store::Impl& impl, MDB_txn* txn, const SideCounters& c,
                                      const SideCounters& before) {
    const std::string_view what = side_append_what;
    if (auto p = impl.put_u64(txn, meta_side_seq_next, c.seq_next, what); !p) return p;
    if (auto p = impl.put_u64(txn, meta_side_bytes, c.bytes, what); !p) return p;
    if (auto p = impl.put_u64(txn, meta_side_dropped, c.dropped, what); !p) return p;
    if (c.duplicates != before.duplicates) {
        if (auto p = impl.put_u64(txn, meta_side_duplicates, c.duplicates, what); !p) return p;
    }
    if (c.high_water != before.high_water)
        return impl.put(txn, impl.meta, meta_side_high_water, encode_side_position(*c.high_water),
                        0, what);
    return {};
}

// Deletes the oldest rows until the side output is within bytes_max; rows of this batch (seq at
// or after batch_seq_first) may go too, and then count as dropped, not appended.
StoreResult<void> drop_oldest_side(Store::Impl& impl, MDB_txn* txn, uint64_t bytes_max,
                                   uint64_t batch_seq_first, SideCounters& c,
                                   SideAppendResult& res) {
    MDB_cursor* cur;
    if (int rc = mdb_cursor_open(txn, impl.side, &cur); rc != 0)
        return std::unexpected(impl.error(rc, side_append_what));
    MDB_val k, v;
    int rc = 0;
    while (c.bytes > bytes_max && (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST)) == 0) {
        const uint64_t cost = v.mv_size + row_key_bytes;
        const uint64_t dropped_seq = u64_of_key(view(k));
        if ((rc = mdb_cursor_del(cur, 0)) != 0) break;
        c.bytes -= cost;
        ++res.dropped;
        if (dropped_seq >= batch_seq_first) --res.appended;
    }
    mdb_cursor_close(cur);
    if (rc != 0 && rc != MDB_NOTFOUND) return std::unexpected(impl.error(rc, side_append_what));
    return {};
}

// Both side_append overloads, in one transaction.
StoreResult<SideAppendResult> append_side(Store::Impl& impl, uint64_t side_bytes_max,
                                          std::span<const SideValue> values) {
    return impl.write_within_reserve<SideAppendResult>(
        side_append_what, [&](MDB_txn* txn) -> StoreResult<SideAppendResult> {
            auto loaded = load_side_counters(impl, txn);
            if (!loaded) return std::unexpected(loaded.error());
            const SideCounters before = *loaded;
            SideCounters c = before;
            SideAppendResult res;
            for (const SideValue& s : values) {
                if (c.high_water && s.position <= *c.high_water) {
                    ++res.duplicates_skipped;
                    continue;
                }
                c.high_water = s.position;
                if (auto p = impl.put(txn, impl.side, u64_key(c.seq_next++), s.value, MDB_APPEND,
                                      side_append_what);
                    !p)
                    return std::unexpected(p.error());
                c.bytes += s.value.size() + row_key_bytes;
                ++res.appended;
            }
            const uint64_t batch_seq_first = c.seq_next - res.appended;
            if (c.bytes > side_bytes_max) {
                if (auto d = drop_oldest_side(impl, txn, side_bytes_max, batch_seq_first, c, res);
                    !d)
                    return std::unexpected(d.error());
            }
            c.dropped += res.dropped;
            c.duplicates += res.duplicates_skipped;
            if (auto s = store_side_counters(impl, txn, c, before); !s)
                return std::unexpected(s.error());
            return res;
        });
}

}  // namespace

StoreResult<SideAppendResult> Store::side_append(std::span<const SideRecord> records) {
    TM_WRITABLE();
    std::vector<SideValue> values;
    values.reserve(records.size());
    for (const SideRecord& r : records)
        values.push_back(
            {encode_side_row(r.pipeline, r.key, r.record), SidePosition{r.log_offset, r.ordinal}});
    return append_side(*impl_, options_.side_bytes_max, values);
}

StoreResult<std::vector<SideRow>> Store::side_peek(uint64_t from_seq, size_t limit) {
    return impl_->peek_rows<SideRow>(impl_->side, from_seq, limit, "reading side output",
                                     "side row", decode_side_row);
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
                auto v = impl_->get(txn, impl_->side, u64_key(seq), what);
                if (!v) return std::unexpected(v.error());
                if (!*v) continue;
                const uint64_t cost = (**v).size() + row_key_bytes;
                if (auto d = impl_->del(txn, impl_->side, u64_key(seq), what); !d)
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
    // See outbox.cpp: the freed pages wait for one more commit in a map used up to its reserve.
    release_freed_pages(*impl_, meta_side_seq_next);
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

}  // namespace tidemark::lmdb
