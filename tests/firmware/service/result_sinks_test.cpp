// Where results go, unit by unit: the batch sink's side rows for records no pipeline could
// decode (the record DESIGN.md section 7's side output carries, named by its log record), and
// the forwarder's sources: every kind of outbox row on the topic README's "Upstream" gives it,
// retained where it says, and side rows on upstream.side_topic.
#include "firmware/service/result_sinks.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "adapters/config/config.h"
#include "adapters/lmdb/store.h"
#include "adapters/log/record.h"
#include "firmware/adapter_options.h"
#include "firmware/service/outbox_sources.h"
#include "tests/support/broker.h"

using namespace tidemark;
using tidemark::test::TempDir;

namespace {

config::Config load(const std::string& data_dir) {
    const std::string json = R"({"node_id": "gw", "data_dir": ")" + data_dir + R"(",
      "source": {"uri": "tcp://127.0.0.1:1883"},
      "upstream": {"uri": "tcp://127.0.0.1:1884", "topic": "tidemark/{node_id}/{pipeline}/{key}",
                   "side_topic": "tidemark/{node_id}/{pipeline}/side"},
      "health": {"topic": "tidemark/{node_id}/health"},
      "pipelines": [{"name": "p", "topic": "t/+", "key": "topic:1",
        "window": {"type": "tumbling", "size": "10s"},
        "aggregates": {"n": {"fn": "count"}}}]})";
    auto c = config::parse_config(json, "/");
    INFO((c ? std::string() : config::format_errors(c.error())));
    REQUIRE(c);
    return *c;
}

log::Record record_at(uint64_t offset, int64_t ingest_ms) {
    log::Record rec;
    rec.type = log::RecordType::message;
    rec.offset = offset;
    rec.ingest_ms = ingest_ms;
    return rec;
}

}  // namespace

TEST_CASE("an undecodable record becomes one side row per pipeline, named by its log record",
          "[result_sinks]") {
    TempDir dir("tm-sinks");
    const config::Config c = load(dir.path());
    firmware::BatchSink sink(c);
    sink.malformed(0, record_at(42, 1764400000123), "no number at /ts");
    sink.malformed(0, record_at(42, 1764400000123), "again");
    sink.malformed(0, record_at(43, 1764400000124), "bad \xff byte");
    REQUIRE(sink.side.size() == 3);
    CHECK(sink.rows.empty());
    // The record's bytes as the side topic has always carried them.
    CHECK(sink.side[0].record ==
          R"({"ingest_ms":1764400000123,"malformed":"no number at /ts","node":"gw",)"
          R"("offset":42,"pipeline":"p"})");
    CHECK(sink.side[0].log_offset == 42);
    CHECK(sink.side[0].ordinal == 0);
    CHECK(sink.side[0].pipeline == "p");
    CHECK(sink.side[0].key.empty());
    // Two side records of one log record: ranked, so that a replay names them the same.
    CHECK(sink.side[1].log_offset == 42);
    CHECK(sink.side[1].ordinal == 1);
    CHECK(sink.side[2].log_offset == 43);
    CHECK(sink.side[2].ordinal == 0);
    // Invalid UTF-8 in a reason is replaced, never sent as it is.
    CHECK(sink.side[2].record.find("bad \xEF\xBF\xBD byte") != std::string::npos);
}

TEST_CASE("the outbox source routes each kind of row to its topic, retained as documented",
          "[result_sinks]") {
    TempDir dir("tm-sinks");
    const config::Config c = load(dir.path());
    auto store = lmdb::Store::open(firmware::store_options(c));
    REQUIRE(store);
    std::vector<lmdb::OutboxRow> rows(4);
    rows[0].id = 1;
    rows[0].pipeline = "p";
    rows[0].key = "dev-7";
    rows[0].window_end_ms = 10'000;
    rows[0].payload = "result";
    rows[1].id = 2;
    rows[1].pipeline = "p";
    rows[1].version_record = true;
    rows[1].payload = "version";
    rows[2].id = 3;
    rows[2].pipeline = "p";
    rows[2].late_record = true;
    rows[2].window_end_ms = 10'000;
    rows[2].payload = "late";
    rows[3].id = 4;
    rows[3].health_record = true;
    rows[3].payload = "health";
    REQUIRE((*store)->outbox_append(rows));

    auto source = firmware::make_outbox_source(**store, c);
    auto peeked = source->peek(0, 10);
    REQUIRE(peeked);
    REQUIRE(peeked->size() == 4);
    std::vector<std::string> seen;
    for (const mqtt::OutboundRow& r : *peeked)
        seen.push_back(r.payload + " " + r.topic + (r.retain ? " retained" : ""));
    CHECK(seen == std::vector<std::string>{
                      "result tidemark/gw/p/dev-7", "version tidemark/gw/p/version retained",
                      "late tidemark/gw/p/late", "health tidemark/gw/health retained"});
    std::vector<uint64_t> seqs;
    for (const mqtt::OutboundRow& r : *peeked)
        seqs.push_back(r.seq);
    REQUIRE(source->delivered(seqs));
    auto after = source->peek(0, 10);
    REQUIRE(after);
    CHECK(after->empty());
}

