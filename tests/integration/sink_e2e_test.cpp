// Issue 27: real gateways into PostgreSQL through `tidemark sink`. Three `tidemark run`
// processes, each with two pipelines (a tumbling one with upsert corrections and side output,
// a session one with retract corrections, where a late event merges two sessions), forward to
// one upstream broker; the sink's `current` view must equal the consumer view this test
// computes itself from every upstream message it saw. Then every message again, twice and
// shuffled, changes nothing; then a version switch on one gateway moves `current` to the new
// version for that gateway only, with the new typed column.
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <set>

#include "tests/integration/sink_support.h"

namespace tidemark::test {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;

json pipeline(const std::string& site, const std::string& name, json window, json late,
              json aggregates) {
    return {
        {"name", name},
        {"topic", site + "/+/telemetry"},
        {"key", "topic:1"},
        {"timestamp", {{"pointer", "/ts"}, {"format", "epoch_ms"}}},
        {"fields", {{"v", "/v"}}},
        {"window", std::move(window)},
        {"watermark",
         {{"delay", "500ms"}, {"idle_timeout", "2s"}, {"max_future", "1h"}, {"scope", "global"}}},
        {"late", std::move(late)},
        {"aggregates", std::move(aggregates)},
        {"limits", {{"max_keys", 100}, {"max_open_windows", 10000}}}};
}

json tumble(const std::string& site, bool with_max = false) {
    json aggregates = {{"n", {{"fn", "count"}}},
                       {"s", {{"fn", "sum"}, {"field", "v"}}},
                       {"avg", {{"fn", "mean"}, {"field", "v"}}}};
    if (with_max) aggregates["mx"] = {{"fn", "max"}, {"field", "v"}};
    return pipeline(
        site, "tumble", {{"type", "tumbling"}, {"size", "2s"}},
        {{"allowed_lateness", "10s"}, {"too_late", "side_output"}, {"corrections", "upsert"}},
        aggregates);
}

json session(const std::string& site) {
    return pipeline(site, "sess", {{"type", "session"}, {"gap", "2s"}, {"max_duration", "1m"}},
                    {{"allowed_lateness", "10s"}, {"too_late", "drop"}, {"corrections", "retract"}},
                    {{"n", {{"fn", "count"}}}, {"s", {{"fn", "sum"}, {"field", "v"}}}});
}

int64_t floor_to_minute(int64_t ms) {
    return ms / 60'000 * 60'000;
}

struct Event {
    const char* device;
    int64_t at_ms;
    int64_t v;
};

// In publishing order. Phase 1 fires [0, 2 s) and every session; phase 2 is late inside the
// lateness (an update, a session that grows, two sessions of dev-b merged by the event at 3 s);
// phase 3 moves the watermark past the lateness, so that the event at 1.9 s is too late (side
// output); the last windows close on idleness.
const std::vector<Event> script{
    {"dev-a", 1000, 1},  {"dev-b", 1200, 3},   {"dev-a", 1500, 2},
    {"dev-b", 4500, 4},  {"dev-a", 8000, 5},   {"dev-b", 8000, 6},   // phase 1
    {"dev-a", 1800, 7},  {"dev-b", 3000, 8},                         // phase 2: late
    {"dev-a", 30000, 9}, {"dev-b", 30000, 10}, {"dev-a", 1900, 11},  // phase 3
};

struct Gateway {
    std::string node, site;
    std::unique_ptr<Daemon> daemon;
    std::string config_path;
};

}  // namespace

