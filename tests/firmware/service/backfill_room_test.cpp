// A backfill whose results find no room (the outbox at its bound with pause_ingest; a full map
// or disk takes the same path) holds neither the live path nor a reload (issue 24, finding 7:
// its rows stayed in memory, no checkpoint followed, and a reload, which needs one, was refused
// while the disk stayed full: the operator could not even revert the config). Real log and
// LMDB, no broker: the test is the forwarder, deleting rows when "the upstream is back".
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "adapters/config/config.h"
#include "adapters/lmdb/store.h"
#include "adapters/log/log_reader.h"
#include "firmware/notify.h"
#include "firmware/service/processor.h"
#include "firmware/service/result_sinks.h"
#include "firmware/service/service_parts.h"
#include "tests/firmware/service/parts_support.h"
#include "tests/support/broker.h"

using namespace tidemark;
using tidemark::test::open_parts;
using tidemark::test::TempDir;

namespace {

// One message a second, seven devices in turn, 1 s windows: a result per message, about 300
// bytes each, so a few thousand of them pass the outbox's 1 MiB.
std::string config_json(const std::string& data_dir, const std::string& size) {
    return R"({"node_id": "gw", "data_dir": ")" + data_dir + R"(",
      "storage": {"fsync": "never", "map_size": "256MiB"},
      "source": {"uri": "tcp://127.0.0.1:1883"},
      "upstream": {"uri": "tcp://127.0.0.1:1", "outbox": {"max_bytes": "1MiB",
                   "when_full": "pause_ingest"}},
      "backfill": {"max_share": 1, "max_live_delay": "50ms"},
      "pipelines": [{"name": "p", "topic": "t/+", "key": "topic:1",
        "timestamp": {"pointer": "/ts", "format": "epoch_ms"}, "fields": {"v": "/v"},
        "window": {"type": "tumbling", "size": ")" +
           size + R"("},
        "watermark": {"delay": "0s", "idle_timeout": "1h", "max_future": "1h"},
        "aggregates": {"n": {"fn": "count"}, "s": {"fn": "sum", "field": "v"}},
        "limits": {"max_keys": 100, "max_open_windows": 10000}}]})";
}

config::Config load(const std::string& json) {
    auto c = config::parse_config(json, "/");
    INFO((c ? std::string() : config::format_errors(c.error())));
    REQUIRE(c);
    return *c;
}

void append_messages(firmware::ServiceParts& parts, int from, int to) {
    for (int i = from; i < to; ++i) {
        const int64_t ingest = 1'000'000 + i * 1'000;
        const std::string payload =
            R"({"ts": )" + std::to_string(ingest) + R"(, "v": )" + std::to_string(i) + "}";
        REQUIRE(parts.host().log().append(log::RecordType::message, ingest,
                                          "t/d" + std::to_string(i % 7), payload));
    }
}

void step_all(firmware::ServiceParts& parts) {
    for (int i = 0; i < 1000; ++i) {
        auto n = parts.host().step(4096, /*drain=*/true);
        REQUIRE(n);
        if (*n == 0) return;
    }
}

// The upstream came back: everything in the outbox is sent and deleted. Returns the results'
// payloads.
std::vector<std::string> drain(firmware::ServiceParts& parts) {
    auto rows = parts.host().store().outbox_peek(0, 1'000'000);
    REQUIRE(rows);
    std::vector<uint64_t> seqs;
    std::vector<std::string> payloads;
    for (const auto& r : *rows) {
        seqs.push_back(r.seq);
        if (!r.version_record) payloads.push_back(r.payload);
    }
    REQUIRE(parts.host().store().outbox_delete(seqs));
    return payloads;
}

void write_file(const std::string& path, const std::string& text) {
    FILE* f = std::fopen(path.c_str(), "w");
    REQUIRE(f);
    std::fputs(text.c_str(), f);
    std::fclose(f);
}

}  // namespace

TEST_CASE("a backfill that finds no room for its results holds neither live work nor a reload",
          "[versions][room]") {
    TempDir dir;
    const std::string path = dir.path() + "/tidemark.json";
    const config::Config before = load(config_json(dir.path(), "1s"));
    auto parts = open_parts(before);
    for (int from = 0; from < 5000; from += 500) {  // the live results, sent as they come
        append_messages(*parts, from, from + 500);
        step_all(*parts);
        drain(*parts);
    }
    step_all(*parts);
    drain(*parts);
    REQUIRE(parts->host().can_checkpoint());
    REQUIRE(parts->host().checkpoint());

    // A wider window: its backfill's 5000 results pass the outbox bound (the upstream is down).
    write_file(path, config_json(dir.path(), "2s"));
    firmware::Notifier notifier;
    REQUIRE(parts->reload(path, notifier));
    REQUIRE(parts->host().backfilling());
    for (int i = 0; i < 2000 && parts->host().backfilling(); ++i) {
        REQUIRE(parts->host().backfill_step(512));
        if (!parts->host().can_checkpoint()) break;
        if (parts->host().store().outbox_stats()->bytes > (1u << 20) - 4096) break;
    }
    REQUIRE(parts->host().backfill_step(512));  // this slice does not fit
    REQUIRE(parts->host().backfilling());
    CHECK(parts->host().can_checkpoint());  // history holds no results in memory
    CHECK(parts->host().checkpoint());

    SECTION("the operator reverts the config: the reload is applied") {
        write_file(path, config_json(dir.path(), "1s"));
        CHECK(parts->reload(path, notifier));
        CHECK_FALSE(parts->host().backfilling());
    }
    SECTION("the upstream comes back: the backfill reads again and switches, nothing lost") {
        std::vector<std::string> sent = drain(*parts);
        for (int i = 0; i < 200'000 && parts->host().backfilling(); ++i) {
            REQUIRE(parts->host().backfill_step(512));
            if (parts->host().store().outbox_stats()->rows > 1000) {
                auto more = drain(*parts);
                sent.insert(sent.end(), more.begin(), more.end());
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        REQUIRE_FALSE(parts->host().backfilling());
        auto rest = drain(*parts);
        sent.insert(sent.end(), rest.begin(), rest.end());
        // The new version's results are replay's (the same processor over the same log, from
        // empty state), each once: none lost to the rewinds, none appended twice.
        const config::Config after = load(config_json(dir.path(), "2s"));
        auto processor = firmware::Processor::create(after);
        REQUIRE(processor);
        firmware::BatchSink sink(after);
        auto reader = log::LogReader::open(after.data_dir + "/log");
        REQUIRE(reader);
        log::Record rec;
        while (*(*reader)->next(rec))
            (*processor)->feed(rec, sink);
        std::multiset<std::string> expected, got;
        for (const auto& r : sink.rows)
            expected.insert(r.payload);
        const std::string tag = R"("version":")" + after.pipelines[0].spec.version + '"';
        for (const auto& payload : sent)
            if (payload.find(tag) != std::string::npos) got.insert(payload);
        CHECK(got.size() == expected.size());
        CHECK(got == expected);
        CHECK(expected.size() > 4900);
    }
}