TEST_CASE("the side source sends side rows on upstream.side_topic, delivered ones go",
          "[result_sinks]") {
    TempDir dir("tm-sinks");
    const config::Config c = load(dir.path());
    auto store = lmdb::Store::open(firmware::store_options(c));
    REQUIRE(store);
    firmware::BatchSink sink(c);
    sink.malformed(0, record_at(7, 1764400000000), "not JSON");
    REQUIRE((*store)->side_append(sink.side));

    auto source = firmware::make_side_source(**store, c);
    auto peeked = source->peek(0, 10);
    REQUIRE(peeked);
    REQUIRE(peeked->size() == 1);
    CHECK((*peeked)[0].topic == "tidemark/gw/p/side");
    CHECK((*peeked)[0].payload == sink.side[0].record);
    CHECK_FALSE((*peeked)[0].retain);
    REQUIRE(source->delivered(std::vector<uint64_t>{(*peeked)[0].seq}));
    auto after = source->peek(0, 10);
    REQUIRE(after);
    CHECK(after->empty());
}

TEST_CASE(
    "result rows: the payloads of rows cleared lend their memory to the next ones, "
    "the bytes the same",
    "[result_sinks]") {
    TempDir dir("tm-sinks");
    const config::Config c = load(dir.path());
    const auto emission = [](int64_t start_ms, double n) {
        core::Emission e;
        e.id = static_cast<uint64_t>(start_ms);
        e.key = "dev-" + std::to_string(start_ms % 7);
        e.start_ms = start_ms;
        e.end_ms = start_ms + 10'000;
        e.values = {n};
        return e;
    };
    firmware::BatchSink fresh(c);
    firmware::BatchSink live(c);
    firmware::BatchSink backfill(c);
    // Round after round: the backfill's sink emits, the live sink stores and clears its rows,
    // the backfill's sink takes back their memory.
    std::vector<const char*> kept;
    for (int round = 0; round < 3; ++round) {
        // More than the bound keeps (each payload takes more than 64 bytes).
        const size_t n = round == 0 ? 10 : firmware::BatchSink::spare_bytes_max / 64 + 5;
        for (size_t i = 0; i < n; ++i) {
            // Of about the same length each round: within the room a payload keeps.
            const core::Emission e =
                emission(static_cast<int64_t>(1'000'000 + round * 100'000 + i), double(i));
            backfill.emit(e);
            fresh.emit(e);
        }
        REQUIRE(backfill.rows.size() == n);
        for (size_t i = 0; i < n; ++i) {
            CHECK(backfill.rows[i].payload == fresh.rows[i].payload);
            CHECK(backfill.rows[i].key == fresh.rows[i].key);
        }
        // The memory of the last round's payloads, in their order.
        for (size_t i = 0; i < kept.size() && i < n; ++i)
            CHECK(static_cast<const void*>(backfill.rows[i].payload.data()) ==
                  static_cast<const void*>(kept[i]));
        fresh.rows.clear();
        std::swap(live.rows, backfill.rows);
        kept.clear();
        size_t kept_bytes = 0;
        for (size_t i = 0; i < n; ++i) {
            const size_t bytes = live.rows[i].payload.capacity();
            if (kept_bytes + bytes > firmware::BatchSink::spare_bytes_max) break;
            kept.push_back(live.rows[i].payload.data());
            kept_bytes += bytes;
        }
        live.clear_rows();
        CHECK(live.rows.empty());
        CHECK(live.spare_bytes() == kept_bytes);
        // Within the bound, and all of it but less than a payload once rows overflow it.
        CHECK(kept_bytes <= firmware::BatchSink::spare_bytes_max);
        if (round > 0)
            CHECK(kept_bytes + firmware::BatchSink::spare_payload_bytes_max >
                  firmware::BatchSink::spare_bytes_max);
        backfill.take_spares(live);
        CHECK(live.spare_bytes() == 0);
        CHECK(backfill.spare_bytes() == kept_bytes);
    }
    // A sink at its bound takes what fits of another's, and the rest is freed: the two keep no
    // more than one bound.
    firmware::BatchSink full(c);
    firmware::BatchSink other(c);
    for (size_t i = 0; i < firmware::BatchSink::spare_bytes_max / 64 + 5; ++i)
        full.emit(emission(static_cast<int64_t>(2'000'000 + i), double(i)));
    for (size_t i = 0; i < 100; ++i)
        other.emit(emission(static_cast<int64_t>(3'000'000 + i), double(i)));
    full.clear_rows();
    other.clear_rows();
    REQUIRE(other.spare_bytes() > 0);
    const size_t before = full.spare_bytes();
    full.take_spares(other);
    CHECK(other.spare_bytes() == 0);
    CHECK(full.spare_bytes() >= before);
    CHECK(full.spare_bytes() <= firmware::BatchSink::spare_bytes_max);
    // A payload larger than spare_payload_bytes_max is freed, not kept.
    firmware::BatchSink once(c);
    core::Emission big = emission(1, 1);
    big.key.assign(firmware::BatchSink::spare_payload_bytes_max, 'k');
    once.emit(big);
    REQUIRE(once.rows[0].payload.capacity() > firmware::BatchSink::spare_payload_bytes_max);
    once.clear_rows();
    once.emit(emission(2, 2));
    CHECK(once.rows[0].payload.capacity() <= firmware::BatchSink::spare_payload_bytes_max);
}
