// A key with MQTT's special characters stays one escaped topic level upstream; the health topic
// is retained and the status topic says online while tidemark runs and offline after it stops
// or dies (the broker publishes the last will).
#include <algorithm>
#include <catch2/catch.hpp>

#include "tests/integration/forwarding/forwarding_support.h"

using namespace tidemark::test;
using namespace tidemark::test::fwd;

namespace {

size_t levels(const std::string& topic) {
    return static_cast<size_t>(std::count(topic.begin(), topic.end(), '/')) + 1;
}

// What a client that subscribes now receives retained on the status topic.
std::string retained_status(const Broker& gateway) {
    TestClient c = TestClient::connect(gateway.uri());
    c.subscribe(status_topic, 1);
    const auto m = c.wait_for(1, 3s);
    return m.empty() ? std::string("(nothing retained)") : m.front().payload;
}

}  // namespace

TEST_CASE("a key holding '/', '+' and '#' is one escaped topic level upstream",
          "[forwarding][slow]") {
    TempDir dir("tm-fwd-topic");
    Broker gateway = Broker::start();
    Broker upstream = Broker::start();
    TestClient all = TestClient::connect(upstream.uri());
    all.subscribe("tidemark/#", 1);
    TestClient one_level = TestClient::connect(upstream.uri());
    one_level.subscribe("tidemark/fw-node/t1s/+", 1);
    TestClient deeper = TestClient::connect(upstream.uri());
    deeper.subscribe("tidemark/fw-node/t1s/+/#", 1);  // '#' also matches the parent level
    TestClient split = TestClient::connect(upstream.uri());
    split.subscribe("tidemark/fw-node/t1s/a/#", 1);

    json config = base_config(dir.path(), gateway, upstream.uri());
    config["upstream"]["topic"] = "tidemark/{node_id}/{pipeline}/{key}";
    config["pipelines"][0]["key"] = "/dev";
    Daemon daemon(write_config(dir.path(), config), daemon_log_path("topic_key"));
    TestClient health = TestClient::connect(gateway.uri());
    health.subscribe(health_topic, 1);
    daemon.start();
    INFO("tidemark log: " << daemon.log_path());
    REQUIRE(wait_ready(health, true));

    TestClient publisher = TestClient::connect(gateway.uri());
    const int64_t base = load_base_ms();
    const std::string special = "a/b+c#d";
    for (int i = 0; i < 3; ++i) {
        publisher.publish("sensors/x/telemetry",
                          json{{"dev", special}, {"ts", base + i * 100}, {"temp", 20.5}}.dump());
        publisher.publish("sensors/x/telemetry",
                          json{{"dev", "plain"}, {"ts", base + i * 100}, {"temp", 21.5}}.dump());
    }
    // Moves the watermark past the window (its own window stays open).
    publisher.publish("sensors/x/telemetry",
                      json{{"dev", "flush"}, {"ts", base + 60'000}, {"temp", 0}}.dump());

    const auto got = all.wait_for(2, 30s);
    INFO("health " << latest_health(health).dump());
    REQUIRE(got.size() >= 2);
    std::this_thread::sleep_for(1s);  // anything on an unexpected topic would have come by now
    std::map<std::string, std::string> topic_of_key;
    for (const auto& m : all.messages()) {
        INFO("topic " << m.topic);
        // The version record: on the results topic without its {key} level, + "/version".
        if (m.topic == "tidemark/fw-node/t1s/version") continue;
        CHECK(levels(m.topic) == 4);
        topic_of_key[parse_result(m.payload).key] = m.topic;
    }
    CHECK(topic_of_key[special] == "tidemark/fw-node/t1s/a%2Fb%2Bc%23d");
    CHECK(topic_of_key["plain"] == "tidemark/fw-node/t1s/plain");
    CHECK(one_level.messages().size() == all.messages().size());
    CHECK(deeper.messages().size() == all.messages().size());
    CHECK(split.messages().empty());
    CHECK(daemon.terminate() == 0);
}

TEST_CASE("health is retained; status is online while running, offline after kill -9 and stop",
          "[forwarding][slow]") {
    TempDir dir("tm-fwd-status");
    Broker gateway = Broker::start();
    Broker upstream = Broker::start();
    TestClient status = TestClient::connect(gateway.uri());
    status.subscribe(status_topic, 1);
    const std::string config_path =
        write_config(dir.path(), base_config(dir.path(), gateway, upstream.uri()));
    Daemon daemon(config_path, daemon_log_path("status"));
    INFO("tidemark log: " << daemon.log_path());

    auto last_status = [&] {
        const auto m = status.messages();
        return m.empty() ? std::string() : m.back().payload;
    };

    daemon.start();
    REQUIRE(wait_until([&] { return last_status() == "online"; }, 15s));
    CHECK(retained_status(gateway) == "online");
    {
        // The health snapshot is retained: a client that subscribes late gets it at once.
        TestClient late = TestClient::connect(gateway.uri());
        late.subscribe(health_topic, 1);
        const auto m = late.wait_for(1, 5s);
        REQUIRE_FALSE(m.empty());
        CHECK(m.front().retained);
        const json h = json::parse(m.front().payload);
        INFO("health: " << h.dump());
        CHECK(h.at("node") == node_id);
        for (const char* p :
             {"/pipelines/t1s/watermark_ms", "/pipelines/t1s/events_in",
              "/pipelines/t1s/lag_ms/p99", "/ingest/messages", "/ingest/paused", "/log/bytes",
              "/checkpoint/age_ms", "/outbox/rows", "/outbox/bytes", "/outbox/dropped",
              "/outbox/oldest_age_ms", "/upstream/link_up", "/upstream/acks",
              "/upstream/reconnects", "/upstream/rejected", "/side/rows", "/rss_kib"})
            CHECK(h.contains(json::json_pointer(p)));
    }

    daemon.kill9();
    CHECK(wait_until([&] { return last_status() == "offline"; }, 10s));
    CHECK(retained_status(gateway) == "offline");

    daemon.start();
    REQUIRE(wait_until([&] { return last_status() == "online"; }, 15s));
    CHECK(daemon.terminate() == 0);
    CHECK(wait_until([&] { return last_status() == "offline"; }, 5s));
    CHECK(retained_status(gateway) == "offline");
}

TEST_CASE("a too-late event goes upstream on the side topic, after the results",
          "[forwarding][slow]") {
    TempDir dir("tm-fwd-side");
    Broker gateway = Broker::start();
    Broker upstream = Broker::start();
    TestClient side = TestClient::connect(upstream.uri());
    side.subscribe("tidemark/fw-node/t1s/side/#", 1);
    TestClient results = TestClient::connect(upstream.uri());
    results.subscribe("tidemark/fw-node/t1s", 1);

    json config = base_config(dir.path(), gateway, upstream.uri());
    config["upstream"]["side_topic"] = "tidemark/{node_id}/{pipeline}/side/{key}";
    config["pipelines"][0]["late"] = {
        {"allowed_lateness", "0s"}, {"too_late", "side_output"}, {"corrections", "upsert"}};
    Daemon daemon(write_config(dir.path(), config), daemon_log_path("side"));
    TestClient health = TestClient::connect(gateway.uri());
    health.subscribe(health_topic, 1);
    daemon.start();
    INFO("tidemark log: " << daemon.log_path());
    REQUIRE(wait_ready(health, true));

    TestClient publisher = TestClient::connect(gateway.uri());
    const int64_t base = load_base_ms();
    publisher.publish("sensors/d1/telemetry", json{{"ts", base}, {"temp", 20.0}}.dump());
    // Closes the first window (delay 0s, lateness 0s)...
    publisher.publish("sensors/d1/telemetry", json{{"ts", base + 5'000}, {"temp", 21.0}}.dump());
    REQUIRE_FALSE(results.wait_for(1, 30s).empty());
    // ...so that this one is too late for it.
    publisher.publish("sensors/d1/telemetry", json{{"ts", base + 100}, {"temp", 99.0}}.dump());

    const auto got = side.wait_for(1, 30s);
    INFO("health " << latest_health(health).dump());
    REQUIRE(got.size() == 1);
    CHECK(got.front().topic == "tidemark/fw-node/t1s/side/d1");
    const json record = json::parse(got.front().payload);
    CHECK(record.at("pipeline") == "t1s");
    CHECK(record.at("key") == "d1");
    CHECK(record.at("event_ms") == base + 100);
    CHECK(record.at("payload").get<std::string>().find("99") != std::string::npos);
    // Deleted once acknowledged: the side store empties.
    CHECK(wait_until([&] { return health_value<int64_t>(health, "/side/rows", -1) == 0; }, 10s));
    CHECK(daemon.terminate() == 0);
}
