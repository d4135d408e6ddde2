// MAP_FULL in the middle of a batch (issue 14): the LMDB map is sized so that an outbox batch, and
// then a side-output batch, fits part way. The write must be refused whole (no row, id, seq,
// counter or side high-water of it visible), say why, keep every row written before, and once
// rows are drained the same batch must go in: a half-recorded batch would make the retry skip
// its rows as duplicates, which loses them.
#include <catch2/catch.hpp>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "adapters/lmdb/store.h"
#include "tests/adapters/lmdb/lmdb_test_support.h"

using namespace tidemark::lmdb;
using tidemark::lmdb::test::TempDir;

namespace {

constexpr uint64_t map_bytes = 1 << 20;
constexpr size_t batch_rows = 48;
constexpr size_t payload_bytes = 1500;

std::unique_ptr<Store> open_store(const std::string& dir, WhenFull when_full) {
    StoreOptions o;
    o.dir = dir;
    o.map_size_bytes = map_bytes;
    o.outbox_bytes_max = uint64_t{1} << 30;  // the map, not the bounds, must stop the writes
    o.side_bytes_max = uint64_t{1} << 30;
    o.outbox_when_full = when_full;
    auto s = Store::open(o);
    if (!s) FAIL("open: " << s.error().message);
    return std::move(*s);
}

// Scattered ids and keys, so that the batch touches pages all over the indexes.
OutboxRow row_numbered(uint64_t n) {
    OutboxRow row;
    row.id = n * 0x9E3779B97F4A7C15ull;
    row.pipeline = "p";
    row.key = "k" + std::to_string(n);
    row.window_start_ms = static_cast<int64_t>(n) * 1000;
    row.window_end_ms = row.window_start_ms + 1000;
    row.enqueued_ms = 1764400000000;
    row.payload = std::string(payload_bytes, static_cast<char>('a' + n % 26));
    return row;
}

std::vector<OutboxRow> outbox_batch(uint64_t first) {
    std::vector<OutboxRow> batch;
    for (uint64_t i = 0; i < batch_rows; ++i)
        batch.push_back(row_numbered(first + i));
    return batch;
}

// What a reader sees of the outbox: id -> (seq, payload), and the counters.
struct OutboxView {
    std::map<uint64_t, std::pair<uint64_t, std::string>> rows;
    OutboxStats stats;
    bool operator==(const OutboxView& o) const {
        return rows == o.rows && stats.rows == o.stats.rows && stats.bytes == o.stats.bytes &&
               stats.seq_next == o.stats.seq_next && stats.dropped == o.stats.dropped &&
               stats.duplicates_skipped == o.stats.duplicates_skipped &&
               stats.compacted == o.stats.compacted;
    }
};

OutboxView outbox_view(Store& s) {
    OutboxView v;
    const std::vector<OutboxRow> rows = s.outbox_peek(0, 1 << 20).value();
    for (const OutboxRow& r : rows)
        v.rows[r.id] = {r.seq, r.payload};
    v.stats = s.outbox_stats().value();
    return v;
}

SideRecord side_numbered(uint64_t n) {
    return SideRecord(
        1000 + n * 64, static_cast<uint32_t>(n % 3),
        "{\"late\":" + std::to_string(n) + ",\"pad\":\"" + std::string(payload_bytes, 's') + "\"}",
        "p", "k" + std::to_string(n));
}

std::vector<SideRecord> side_batch(uint64_t first) {
    std::vector<SideRecord> batch;
    for (uint64_t i = 0; i < batch_rows; ++i)
        batch.push_back(side_numbered(first + i));
    return batch;
}

struct SideView {
    std::vector<SideRow> rows;
    SideStats stats;
};

SideView side_view(Store& s) {
    return {s.side_peek(0, 1 << 20).value(), s.side_stats().value()};
}

void drain_outbox(Store& s) {
    std::vector<uint64_t> seqs;
    const std::vector<OutboxRow> rows = s.outbox_peek(0, 1 << 20).value();
    for (const OutboxRow& r : rows)
        seqs.push_back(r.seq);
    auto d = s.outbox_delete(seqs);
    INFO((d ? "" : d.error().message));
    REQUIRE(d);
}

void drain_side(Store& s) {
    std::vector<uint64_t> seqs;
    const std::vector<SideRow> rows = s.side_peek(0, 1 << 20).value();
    for (const SideRow& r : rows)
        seqs.push_back(r.seq);
    auto d = s.side_delete(seqs);
    INFO((d ? "" : d.error().message));
    REQUIRE(d);
}

}  // namespace

