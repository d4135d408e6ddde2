// The stored formats of the LMDB store: values written by older formats are still read (and the
// store upgraded), values a writer never produces are refused as damage. The bytes of the older
// formats are hard-coded here, as those versions wrote them.
#include <catch2/catch.hpp>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "adapters/lmdb/store.h"
#include "raw_lmdb.h"
#include "tests/adapters/lmdb/lmdb_test_support.h"

using namespace tidemark::lmdb;
using tidemark::core::EmissionKind;
using tidemark::lmdb::test::be64;
using tidemark::lmdb::test::le64;
using tidemark::lmdb::test::raw_clear;
using tidemark::lmdb::test::raw_entries;
using tidemark::lmdb::test::raw_get;
using tidemark::lmdb::test::raw_put;
using tidemark::lmdb::test::TempDir;

namespace {

std::unique_ptr<Store> open_store(const std::string& dir, bool compact_superseded = false) {
    StoreOptions o;
    o.dir = dir;
    o.map_size_bytes = 1 << 24;
    o.compact_superseded = compact_superseded;
    auto s = Store::open(o);
    if (!s) FAIL("open: " << s.error().message);
    return std::move(*s);
}

std::string le32(uint32_t v) {
    std::string s(4, '\0');
    for (int i = 0; i < 4; ++i)
        s[static_cast<size_t>(i)] = static_cast<char>(v >> (8 * i));
    return s;
}

}  // namespace

TEST_CASE("side rows carry their pipeline and key as columns beside the record", "[lmdb][side]") {
    TempDir tmp;
    // Columns are stored as given, whatever the record says: the forwarder routes by them.
    const std::vector<SideRecord> records{
        {3, 0, R"({"pipeline":"temp_1m","key":"dev-7","reason":"too_late"})", "temp_1m", "dev-7"},
        {3, 1, R"({"pipeline":"hum_5m","key":"dev-7","reason":"too_late"})", "hum_5m", "dev-7"},
        {4, 0, R"({"pipeline":"temp_1m","malformed":"no /ts"})", "temp_1m", ""},
        {5, 0, "not json", "p", std::string("k\0/\"#", 5)}};
    {
        auto s = open_store(tmp.store());
        REQUIRE(s->side_append(records));
    }
    auto s = open_store(tmp.store());
    const std::vector<SideRow> rows = s->side_peek(0, 100).value();
    REQUIRE(rows.size() == records.size());
    uint64_t bytes = 0;
    for (size_t i = 0; i < records.size(); ++i) {
        INFO("row " << i);
        CHECK(rows[i].columns_known);
        CHECK(rows[i].record == records[i].record);
        CHECK(rows[i].pipeline == records[i].pipeline);
        CHECK(rows[i].key == records[i].key);
        bytes += records[i].record.size() + records[i].pipeline.size() + records[i].key.size() + 21;
    }
    CHECK(s->side_stats()->bytes == bytes);
}

TEST_CASE("a format 1 store is read (rows without an enqueue time) and upgraded", "[lmdb]") {
    TempDir tmp;
    uint64_t seq = 0;
    {
        auto s = open_store(tmp.store());
        OutboxRow row;
        row.id = 7;
        row.pipeline = "p";
        row.key = "k";
        row.window_end_ms = 60'000;
        row.payload = R"({"v":1})";
        row.enqueued_ms = 1'764'400'000'000;
        REQUIRE(s->outbox_append(std::span<const OutboxRow>(&row, 1)));
        auto rows = s->outbox_peek(0, 10).value();
        REQUIRE(rows.size() == 1);
        seq = rows[0].seq;
        CHECK(rows[0].enqueued_ms == 1'764'400'000'000);
        CHECK(s->outbox_stats().value().oldest_enqueued_ms == 1'764'400'000'000);
    }
    // What tidemark with format 1 wrote: the same row without its trailing enqueue time.
    std::string v1_row;
    auto put_u32 = [&](uint32_t n) { v1_row.append(reinterpret_cast<const char*>(&n), 4); };
    auto put_str = [&](const std::string& text) {
        put_u32(static_cast<uint32_t>(text.size()));
        v1_row += text;
    };
    const uint64_t id = 7;
    const int64_t start = 0, end = 60'000;
    v1_row.append(reinterpret_cast<const char*>(&id), 8);
    put_str("p");
    put_str("k");
    v1_row.append(reinterpret_cast<const char*>(&start), 8);
    v1_row.append(reinterpret_cast<const char*>(&end), 8);
    put_u32(0);
    put_u32(0);
    put_str(R"({"v":1})");
    std::string key(8, '\0');
    for (int i = 0; i < 8; ++i)
        key[static_cast<size_t>(i)] = static_cast<char>(seq >> (56 - 8 * i));
    raw_put(tmp.store(), "outbox", key, v1_row);
    raw_put(tmp.store(), "meta", "format_version", le64(1));

    auto s = open_store(tmp.store());
    auto rows = s->outbox_peek(0, 10).value();
    REQUIRE(rows.size() == 1);
    CHECK(rows[0].payload == R"({"v":1})");
    CHECK(rows[0].key == "k");
    CHECK(rows[0].enqueued_ms == 0);  // unknown
    CHECK(s->outbox_stats().value().oldest_enqueued_ms == 0);
    s.reset();
    // Now the current format on disk: a tidemark that reads only format 1 refuses it.
    CHECK(raw_get(tmp.store(), "meta", "format_version") == le64(Store::format_version));
}

