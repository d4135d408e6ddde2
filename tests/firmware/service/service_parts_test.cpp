// The engine host in-process, over a real log and a real LMDB store (no broker): what a crash,
// a failed checkpoint and a recovery leave in the outbox and the side store (issue 17).
#include <cerrno>
#include <map>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "adapters/config/config.h"
#include "adapters/lmdb/store.h"
#include "adapters/log/log_writer.h"
#include "fault_io.h"
#include "firmware/clock.h"
#include "firmware/service/service_parts.h"
#include "tests/firmware/service/parts_support.h"
#include "tests/support/broker.h"

using namespace tidemark;
using tidemark::test::open_parts;
using tidemark::test::TempDir;

namespace {

// fsync never: step() reads what was written, so the test needs no ticker.
std::string config_json(const std::string& data_dir, const std::string& too_late) {
    return R"({"node_id": "gw", "data_dir": ")" + data_dir + R"(",
      "storage": {"fsync": "never"},
      "source": {"uri": "tcp://127.0.0.1:1883"},
      "pipelines": [{"name": "p", "topic": "t/+", "key": "topic:1",
        "timestamp": {"pointer": "/ts", "format": "epoch_ms"}, "fields": {"v": "/v"},
        "window": {"type": "tumbling", "size": "10s"},
        "watermark": {"delay": "0s", "idle_timeout": "1h", "max_future": "1h",
                      "scope": "partition"},
        "late": {"allowed_lateness": "5s", "too_late": ")" +
           too_late + R"(", "corrections": "upsert"},
        "aggregates": {"n": {"fn": "count"}, "s": {"fn": "sum", "field": "v"}}}]})";
}

config::Config load(const std::string& data_dir, const std::string& too_late = "drop") {
    auto c = config::parse_config(config_json(data_dir, too_late), "/");
    INFO((c ? std::string() : config::format_errors(c.error())));
    REQUIRE(c);
    return *c;
}

// Device d (of 7) reports once a second; every 50th message is 30 s old (too late). Scope
// partition: each device's windows close on its own watermark.
void append_messages(firmware::ServiceParts& parts, int from, int to) {
    for (int i = from; i < to; ++i) {
        const int64_t ingest = 1'000'000 + i * 1'000;
        const int64_t ts = i % 50 == 49 ? ingest - 30'000 : ingest;
        const std::string topic = "t/d" + std::to_string(i % 7);
        const std::string payload =
            R"({"ts": )" + std::to_string(ts) + R"(, "v": )" + std::to_string(i) + "}";
        REQUIRE(parts.host().log().append(log::RecordType::message, ingest, topic, payload));
        // Device x reports only for ten seconds, then once much later: its window stays open
        // in between (its own watermark does not move), written by one checkpoint only.
        if ((i >= 250 && i < 260) || i == 590)
            REQUIRE(
                parts.host().log().append(log::RecordType::message, ingest, "t/x",
                                          R"({"ts": )" + std::to_string(ingest) + R"(, "v": 1})"));
    }
}

void step_all(firmware::ServiceParts& parts) {
    for (;;) {
        auto n = parts.host().step(4096, /*drain=*/true);
        REQUIRE(n);
        if (*n == 0) return;
    }
}

// The outbox as a consumer would read it: (id, payload) in seq order.
std::vector<std::pair<uint64_t, std::string>> outbox(firmware::ServiceParts& parts) {
    auto rows = parts.host().store().outbox_peek(0, 1'000'000);
    REQUIRE(rows);
    std::vector<std::pair<uint64_t, std::string>> out;
    for (auto& r : *rows)
        out.emplace_back(r.id, r.payload);
    return out;
}

}  // namespace

