// Issue 29: with too_late "drop", a window's too-late count reaches the consumer. A real
// gateway (tidemark run between two mosquittos) drops four too-late events of one window; its
// record on the results topic + "/late" says 4 (cumulative: an earlier record of the same
// tally says less, never more), health counts them, and `tidemark sink` keeps the count in
// PostgreSQL (late_windows, late_window_totals).
#include <catch2/catch.hpp>

#include "tests/integration/sink_support.h"

namespace tidemark::test {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;

json drop_pipeline() {
    return {
        {"name", "temp"},
        {"topic", "site/+/telemetry"},
        {"key", "topic:1"},
        {"timestamp", {{"pointer", "/ts"}, {"format", "epoch_ms"}}},
        {"fields", {{"v", "/v"}}},
        {"window", {{"type", "tumbling"}, {"size", "2s"}}},
        {"watermark",
         {{"delay", "500ms"}, {"idle_timeout", "1h"}, {"max_future", "1h"}, {"scope", "global"}}},
        // report: the default with drop; every 1s so that the test waits little.
        {"late", {{"allowed_lateness", "0s"}, {"too_late", "drop"}, {"report", {{"every", "1s"}}}}},
        {"aggregates", {{"n", {{"fn", "count"}}}}},
        {"limits", {{"max_keys", 100}, {"max_open_windows", 10000}}}};
}

// The /late records seen upstream, parsed.
std::vector<json> tallies(const TestClient& collector) {
    std::vector<json> out;
    for (const auto& m : collector.messages())
        if (m.topic.ends_with("/late")) out.push_back(json::parse(m.payload));
    return out;
}

}  // namespace

TEST_CASE("too-late events of a dropped window reach the consumer as a /late count",
          "[integration][sink]") {
    Postgres pg = Postgres::start();
    Broker gateway_broker = Broker::start();
    Broker::Options persistent;
    persistent.persistence = true;
    Broker upstream = Broker::start(persistent);
    TempDir dir("tidemark-late-report");

    auto collector = TestClient::connect(upstream.uri(), "late-collector", false);
    collector.subscribe("tidemark/#", 1);
    SinkProcess sink(dir.path(),
                     sink_config(upstream.uri(), pg, "sink-late", dir.path() + "/spool"),
                     upstream.uri());
    sink.start();

    auto cfg = base_config("gw-late", dir.path() + "/gw", gateway_broker.uri(), upstream.uri());
    cfg["pipelines"] = {drop_pipeline()};
    Daemon daemon(write_config(dir.path(), "gw.json", cfg), dir.path() + "/gw.log");
    daemon.start();
    REQUIRE(eventually(
        [&] {
            for (const auto& m : collector.messages())
                if (m.topic == "tidemark/gw-late/temp/version") return true;
            return false;
        },
        30s));

    const int64_t t0 = (now_ms() - 600'000) / 60'000 * 60'000;
    auto publisher = TestClient::connect(gateway_broker.uri());
    const auto send = [&](int64_t at_ms) {
        publisher.publish("site/dev-a/telemetry", telemetry(t0 + at_ms, 1), 1);
    };
    send(1'000);   // [t0, t0 + 2 s)
    send(10'000);  // the watermark to t0 + 9.5 s: [t0, t0 + 2 s) fired, no lateness
    REQUIRE(eventually(
        [&] {
            for (const auto& m : collector.messages())
                if (m.topic == "tidemark/gw-late/temp" &&
                    m.payload.find("\"start\":" + std::to_string(t0)) != std::string::npos)
                    return true;
            return false;
        },
        30s));
    // Three too-late events for [t0, t0 + 2 s), then, after at least one report, a fourth.
    send(100);
    send(200);
    send(300);
    REQUIRE(eventually([&] { return !tallies(collector).empty(); }, 30s));
    send(400);
    REQUIRE(eventually(
        [&] {
            const auto t = tallies(collector);
            return !t.empty() && t.back()["too_late"] == 4;
        },
        30s));

    const auto records = tallies(collector);
    int64_t previous = 0;
    for (const json& r : records) {
        INFO(r.dump());
        CHECK(r["node"] == "gw-late");
        CHECK(r["pipeline"] == "temp");
        CHECK(r["window"]["start"] == t0);
        CHECK(r["window"]["end"] == t0 + 2'000);
        CHECK(r["since_ms"] == records.front()["since_ms"]);  // one tally
        CHECK(r["too_late"].get<int64_t>() > previous);       // each record a higher count
        CHECK(r.contains("version"));
        CHECK_FALSE(r.contains("kind"));
        previous = r["too_late"].get<int64_t>();
    }
    CHECK(records.size() <= 4);
    // Health counts what was dropped and what was reported.
    const json h = [&] {
        auto health = TestClient::connect(gateway_broker.uri(), "late-health", true);
        health.subscribe("tidemark/gw-late/health", 1);
        json last;
        REQUIRE(eventually(
            [&] {
                for (const auto& m : health.messages()) {
                    auto j = json::parse(m.payload, nullptr, false);
                    if (j.is_object() && j["pipelines"]["temp"]["too_late"] == 4 &&
                        j["pipelines"]["temp"]["late_reports"] == records.size()) {
                        last = j;
                        return true;
                    }
                }
                return false;
            },
            30s));
        return last;
    }();
    CHECK(h["pipelines"]["temp"]["too_late_unreported"] == 0);
    CHECK(h["pipelines"]["temp"]["late_tallies"] == 1);

    // The sink holds the highest count, once.
    REQUIRE(eventually(
        [&] {
            return pg.scalar(
                       "SELECT too_late FROM tidemark.late_window_totals WHERE node = "
                       "'gw-late' AND pipeline = 'temp'") == "4";
        },
        30s));
    CHECK(pg.scalar("SELECT count(*) FROM tidemark.late_windows") == "1");
    CHECK(pg.scalar("SELECT (extract(epoch FROM window_start) * 1000)::bigint FROM "
                    "tidemark.late_windows") == std::to_string(t0));
    CHECK(pg.scalar("SELECT count(*) FROM tidemark.rejected") == "0");
    // Every message again: nothing changes (each count is a state, not an increment).
    auto again = TestClient::connect(upstream.uri());
    for (const auto& m : collector.messages())
        if (m.topic.ends_with("/late")) again.publish(m.topic, m.payload, 1);
    sink.wait_health([](const json& health) { return health["late_older"].get<uint64_t>() >= 1; },
                     30s, "a re-sent tally refused by the count guard");
    CHECK(pg.scalar("SELECT too_late FROM tidemark.late_window_totals") == "4");
    daemon.terminate();
    sink.terminate();
}

}  // namespace tidemark::test