TEST_CASE("a format 2 store's side rows (no columns) are read, and it is upgraded",
          "[lmdb][side]") {
    TempDir tmp;
    { open_store(tmp.store()); }
    // What format 2 wrote for one side record at seq 1: the JSON record itself, nothing else,
    // and its cost (value + 8-byte key) in side_bytes.
    const std::string record =
        R"({"node":"gw-01","pipeline":"temp_1m","key":"dev-7","reason":"too_late","ingest_ms":5})";
    raw_put(tmp.store(), "side", be64(1), record);
    raw_put(tmp.store(), "meta", "side_seq_next", le64(2));
    raw_put(tmp.store(), "meta", "side_bytes", le64(record.size() + 8));
    raw_put(tmp.store(), "meta", "format_version", le64(2));

    auto s = open_store(tmp.store());
    CHECK(raw_get(tmp.store(), "meta", "format_version") == le64(Store::format_version));
    auto rows = s->side_peek(0, 10).value();
    REQUIRE(rows.size() == 1);
    CHECK(rows[0].seq == 1);
    CHECK(rows[0].record == record);
    CHECK_FALSE(rows[0].columns_known);  // the forwarder takes pipeline and key from the JSON
    CHECK(rows[0].pipeline.empty());
    CHECK(rows[0].key.empty());

    // New rows beside it carry their columns; the old row's bytes still balance on delete.
    const std::vector<SideRecord> more{{7, 0, R"({"reason":"too_late"})", "temp_1m", "dev-8"}};
    REQUIRE(s->side_append(more));
    rows = s->side_peek(0, 10).value();
    REQUIRE(rows.size() == 2);
    CHECK_FALSE(rows[0].columns_known);
    CHECK(rows[1].seq == 2);
    CHECK(rows[1].columns_known);
    CHECK(rows[1].pipeline == "temp_1m");
    CHECK(rows[1].key == "dev-8");
    CHECK(rows[1].record == more[0].record);
    const std::vector<uint64_t> seqs{1, 2};
    REQUIRE(s->side_delete(seqs));
    CHECK(s->side_stats()->bytes == 0);
    CHECK(s->side_stats()->rows == 0);
}

TEST_CASE("a side row with garbled columns is refused as damage", "[lmdb][side]") {
    TempDir tmp;
    { open_store(tmp.store()); }
    // The tag of a row with columns, then a pipeline length past the end of the value.
    raw_put(tmp.store(), "side", be64(1), std::string(1, '\0') + le32(100) + "temp_1m");
    raw_put(tmp.store(), "meta", "side_seq_next", le64(2));
    auto s = open_store(tmp.store());
    auto rows = s->side_peek(0, 10);
    REQUIRE_FALSE(rows);
    CHECK(rows.error().code == errc::corrupt);
    CHECK(rows.error().message.find("side row 1 is garbled") != std::string::npos);
}

