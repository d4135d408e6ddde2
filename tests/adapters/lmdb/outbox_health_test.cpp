// Health rows in the outbox (health.upstream): latest only, whatever the link does.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "adapters/lmdb/store.h"
#include "tests/adapters/lmdb/lmdb_test_support.h"

using namespace tidemark::lmdb;
using tidemark::lmdb::test::TempDir;

namespace {

StoreOptions options(const std::string& dir, bool compact_superseded) {
    StoreOptions o;
    o.dir = dir;
    o.map_size_bytes = uint64_t{1} << 26;
    o.compact_superseded = compact_superseded;
    return o;
}

std::unique_ptr<Store> open_store(const StoreOptions& o) {
    auto s = Store::open(o);
    if (!s) FAIL("open: " << s.error().message);
    return std::move(*s);
}

OutboxRow health(uint64_t id, int64_t time_ms) {
    OutboxRow r;
    r.id = id;
    r.health_record = true;
    r.enqueued_ms = time_ms;
    r.payload = R"({"node":"gw-01","time_ms":)" + std::to_string(time_ms) + "}";
    return r;
}

OutboxRow result(uint64_t id, std::string key, uint32_t revision) {
    OutboxRow r;
    r.id = id;
    r.pipeline = "p";
    r.key = std::move(key);
    r.window_start_ms = 0;
    r.window_end_ms = 60000;
    r.revision = revision;
    r.kind = revision == 0 ? tidemark::core::EmissionKind::final_result
                           : tidemark::core::EmissionKind::update;
    r.payload = "{}";
    return r;
}

void append(Store& s, std::vector<OutboxRow> rows) {
    auto r = s.outbox_append(rows);
    if (!r) FAIL("append: " << r.error().message);
}

std::vector<OutboxRow> all_rows(Store& s) {
    return s.outbox_peek(0, 1 << 20).value();
}

}  // namespace

TEST_CASE("an outage of many health intervals leaves one health row, the newest",
          "[lmdb][outbox][health]") {
    // The link is down: the forwarder peeks nothing, nothing is deleted. One health record per
    // interval for 500 intervals, results beside them.
    TempDir tmp;
    const bool compact = GENERATE(false, true);  // health is latest-only either way
    auto s = open_store(options(tmp.store(), compact));
    for (uint64_t i = 0; i < 500; ++i) {
        append(*s, {result(10'000 + i, "k" + std::to_string(i), 0)});
        append(*s, {health(i + 1, 1000 * static_cast<int64_t>(i))});
        const OutboxStats st = s->outbox_stats().value();
        REQUIRE(st.health_rows <= outbox_health_rows_max);
        REQUIRE(st.rows == i + 2);  // every result stays; one health row
    }
    const OutboxStats st = s->outbox_stats().value();
    CHECK(st.health_rows == 1);
    CHECK(st.compacted == 499);
    std::vector<OutboxRow> health_rows;
    for (const OutboxRow& r : all_rows(*s))
        if (r.health_record) health_rows.push_back(r);
    REQUIRE(health_rows.size() == 1);
    CHECK(health_rows[0].id == 500);
    CHECK(health_rows[0].payload == R"({"node":"gw-01","time_ms":499000})");
    CHECK(health_rows[0].pipeline.empty());
    // The newest is the last row: it goes after every result queued before it.
    CHECK(all_rows(*s).back().id == 500);
}

TEST_CASE("a health row is replaced even after a peek returned it", "[lmdb][outbox][health]") {
    // A result a peek returned may be on the wire and is never compacted; a health record may
    // be too, and is replaced all the same: the newer one follows it in seq order.
    TempDir tmp;
    auto s = open_store(options(tmp.store(), true));
    append(*s, {health(1, 1000), result(2, "k", 0)});
    REQUIRE(all_rows(*s).size() == 2);  // claims both
    append(*s, {health(3, 2000), result(4, "k", 1)});
    std::vector<uint64_t> ids;
    for (const OutboxRow& r : all_rows(*s))
        ids.push_back(r.id);
    CHECK(ids == std::vector<uint64_t>{2, 3, 4});  // the claimed result stays, its health goes
    CHECK(s->outbox_stats().value().health_rows == 1);
}

TEST_CASE("a delivered health row is not counted, and the next one is not compacted against it",
          "[lmdb][outbox][health]") {
    TempDir tmp;
    auto s = open_store(options(tmp.store(), false));
    append(*s, {health(1, 1000)});
    const uint64_t seq = all_rows(*s).front().seq;
    REQUIRE(s->outbox_delete(std::vector<uint64_t>{seq}));
    CHECK(s->outbox_stats().value().health_rows == 0);
    auto r = s->outbox_append(std::vector<OutboxRow>{health(2, 2000)});
    REQUIRE(r);
    CHECK(r->compacted == 0);
    CHECK(r->appended == 1);
    CHECK(s->outbox_stats().value().health_rows == 1);
}

TEST_CASE("a health row survives a reopen with its flag and keeps replacing",
          "[lmdb][outbox][health]") {
    TempDir tmp;
    {
        auto s = open_store(options(tmp.store(), false));
        append(*s, {health(1, 1000)});
    }
    auto s = open_store(options(tmp.store(), false));
    std::vector<OutboxRow> rows = all_rows(*s);
    REQUIRE(rows.size() == 1);
    CHECK(rows[0].health_record);
    CHECK_FALSE(rows[0].version_record);
    append(*s, {health(2, 2000)});
    rows = all_rows(*s);
    REQUIRE(rows.size() == 1);
    CHECK(rows[0].id == 2);
}
