// The engine host on its own (issue 26: it was reached only through the service's parts and the
// integration tests): over a real log and LMDB in a temporary directory, no broker, records
// appended to its log directly. What DESIGN.md promises of it: the engine reads only durable
// records (fsync interval); a checkpoint records where the engine was, and recovery replays
// only what came after it; results committed after the last checkpoint and emitted again by
// recovery are in the outbox once; the outbox after any of that holds what one pass gives.
#include <catch2/catch.hpp>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "adapters/config/config.h"
#include "adapters/lmdb/store.h"
#include "core/engine.h"
#include "firmware/clock.h"
#include "firmware/service/alarms.h"
#include "firmware/service/engine_host.h"
#include "tests/support/broker.h"

using namespace tidemark;
using tidemark::test::TempDir;

namespace {

// fsync interval with an interval no test reaches: only sync() (a checkpoint's, or the test's)
// makes records durable. Ten devices, 10 s windows, one message a second each.
config::Config config_for(const std::string& data_dir) {
    auto c = config::parse_config(R"({"node_id": "gw", "data_dir": ")" + data_dir + R"(",
      "storage": {"fsync": "interval", "fsync_interval": "1h", "map_size": "64MiB"},
      "source": {"uri": "tcp://127.0.0.1:1883"},
      "upstream": {"uri": "tcp://127.0.0.1:1", "outbox": {"max_bytes": "16MiB"}},
      "pipelines": [{"name": "p", "topic": "t/+", "key": "topic:1",
        "timestamp": {"pointer": "/ts", "format": "epoch_ms"}, "fields": {"v": "/v"},
        "window": {"type": "tumbling", "size": "10s"},
        "watermark": {"delay": "0s", "idle_timeout": "1h", "max_future": "1h"},
        "aggregates": {"n": {"fn": "count"}, "s": {"fn": "sum", "field": "v"}},
        "limits": {"max_keys": 100, "max_open_windows": 10000}}]})",
                                  "/");
    INFO((c ? std::string() : config::format_errors(c.error())));
    REQUIRE(c);
    return *c;
}

// One host over a directory, as the service holds it; destroyed without a checkpoint, it is
// what a killed process leaves (every commit it made is in LMDB, the log as written).
struct Host {
    explicit Host(const config::Config& c) : config(c) {
        auto opened = firmware::EngineHost::open(config, clock, alarms);
        INFO((opened ? std::string() : opened.error().message));
        REQUIRE(opened);
        host = std::move(*opened);
    }
    uint64_t recover() {
        auto replayed = host->recover([] { return false; });
        INFO((replayed ? std::string() : replayed.error().message));
        REQUIRE(replayed);
        return *replayed;
    }
    // Steps until nothing is left below the end it may read; returns the records read.
    uint64_t step_all(bool drain) {
        uint64_t total = 0;
        for (int i = 0; i < 10'000; ++i) {
            auto n = host->step(512, drain);
            REQUIRE(n);
            if (*n == 0) break;
            total += *n;
        }
        return total;
    }
    void append(int from, int to) {
        for (int i = from; i < to; ++i) {
            const int64_t ts = 1'000'000 + int64_t{i} / 10 * 1'000;
            REQUIRE(host->log().append(
                log::RecordType::message, ts, "t/d" + std::to_string(i % 10),
                R"({"ts": )" + std::to_string(ts) + R"(, "v": )" + std::to_string(i) + "}"));
        }
    }
    // The outbox's results, by id: an id twice would be a result delivered twice.
    std::map<uint64_t, std::string> results() {
        auto rows = host->store().outbox_peek(0, 1'000'000);
        REQUIRE(rows);
        std::map<uint64_t, std::string> by_id;
        for (const lmdb::OutboxRow& r : *rows) {
            if (r.version_record || r.health_record || r.late_record) continue;
            INFO("id " << r.id << " twice in the outbox");
            CHECK(by_id.emplace(r.id, r.payload).second);
        }
        return by_id;
    }

    config::Config config;
    firmware::SystemClock clock;
    firmware::Alarms alarms;
    std::unique_ptr<firmware::EngineHost> host;
};

size_t state_entries_of(Host& h, const std::string& pipeline) {
    size_t n = 0;
    auto scanned =
        h.host->store().for_each_state([&](std::string_view key, std::string_view) -> Result<void> {
            if (core::Engine::pipeline_of_state_key(key) == pipeline) ++n;
            return {};
        });
    REQUIRE(scanned);
    return n;
}

// The results of records [0, records) read in one pass, no crash, then checkpointed: what every
// run over the same records must leave in the outbox.
std::map<uint64_t, std::string> one_pass_results(int records) {
    TempDir dir;
    Host h(config_for(dir.path()));
    h.recover();
    h.append(0, records);
    h.step_all(true);
    REQUIRE(h.host->checkpoint());
    return h.results();
}

}  // namespace