TEST_CASE("an outbox row whose kind is not an emission kind is refused as damage",
          "[lmdb][outbox]") {
    TempDir tmp;
    uint64_t seq = 0;
    {
        auto s = open_store(tmp.store());
        OutboxRow row;
        row.id = 7;
        row.pipeline = "p";
        row.key = "k";
        row.window_end_ms = 60'000;
        row.payload = "{}";
        REQUIRE(s->outbox_append(std::span<const OutboxRow>(&row, 1)));
        seq = s->outbox_peek(0, 1).value().at(0).seq;
    }
    // The kind is the u32 after id (8), pipeline (4 + 1), key (4 + 1), window (8 + 8) and
    // revision (4).
    const size_t kind_at = 8 + 5 + 5 + 16 + 4;
    std::string value = raw_get(tmp.store(), "outbox", be64(seq)).value();
    REQUIRE(value.substr(kind_at, 4) == le32(0));
    // The offset is right: a retract there reads back as one.
    raw_put(tmp.store(), "outbox", be64(seq), value.replace(kind_at, 4, le32(2)));
    CHECK(open_store(tmp.store())->outbox_peek(0, 1).value().at(0).kind == EmissionKind::retract);

    const uint32_t damaged = GENERATE(3u, 255u, 0x01000000u);
    raw_put(tmp.store(), "outbox", be64(seq), value.replace(kind_at, 4, le32(damaged)));
    auto s = open_store(tmp.store());
    auto peeked = s->outbox_peek(0, 1);
    REQUIRE_FALSE(peeked);
    CHECK(peeked.error().code == errc::corrupt);
    CHECK(peeked.error().message.find("outbox row " + std::to_string(seq) + " is garbled") !=
          std::string::npos);
    const std::vector<uint64_t> seqs{seq};
    auto deleted = s->outbox_delete(seqs);
    REQUIRE_FALSE(deleted);
    CHECK(deleted.error().code == errc::corrupt);
}

TEST_CASE("the checkpoint meta keeps its bytes: node_id where config_fingerprint was", "[lmdb]") {
    TempDir tmp;
    // What every format wrote: encoding 1, log offset, outbox seq_next, checkpoint_ms, and the
    // node_id (under the name config_fingerprint) as a length-prefixed string.
    const std::string stored =
        std::string(1, '\x01') + le64(42) + le64(1) + le64(1'764'400'000'000) + le32(5) + "gw-01";
    {
        auto s = open_store(tmp.store());
        auto txn = s->begin_checkpoint();
        REQUIRE(txn);
        CheckpointMeta meta;
        meta.log_offset = 42;
        meta.outbox_seq_next = 1;
        meta.checkpoint_ms = 1'764'400'000'000;
        meta.node_id = "gw-01";
        REQUIRE((*txn)->commit(meta));
    }
    CHECK(raw_get(tmp.store(), "meta", "checkpoint") == stored);
    raw_put(tmp.store(), "meta", "checkpoint", stored);
    auto m = open_store(tmp.store())->load_checkpoint().value();
    REQUIRE(m);
    CHECK(m->log_offset == 42);
    CHECK(m->node_id == "gw-01");
}

TEST_CASE("a format 5 store's id index (ids, and seq -> id) becomes two id generations",
          "[lmdb][outbox]") {
    TempDir tmp;
    uint64_t seq_next = 0;
    std::vector<uint64_t> seqs;
    {
        auto s = open_store(tmp.store());
        std::vector<OutboxRow> rows(3);
        for (uint64_t i = 0; i < rows.size(); ++i) {
            rows[i].id = 100 + i;
            rows[i].pipeline = "p";
            rows[i].key = "k" + std::to_string(i);
        }
        REQUIRE(s->outbox_append(rows));
        const std::vector<OutboxRow> stored = s->outbox_peek(0, 10).value();
        for (const OutboxRow& r : stored)
            seqs.push_back(r.seq);
        seq_next = s->outbox_stats().value().seq_next;
    }
    // What format 5 kept beside outbox_ids (id -> seq): outbox_id_seqs, seq -> id.
    REQUIRE(seqs.size() == 3);
    for (size_t i = 0; i < seqs.size(); ++i)
        raw_put(tmp.store(), "outbox_id_seqs", be64(seqs[i]), be64(100 + i));
    raw_put(tmp.store(), "meta", "format_version", le64(5));

    auto s = open_store(tmp.store());
    CHECK(raw_get(tmp.store(), "meta", "format_version") == le64(Store::format_version));
    // The seq -> id entries are gone (read as ids they would make seqs look like known ids)...
    s.reset();
    CHECK(raw_entries(tmp.store(), "outbox_id_seqs") == 0);
    s = open_store(tmp.store());
    // ... and the ids are still known, until a checkpoint covers them.
    OutboxRow again;
    again.id = 101;
    again.pipeline = "p";
    again.key = "k1";
    CHECK(s->outbox_append(std::span<const OutboxRow>(&again, 1)).value().duplicates_skipped == 1);
    OutboxRow seq_as_id = again;
    seq_as_id.id = seqs[0];
    CHECK(s->outbox_append(std::span<const OutboxRow>(&seq_as_id, 1)).value().appended == 1);
    // A checkpoint that covers the old rows but not the new one keeps the generation holding both.
    CHECK(s->prune_ids(seq_next).value() == 0);
    CHECK(s->prune_ids(s->outbox_stats().value().seq_next).value() == 4);
    CHECK(s->outbox_append(std::span<const OutboxRow>(&again, 1)).value().appended == 1);
}