TEST_CASE("MAP_FULL part way through an outbox batch refuses it whole; the retry loses nothing",
          "[faults][lmdb]") {
    const WhenFull when_full = GENERATE(WhenFull::drop_oldest, WhenFull::pause_ingest);
    INFO("when_full " << (when_full == WhenFull::drop_oldest ? "drop_oldest" : "pause_ingest"));
    TempDir tmp;
    auto s = open_store(tmp.store(), when_full);

    uint64_t next = 1;
    std::set<uint64_t> accepted;  // ids of rows whose append returned success
    StoreError refused;
    for (int attempt = 0; attempt < 1000; ++attempt) {
        auto r = s->outbox_append(outbox_batch(next));
        if (!r) {
            refused = r.error();
            break;
        }
        REQUIRE(r->appended == batch_rows);
        for (const OutboxRow& row : outbox_batch(next))
            accepted.insert(row.id);
        next += batch_rows;
    }
    REQUIRE(refused.code == errc::map_full);
    CHECK_THAT(refused.message, Catch::Contains("storage.map_size"));
    REQUIRE(accepted.size() >= 4 * batch_rows);

    // Nothing of the refused batch is visible, everything accepted before it is.
    const OutboxView before = outbox_view(*s);
    CHECK(before.stats.dropped == 0);
    std::set<uint64_t> present;
    for (const auto& [id, row] : before.rows)
        present.insert(id);
    CHECK(present == accepted);
    // Refused again, and again nothing changes: a full map is not made worse by retries.
    const std::vector<OutboxRow> failed = outbox_batch(next);
    auto again = s->outbox_append(failed);
    REQUIRE(!again);
    CHECK(again.error().code == errc::map_full);
    CHECK(outbox_view(*s) == before);

    // The batch overflowed part way: its first row alone still fits.
    auto first = s->outbox_append(std::span<const OutboxRow>(failed).first(1));
    INFO((first ? "" : first.error().message));
    REQUIRE(first);
    CHECK(first->appended == 1);
    accepted.insert(failed[0].id);

    // The forwarder drains the outbox (upstream acknowledged it); the same batch then goes in
    // whole: the row already there is the only one skipped as a duplicate.
    drain_outbox(*s);
    auto retried = s->outbox_append(failed);
    INFO((retried ? "" : retried.error().message));
    REQUIRE(retried);
    CHECK(retried->appended == batch_rows - 1);
    CHECK(retried->duplicates_skipped == 1);
    const OutboxView after = outbox_view(*s);
    CHECK(after.stats.rows == batch_rows - 1);
    uint64_t expected_seq = before.stats.seq_next + 1;  // after the single row's seq
    for (size_t i = 1; i < failed.size(); ++i) {
        auto it = after.rows.find(failed[i].id);
        REQUIRE(it != after.rows.end());
        CHECK(it->second.first == expected_seq++);  // in batch order, no seq lost or reused
        CHECK(it->second.second == failed[i].payload);
    }

    // And the store keeps filling and draining after a reopen.
    s.reset();
    s = open_store(tmp.store(), when_full);
    CHECK(outbox_view(*s) == after);
    auto more = s->outbox_append(outbox_batch(next + batch_rows));
    REQUIRE(more);
    CHECK(more->appended == batch_rows);
}

TEST_CASE(
    "MAP_FULL part way through a side-output batch refuses it whole; the retry loses "
    "nothing",
    "[faults][lmdb]") {
    TempDir tmp;
    auto s = open_store(tmp.store(), WhenFull::drop_oldest);

    uint64_t next = 0;
    size_t accepted = 0;
    StoreError refused;
    for (int attempt = 0; attempt < 1000; ++attempt) {
        auto r = s->side_append(side_batch(next));
        if (!r) {
            refused = r.error();
            break;
        }
        REQUIRE(r->appended == batch_rows);
        accepted += batch_rows;
        next += batch_rows;
    }
    REQUIRE(refused.code == errc::map_full);
    CHECK_THAT(refused.message, Catch::Contains("storage.map_size"));
    REQUIRE(accepted >= 4 * batch_rows);

    const SideView before = side_view(*s);
    CHECK(before.rows.size() == accepted);
    CHECK(before.stats.dropped == 0);
    const std::vector<SideRecord> failed = side_batch(next);
    auto again = s->side_append(failed);
    REQUIRE(!again);
    const SideView unchanged = side_view(*s);
    CHECK(unchanged.rows == before.rows);
    CHECK(unchanged.stats.duplicates_skipped == before.stats.duplicates_skipped);
    CHECK(unchanged.stats.bytes == before.stats.bytes);

    // Part way: the first record alone fits (and moves the high-water to its position only).
    auto first = s->side_append(std::span<const SideRecord>(failed).first(1));
    INFO((first ? "" : first.error().message));
    REQUIRE(first);
    CHECK(first->appended == 1);

    // Drained upstream, then the same batch again (the engine's retry after back-pressure):
    // every record after the first goes in; had the refused batch moved the high-water, they
    // would all be skipped as replayed, and lost.
    drain_side(*s);
    auto retried = s->side_append(failed);
    INFO((retried ? "" : retried.error().message));
    REQUIRE(retried);
    CHECK(retried->appended == batch_rows - 1);
    CHECK(retried->duplicates_skipped == 1);
    const SideView after = side_view(*s);
    REQUIRE(after.rows.size() == batch_rows - 1);
    for (size_t i = 1; i < failed.size(); ++i) {
        CHECK(after.rows[i - 1].record == failed[i].record);
        CHECK(after.rows[i - 1].key == failed[i].key);
        CHECK(after.rows[i - 1].columns_known);
    }

    s.reset();
    s = open_store(tmp.store(), WhenFull::drop_oldest);
    CHECK(side_view(*s).rows == after.rows);
    auto more = s->side_append(side_batch(next + batch_rows));
    REQUIRE(more);
    CHECK(more->appended == batch_rows);
}