TEST_CASE("three gateways' results land in current as the consumer view computes them",
          "[integration][sink]") {
    Postgres pg = Postgres::start();
    Broker gateway_broker = Broker::start();
    Broker::Options persistent;
    persistent.persistence = true;
    Broker upstream = Broker::start(persistent);
    TempDir dir("tidemark-sink-e2e");

    // The independent consumer: every upstream message, from before the first one.
    auto collector = TestClient::connect(upstream.uri(), "sink-e2e-collector", false);
    collector.subscribe("tidemark/#", 1);

    SinkProcess sink(dir.path(), sink_config(upstream.uri(), pg, "sink-e2e", dir.path() + "/spool"),
                     upstream.uri());
    sink.start();

    std::vector<Gateway> gateways;
    for (int i = 1; i <= 3; ++i) {
        Gateway g{"gw-" + std::to_string(i), "site-" + std::to_string(i), nullptr, ""};
        auto cfg =
            base_config(g.node, dir.path() + "/" + g.node, gateway_broker.uri(), upstream.uri());
        cfg["upstream"]["compact_superseded"] = false;
        cfg["pipelines"] = {tumble(g.site), session(g.site)};
        g.config_path = write_config(dir.path(), g.node + ".json", cfg);
        g.daemon = std::make_unique<Daemon>(g.config_path, dir.path() + "/" + g.node + ".log");
        g.daemon->start();
        gateways.push_back(std::move(g));
    }
    // Every gateway has subscribed once its version records are upstream.
    REQUIRE(eventually(
        [&] {
            std::set<std::string> seen;
            for (const auto& m : collector.messages())
                if (m.topic.ends_with("/version")) seen.insert(m.topic);
            return seen.size() == 6;
        },
        30s));

    const int64_t t0 = floor_to_minute(now_ms() - 600'000);
    auto publisher = TestClient::connect(gateway_broker.uri());
    for (const auto& e : script)
        for (size_t g = 0; g < gateways.size(); ++g)
            publisher.publish(gateways[g].site + "/" + e.device + "/telemetry",
                              telemetry(t0 + e.at_ms, e.v + 100 * static_cast<int64_t>(g)), 1);

    // The last windows ([30 s, 32 s) and the sessions from 30 s) close on idleness.
    REQUIRE(eventually(
        [&] {
            int last = 0;
            for (const auto& m : collector.messages())
                if (m.payload.find("\"start\":" + std::to_string(t0 + 30000)) != std::string::npos)
                    ++last;
            return last >= 12;
        },
        60s));
    const auto messages = wait_quiet(collector, 3s, 30s);
    const CurrentView expected = consumer_view(messages);

    // The scene has what it is meant to have: updates, retracts, a merge, side output.
    int updates = 0, retracts = 0, merges = 0, side = 0;
    for (const auto& m : messages) {
        if (m.topic.ends_with("/side")) ++side;
        if (m.payload.find("\"kind\":\"update\"") != std::string::npos) ++updates;
        if (m.payload.find("\"kind\":\"retract\"") != std::string::npos) ++retracts;
        if (m.payload.find("\"closed_by\":\"merge\"") != std::string::npos) ++merges;
    }
    INFO("updates " << updates << ", retracts " << retracts << ", merges " << merges << ", side "
                    << side);
    CHECK(updates >= 3);
    CHECK(retracts >= 6);
    CHECK(merges >= 3);
    CHECK(side >= 3);
    REQUIRE(expected.size() >= 30);

    const std::string difference = wait_for_view(pg, expected, 60s);
    INFO(difference << "\nsink log:\n" << sink.log());
    REQUIRE(difference.empty());
    CHECK(pg.scalar("SELECT count(*) FROM tidemark.rejected") == "0");
    CHECK(std::stoi(pg.scalar("SELECT count(*) FROM tidemark.side_output")) == side);
    CHECK(pg.scalar("SELECT count(*) FROM tidemark.results WHERE kind = 'retract'") != "0");
    // The typed view of each pipeline.
    CHECK(pg.scalar("SELECT count(*) FROM tidemark.current_tumble") ==
          pg.scalar("SELECT count(*) FROM tidemark.current WHERE pipeline = 'tumble'"));
    CHECK(pg.scalar("SELECT sum(n) FROM tidemark.current_tumble") ==
          pg.scalar("SELECT sum((aggregates->>'n')::bigint) FROM tidemark.current WHERE "
                    "pipeline = 'tumble'"));

    {  // Every message again, twice and shuffled, changes nothing.
        const std::string before = pg.scalar(
            "SELECT md5(string_agg(r::text, ',' ORDER BY node, pipeline, version, key, "
            "window_start, window_end)) FROM tidemark.results r");
        const auto health_before = sink.wait_committed(30s);
        std::vector<ReceivedMessage> again = messages;
        again.insert(again.end(), messages.begin(), messages.end());
        std::shuffle(again.begin(), again.end(), std::mt19937(27));
        auto replayer = TestClient::connect(upstream.uri());
        for (const auto& m : again)
            replayer.publish(m.topic, m.payload, 1, false);
        const uint64_t wanted = health_before["commits"]["records"].get<uint64_t>() + again.size();
        sink.wait_health(
            [&](const json& h) {
                return h["commits"]["records"].get<uint64_t>() >= wanted &&
                       h["spool"]["backlog_bytes"] == 0;
            },
            60s, "the repeated messages committed");
        CHECK(view_difference(expected, current_view(pg)).empty());
        CHECK(pg.scalar("SELECT md5(string_agg(r::text, ',' ORDER BY node, pipeline, version, "
                        "key, window_start, window_end)) FROM tidemark.results r") == before);
        CHECK(pg.scalar("SELECT count(*) FROM tidemark.rejected") == "0");
        CHECK(std::stoi(pg.scalar("SELECT count(*) FROM tidemark.side_output")) == side);
    }

    {  // A version switch on one gateway moves current to its new version, for it alone.
        const std::string old_version = pg.scalar(
            "SELECT version FROM tidemark.versions WHERE node = 'gw-1' AND "
            "pipeline = 'tumble'");
        const std::string others_versions =
            "SELECT string_agg(node || ' ' || pipeline || ' ' || version, ',' ORDER BY node, "
            "pipeline) FROM tidemark.versions WHERE node <> 'gw-1'";
        const std::string others_before = pg.scalar(others_versions);
        Gateway& g = gateways[0];
        REQUIRE(g.daemon->terminate() == 0);
        auto cfg = json::parse(read_file_text(g.config_path));
        cfg["pipelines"][0] = tumble(g.site, /*with_max=*/true);
        write_config(dir.path(), g.node + ".json", cfg);
        g.daemon->start();
        // The new version backfills the log, then its version record names it.
        REQUIRE(eventually(
            [&] {
                return pg.scalar(
                           "SELECT version FROM tidemark.versions WHERE node = 'gw-1' AND "
                           "pipeline = 'tumble'") != old_version;
            },
            60s));
        const auto after = wait_quiet(collector, 3s, 30s);
        const CurrentView switched = consumer_view(after);
        const std::string difference_after = wait_for_view(pg, switched, 30s);
        INFO(difference_after);
        CHECK(difference_after.empty());
        const std::string new_version = pg.scalar(
            "SELECT version FROM tidemark.versions WHERE node = 'gw-1' AND "
            "pipeline = 'tumble'");
        CHECK(pg.scalar("SELECT count(DISTINCT version) FROM tidemark.current WHERE node = "
                        "'gw-1' AND pipeline = 'tumble'") == "1");
        CHECK(pg.scalar("SELECT min(version) FROM tidemark.current WHERE node = 'gw-1' AND "
                        "pipeline = 'tumble'") == new_version);
        // Both versions' rows are in results; the other gateways did not move.
        CHECK(pg.scalar("SELECT count(DISTINCT version) FROM tidemark.results WHERE node = "
                        "'gw-1' AND pipeline = 'tumble'") == "2");
        CHECK(pg.scalar(others_versions) == others_before);
        // The new aggregate is a column of the typed view, null for the gateways without it.
        CHECK(pg.scalar("SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE "
                        "attrelid = 'tidemark.current_tumble'::regclass AND attname = 'mx'") ==
              "double precision");
        CHECK(pg.scalar("SELECT count(*) FROM tidemark.current_tumble WHERE node = 'gw-1' AND mx "
                        "IS NULL") == "0");
        CHECK(pg.scalar("SELECT count(*) FROM tidemark.current_tumble WHERE node <> 'gw-1' AND "
                        "mx IS NOT NULL") == "0");
    }
    for (auto& g : gateways)
        g.daemon->kill9();
    CHECK(sink.terminate() == 0);
}

}  // namespace tidemark::test