TEST_CASE("a format 7 store's ids (keyed by the id alone) are known until their generation goes",
          "[lmdb][outbox]") {
    // Format 8 keys the id index by (window end, id). The ids an older store holds are not
    // rewritten (a sent row is gone, and with it its window): they are looked up by the id alone
    // until prune_ids drops the generation holding them.
    TempDir tmp;
    std::vector<OutboxRow> rows(2);
    for (uint64_t i = 0; i < rows.size(); ++i) {
        rows[i].id = 100 + i;
        rows[i].pipeline = "p";
        rows[i].key = "k";
        rows[i].window_end_ms = 60'000 * static_cast<int64_t>(i + 1);
        rows[i].payload = "{}";
    }
    std::vector<uint64_t> seqs;
    {
        auto s = open_store(tmp.store());
        REQUIRE(s->outbox_append(rows));
        const std::vector<OutboxRow> stored = s->outbox_peek(0, 10).value();
        for (const OutboxRow& r : stored)
            seqs.push_back(r.seq);
    }
    REQUIRE(seqs.size() == 2);
    // Format 8's bytes: the window end (sortable: sign bit flipped), then the id, big-endian.
    CHECK(raw_get(tmp.store(), "outbox_ids", be64((uint64_t{1} << 63) + 120'000) + be64(101)) ==
          be64(seqs[1]));
    // As format 7 stored them.
    raw_clear(tmp.store(), "outbox_ids");
    for (size_t i = 0; i < seqs.size(); ++i)
        raw_put(tmp.store(), "outbox_ids", be64(100 + i), be64(seqs[i]));
    raw_put(tmp.store(), "meta", "format_version", le64(7));

    auto s = open_store(tmp.store());
    CHECK(raw_get(tmp.store(), "meta", "format_version") == le64(Store::format_version));
    CHECK(raw_get(tmp.store(), "meta", "outbox_ids_legacy_slots") == le64(1));
    const auto append_one = [&](const OutboxRow& r) {
        return s->outbox_append(std::span<const OutboxRow>(&r, 1)).value();
    };
    // A regenerated emission of before the upgrade is still known...
    CHECK(append_one(rows[1]).duplicates_skipped == 1);
    // ... and a new one is known in the new layout.
    OutboxRow fresh = rows[0];
    fresh.id = 102;
    fresh.window_end_ms = 180'000;
    CHECK(append_one(fresh).appended == 1);
    CHECK(append_one(fresh).duplicates_skipped == 1);
    // A prune that does not cover them keeps them; one that does forgets every one.
    CHECK(s->prune_ids(seqs[0]).value() == 0);
    CHECK(append_one(rows[0]).duplicates_skipped == 1);
    const uint64_t seq_next = s->outbox_stats().value().seq_next;
    CHECK(s->prune_ids(seq_next).value() == 3);
    s.reset();
    CHECK(raw_get(tmp.store(), "meta", "outbox_ids_legacy_slots") == le64(0));
    s = open_store(tmp.store());
    CHECK(append_one(rows[1]).appended == 1);
}

TEST_CASE("a format 6 store's compaction index (without versions) is emptied, its rows kept",
          "[lmdb][outbox]") {
    // Format 6 keyed the index by (pipeline, key, window): an entry of that shape would let a
    // row of one version replace another's. Its rows (written without a version) are kept and
    // sent; a new row of the same window compacts nothing of them. With compaction on: only
    // then does an append write the index.
    TempDir tmp;
    {
        auto s = open_store(tmp.store(), true);
        OutboxRow r;
        r.id = 7;
        r.pipeline = "p";
        r.key = "k";
        r.window_end_ms = 60000;
        r.payload = "{}";
        REQUIRE(s->outbox_append(std::span<const OutboxRow>(&r, 1)));
    }
    REQUIRE(raw_entries(tmp.store(), "outbox_windows") == 1);
    raw_put(tmp.store(), "meta", "format_version", le64(6));
    auto s = open_store(tmp.store(), true);
    CHECK(raw_get(tmp.store(), "meta", "format_version") == le64(Store::format_version));
    s.reset();
    CHECK(raw_entries(tmp.store(), "outbox_windows") == 0);
    s = open_store(tmp.store(), true);
    OutboxRow update;
    update.id = 8;
    update.pipeline = "p";
    update.version = "v1";
    update.key = "k";
    update.window_end_ms = 60000;
    update.revision = 1;
    update.kind = EmissionKind::update;
    CHECK(s->outbox_append(std::span<const OutboxRow>(&update, 1)).value().compacted == 0);
    CHECK(s->outbox_stats().value().rows == 2);
}