TEST_CASE("the engine host reads only durable records unless it drains", "[engine_host]") {
    TempDir dir;
    Host h(config_for(dir.path()));
    h.recover();
    h.append(0, 300);
    // Written, not synced: a power cut could still take these, so no result may come of them.
    CHECK(h.step_all(/*drain=*/false) == 0);
    CHECK(h.host->consumed_offset() == 0);
    REQUIRE(h.host->log().sync());
    CHECK(h.step_all(false) == 300);
    h.append(300, 400);
    CHECK(h.step_all(false) == 0);
    // Draining on shutdown reads to the written end: the checkpoint after it syncs the log first.
    CHECK(h.step_all(/*drain=*/true) == 100);
    CHECK(h.host->consumed_offset() == h.host->log().end_offset());
}

TEST_CASE("a checkpoint records where the engine was; recovery replays only what follows",
          "[engine_host]") {
    TempDir dir;
    const config::Config c = config_for(dir.path());
    uint64_t checkpointed = 0;
    {
        Host h(c);
        CHECK(h.recover() == 0);
        h.append(0, 500);
        h.step_all(true);
        REQUIRE(h.host->checkpoint());
        checkpointed = h.host->consumed_offset();
        CHECK(h.host->checkpoint_stats().log_offset == checkpointed);
        CHECK(h.host->checkpoint_stats().count == 1);
        h.append(500, 730);
        REQUIRE(h.host->log().sync());
    }
    Host again(c);
    // The checkpoint's 500 are not read again; the 230 after it are.
    CHECK(again.recover() == 230);
    CHECK(again.host->checkpoint_stats().log_offset == checkpointed);
    CHECK(again.host->consumed_offset() == again.host->log().end_offset());
}

TEST_CASE("results committed after the last checkpoint are in the outbox once after a crash",
          "[engine_host]") {
    const std::map<uint64_t, std::string> one_pass = one_pass_results(2000);
    REQUIRE(one_pass.size() > 100);

    // The same records; the process dies after it committed results it never checkpointed,
    // at each of a few points, and starts again over the same directory each time.
    for (int crash_at : {1, 700, 1999}) {
        DYNAMIC_SECTION("killed after " << crash_at << " records") {
            TempDir dir;
            const config::Config c = config_for(dir.path());
            {
                Host h(c);
                h.recover();
                h.append(0, 300);
                h.step_all(true);
                REQUIRE(h.host->checkpoint());
                h.append(300, 2000);
                REQUIRE(h.host->log().sync());
                // Results of records past the checkpoint reach the outbox, then the process dies.
                uint64_t read = 300;
                while (read < static_cast<uint64_t>(crash_at)) {
                    auto n = h.host->step(64, false);
                    REQUIRE(n);
                    if (*n == 0) break;
                    read += *n;
                }
            }
            Host again(c);
            again.recover();
            again.step_all(true);
            CHECK(again.results() == one_pass);
        }
    }
}

// Issue 31: a recovery over a long history checkpointed only at its end, so every result's id
// stayed in the outbox's dedupe index until then (30 days of history: past any map). It now
// checkpoints every recovery_checkpoint_rows results, which changes no result.
TEST_CASE("a long recovery checkpoints as it goes; a crash after it duplicates nothing",
          "[engine_host]") {
    const std::map<uint64_t, std::string> one_pass = one_pass_results(20'000);
    REQUIRE(one_pass.size() > 1500);

    TempDir dir;
    const config::Config c = config_for(dir.path());
    {
        Host h(c);
        h.recover();
        h.append(0, 20'000);
        REQUIRE(h.host->log().sync());
    }
    uint64_t mid_offset = 0;
    {
        // A store that never checkpointed past the start: recovery replays the whole log.
        Host h(c);
        h.host->set_recovery_checkpoint_rows(300);
        CHECK(h.recover() == 20'000);
        // Each 4096-record batch commits ~410 results: a checkpoint after each but the last.
        CHECK(h.host->checkpoint_stats().count >= 3);
        mid_offset = h.host->checkpoint_stats().log_offset;
        CHECK(mid_offset > 0);
        CHECK(mid_offset < h.host->log().end_offset());
        CHECK(h.results() == one_pass);
        // Killed here: the results after the last checkpoint are committed, not checkpointed.
    }
    Host again(c);
    const uint64_t replayed = again.recover();  // from the last checkpoint of the first recovery
    CHECK(replayed > 0);
    CHECK(replayed < 20'000);
    again.step_all(true);
    CHECK(again.results() == one_pass);
}

TEST_CASE("a reload that removes a pipeline drops its state at the checkpoint it makes",
          "[engine_host]") {
    TempDir dir;
    config::Config two = config_for(dir.path());
    config::PipelineConfig second = two.pipelines.front();
    second.spec.name = "q";
    two.pipelines.push_back(second);
    {
        Host h(two);
        h.recover();
        h.append(0, 95);  // windows left open in both pipelines
        h.step_all(true);
        REQUIRE(h.host->checkpoint());
        REQUIRE(state_entries_of(h, "q") > 0);

        REQUIRE(h.host->reconfigure(config_for(dir.path())));
        CHECK(h.host->live_config().pipelines.size() == 1);
        CHECK(h.host->live_version("q").empty());
        REQUIRE(h.host->checkpoint());
    }
    Host again(config_for(dir.path()));
    again.recover();
    CHECK(state_entries_of(again, "q") == 0);
    CHECK(state_entries_of(again, "p") > 0);
    CHECK_FALSE(again.host->live_version("p").empty());
}
