// Issue 29, fleet health: a gateway with health.upstream sends its health record upstream
// through the outbox, latest only. Its upstream broker is down for several health intervals:
// the outbox never holds more than one health row (every health record the gateway publishes
// on its own broker says so), then the broker is back: it holds the record retained, the sink
// writes one row for the node to `health` with the latest record, and `tidemark status
// --broker` on the upstream broker lists the node. Real mosquittos (gateway and upstream), a
// real tidemark, a real `tidemark sink` and a real PostgreSQL.
#include <catch2/catch.hpp>

#include <thread>

#include "tests/integration/sink_support.h"

namespace tidemark::test {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;

json pipeline() {
    return {{"name", "count_10s"},
            {"topic", "sensors/+/telemetry"},
            {"key", "topic:1"},
            {"timestamp", {{"pointer", "/ts"}, {"format", "epoch_ms"}}},
            {"fields", {{"v", "/v"}}},
            {"window", {{"type", "tumbling"}, {"size", "10s"}}},
            {"watermark",
             {{"delay", "1s"}, {"idle_timeout", "1h"}, {"max_future", "1m"}, {"scope", "global"}}},
            {"late", {{"allowed_lateness", "0s"}, {"too_late", "drop"}, {"corrections", "upsert"}}},
            {"aggregates", {{"n", {{"fn", "count"}}}}},
            {"limits", {{"max_keys", 100}, {"max_open_windows", 1000}}}};
}

int64_t counter(const json& h, const char* section, const char* name) {
    return h.contains(section) && h[section].contains(name) ? h[section][name].get<int64_t>() : -1;
}

}  // namespace

TEST_CASE("health.upstream: an outage queues one health record; the fleet sees the latest",
          "[integration][sink][health]") {
    Rig rig("fleet-health-gw", {}, {});
    Postgres pg = Postgres::start();
    auto cfg = rig.config();
    cfg["health"]["upstream"] = true;
    cfg["pipelines"] = {pipeline()};
    rig.start(cfg);

    // The record reaches the upstream broker before the outage, and keeps coming: three of
    // them, so that the pipeline's version record (queued at recovery, before the second) has
    // gone too, and the outbox holds at most the health row in flight.
    const std::string topic = rig.health_topic();
    {
        auto watcher = TestClient::connect(rig.upstream.uri(), "fh-watch-1");
        watcher.subscribe(topic);
        INFO(rig.daemon_log());
        REQUIRE(watcher.wait_for(3, 30s).size() >= 3);
    }
    const json before =
        rig.wait_health([](const json& h) { return counter(h, "outbox", "rows") <= 1; }, 20s,
                        "an outbox with nothing but health in it");

    // The upstream goes away for about eight health intervals (health.interval is 1 s). No
    // telemetry flows, so every row the outbox holds is a health row: its `rows` is the bound.
    const int64_t outage_start_ms = now_ms();
    rig.upstream.stop();
    std::this_thread::sleep_for(8s);
    const json during = rig.wait_health(
        [&](const json& h) {
            return !h["upstream"]["link_up"].get<bool>() &&
                   counter(h, "health_upstream", "queued") >=
                       counter(before, "health_upstream", "queued") + 5;
        },
        20s, "health records queued while the upstream is down");
    int64_t rows_max = 0, health_rows_max = 0;
    size_t records_seen = 0;
    json first_down;  // the first record that saw the link down
    for (const json& h : health_records(*rig.health_client, topic)) {
        if (h["time_ms"].get<int64_t>() < outage_start_ms) continue;
        ++records_seen;
        if (first_down.is_null() && !h["upstream"]["link_up"].get<bool>()) first_down = h;
        rows_max = std::max(rows_max, counter(h, "outbox", "rows"));
        health_rows_max = std::max(health_rows_max, counter(h, "outbox", "health_rows"));
    }
    INFO("last health during the outage: " << during.dump());
    CHECK(records_seen >= 5);  // about one a second; the machine may be loaded
    CHECK(rows_max == 1);      // one health row waited, never one per interval
    CHECK(health_rows_max == 1);
    // Each record queued during the outage replaced the one waiting, but for the first: the one
    // before it may have been delivered. Counted from the first record that saw the link down,
    // not from `before`, which the test may read seconds late from its queue, while the rows
    // queued meanwhile were delivered (seen: `before` queued 3, the first record of the outage 5).
    REQUIRE(!first_down.is_null());
    const int64_t queued = counter(during, "health_upstream", "queued") -
                           counter(first_down, "health_upstream", "queued");
    CHECK(queued >= 3);
    CHECK(counter(during, "outbox", "compacted") - counter(first_down, "outbox", "compacted") >=
          queued - 1);

    // The broker is back (without persistence: nothing retained from before), then the sink.
    rig.upstream.restart();
    TempDir sink_dir("tm-fh-sink");
    SinkProcess sink(sink_dir.path(),
                     sink_config(rig.upstream.uri(), pg, "sink-fh", sink_dir.path() + "/spool"),
                     rig.upstream.uri());
    sink.start();

    // The gateway's record is retained upstream again, and it is the latest: newer than any
    // record queued during the outage.
    json retained;
    REQUIRE(eventually(
        [&] {
            auto reader = TestClient::connect(rig.upstream.uri(), "fh-watch-2");
            reader.subscribe(topic);
            const auto got = reader.wait_for(1, 2s);
            if (got.empty() || !got.front().retained) return false;
            retained = json::parse(got.front().payload);
            return true;
        },
        30s));
    CHECK(retained["node"] == "fleet-health-gw");
    CHECK(retained["time_ms"].get<int64_t>() >= during["time_ms"].get<int64_t>());

    // The sink: one row for the node, with a record at least as new as the one just read; the
    // health record is neither a result nor rejected.
    REQUIRE(eventually(
        [&] {
            return pg.scalar(
                       "SELECT count(*) FROM tidemark.health WHERE node = 'fleet-health-gw' "
                       "AND (record ->> 'time_ms')::bigint >= " +
                       std::to_string(retained["time_ms"].get<int64_t>())) == "1";
        },
        60s));
    CHECK(pg.scalar("SELECT count(*) FROM tidemark.health") == "1");
    CHECK(pg.scalar("SELECT count(*) FROM tidemark.results") == "0");
    CHECK(pg.scalar("SELECT count(*) FROM tidemark.rejected") == "0");
    CHECK(pg.scalar("SELECT time = 'epoch'::timestamptz + (record ->> 'time_ms')::bigint * "
                    "interval '1 millisecond' FROM tidemark.health") == "t");
    // Later records replace the row; it never goes back to an older one.
    const std::string first_time = pg.scalar("SELECT record ->> 'time_ms' FROM tidemark.health");
    REQUIRE(eventually(
        [&] { return pg.scalar("SELECT record ->> 'time_ms' FROM tidemark.health") != first_time; },
        30s));
    CHECK(std::stoll(pg.scalar("SELECT record ->> 'time_ms' FROM tidemark.health")) >
          std::stoll(first_time));

    // The fleet view: `tidemark status --broker` on the upstream lists the gateway.
    const CommandResult status = run_tidemark({"status", "--broker", rig.upstream.uri(), "--json"});
    INFO("status stdout: " << status.out << "\nstderr: " << status.err);
    REQUIRE(status.exit_code == 0);
    const json doc = json::parse(status.out);
    bool listed = false;
    for (const json& n : doc["nodes"])
        listed = listed || n["node"] == "fleet-health-gw";
    CHECK(listed);
    CHECK(sink.terminate() == 0);
}

}  // namespace tidemark::test