TEST_CASE("a checkpoint that failed to commit is written again by the next one") {
    // The reference: every checkpoint commits.
    TempDir ref_dir;
    std::vector<std::pair<uint64_t, std::string>> expected;
    {
        auto parts = open_parts(load(ref_dir.path()));
        for (int part = 0; part < 6; ++part) {
            append_messages(*parts, part * 100, part * 100 + 100);
            step_all(*parts);
            REQUIRE(parts->host().checkpoint());
        }
        expected = outbox(*parts);
    }
    REQUIRE(expected.size() > 50);

    // The same, but the third checkpoint's commit fails (its fdatasync reports EIO, as Linux
    // does when writeback failed), and the process dies after the fifth.
    TempDir dir;
    const config::Config c = load(dir.path());
    {
        auto parts = open_parts(c);
        for (int part = 0; part < 5; ++part) {
            append_messages(*parts, part * 100, part * 100 + 100);
            step_all(*parts);
            if (part == 2) {
                tm_fault_watch("state/data.mdb");
                tm_fault_arm(TM_FAULT_FDATASYNC, EIO);
                CHECK_FALSE(parts->host().checkpoint());
                tm_fault_clear();
            } else {
                REQUIRE(parts->host().checkpoint());
            }
        }
        append_messages(*parts, 500, 550);  // logged, processed, not checkpointed: a crash
        step_all(*parts);
    }
    auto parts = open_parts(c);  // recovery: the fifth checkpoint, then the log after it
    append_messages(*parts, 550, 600);
    step_all(*parts);
    const auto got = outbox(*parts);
    for (size_t i = 0; i < std::max(got.size(), expected.size()); ++i)
        if (i >= got.size() || i >= expected.size() || got[i] != expected[i]) {
            WARN(i << " got " << (i < got.size() ? got[i].second : "-") << " want "
                   << (i < expected.size() ? expected[i].second : "-"));
            break;
        }
    CHECK(got == expected);
}

TEST_CASE("side output is not appended again when recovery replays the log") {
    TempDir dir;
    const config::Config c = load(dir.path(), "side_output");
    uint64_t rows = 0;
    {
        auto parts = open_parts(c);
        append_messages(*parts, 0, 200);  // too-late events at 49, 99, 149, 199
        step_all(*parts);
        auto side = parts->host().store().side_stats();
        REQUIRE(side);
        rows = side->rows;
        REQUIRE(rows > 0);
        // No checkpoint: the next start replays every record above.
    }
    for (int restart = 0; restart < 2; ++restart) {
        auto parts = open_parts(c);
        step_all(*parts);
        auto side = parts->host().store().side_stats();
        REQUIRE(side);
        CHECK(side->rows == rows);
    }
}

// Issue 25, finding 8: the store compacted superseded rows by default (its own default, true)
// when the config had no upstream section to say otherwise (the config's default is false). A
// node that ran without upstream for a while and was then given one forwarded only the latest
// revision of each window, though nothing had asked for compaction.
TEST_CASE(
    "without an upstream, every revision stays in the outbox: compaction follows the config") {
    TempDir dir;
    const config::Config c = load(dir.path());
    REQUIRE_FALSE(c.upstream.has_value());
    auto parts = open_parts(c);
    const auto event = [&](int64_t ingest_ms, int64_t ts_ms) {
        REQUIRE(parts->host().log().append(log::RecordType::message, ingest_ms, "t/a",
                                           R"({"ts": )" + std::to_string(ts_ms) + R"(, "v": 1})"));
        step_all(*parts);  // one outbox batch per event: each revision is appended on its own
    };
    event(1'000'000, 1'001'000);  // in [1000000, 1010000)
    event(1'011'000, 1'011'000);  // the watermark passes the window's end: final, revision 0
    event(1'012'000, 1'002'000);  // late, within the 5 s allowed: update, revision 1
    auto rows = parts->host().store().outbox_peek(0, 100);
    REQUIRE(rows);
    std::vector<uint32_t> revisions;
    for (const auto& r : *rows)
        if (r.window_start_ms == 1'000'000) revisions.push_back(r.revision);
    CHECK(revisions == std::vector<uint32_t>{0, 1});
}
