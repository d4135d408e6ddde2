// An upstream link that accepts TCP and then acknowledges nothing (issue 14): tidemark forwards
// through a proxy that first swallows everything after the CONNECT, then lets the publishes
// through but drops their PUBACKs, then passes bytes. Health must show the stall while it lasts,
// the forwarder must give the link up after its ack timeout (30 s in the daemon), and in the end
// the upstream consumer must hold every result of a replay of the log: none lost, duplicates
// only as the same record.
#include <catch2/catch.hpp>

#include "tests/crash/faults/stall_proxy.h"
#include "tests/integration/forwarding/forwarding_support.h"

using namespace tidemark::test;
using namespace tidemark::test::fwd;

TEST_CASE("a stalled upstream link is shown in health, abandoned, and loses no result",
          "[faults][slow]") {
    TempDir dir("tm-fault-stall");
    Broker gateway = Broker::start();
    Broker upstream = persistent_broker();
    Consumer consumer(upstream);
    StallProxy proxy(upstream.port(),
                     {StallProxy::Mode::swallow_after_connect, StallProxy::Mode::acks_lost});
    TestClient health = TestClient::connect(gateway.uri());
    health.subscribe(health_topic, 1);

    const json config = base_config(dir.path(), gateway, proxy.uri());
    const std::string config_path = write_config(dir.path(), config);
    Daemon daemon(config_path, daemon_log_path("stalled_upstream"));
    daemon.start();
    INFO("tidemark log: " << daemon.log_path());
    // The CONNACK passes the proxy: the link looks up although nothing will be acknowledged.
    REQUIRE(wait_ready(health, true));

    TestClient publisher = TestClient::connect(gateway.uri());
    Load load(publisher, 20, load_base_ms());
    bool stall_seen = false;    // link up, rows in flight, nothing acknowledged, the outbox ageing
    bool timeout_seen = false;  // the forwarder said why it gave the link up
    bool alarm_seen = false;    // health's alarms said upstream_stalled
    json stalled, after_timeout;
    const auto deadline = std::chrono::steady_clock::now() + 150s;
    auto next_sample = std::chrono::steady_clock::now() + 1s;
    // Until the third connection (the first that passes) has taken acknowledgements.
    while (std::chrono::steady_clock::now() < deadline &&
           !(proxy.connections() >= 3 && health_value(health, "/upstream/acks", int64_t{0}) > 0)) {
        load.round();
        std::this_thread::sleep_for(100ms);
        if (std::chrono::steady_clock::now() < next_sample) continue;
        next_sample += 1s;
        const json h = latest_health(health);
        if (hget(h, "/upstream/link_up", false) && hget(h, "/upstream/inflight", int64_t{0}) > 0 &&
            hget(h, "/upstream/acks", int64_t{-1}) == 0 &&
            hget(h, "/outbox/oldest_age_ms", int64_t{0}) > 10'000) {
            stall_seen = true;
            stalled = h;
        }
        for (const auto& alarm : h.value("alarms", json::array()))
            if (alarm == "upstream_stalled") alarm_seen = true;
        if (hget(h, "/upstream/last_error", std::string()).find("no acknowledgement") !=
            std::string::npos) {
            if (!timeout_seen) after_timeout = h;
            timeout_seen = true;
        }
    }
    load.flush();
    INFO("health in the stall: " << stalled.dump());
    INFO("health after the ack timeout: " << after_timeout.dump());
    INFO("proxy connections " << proxy.connections() << ", bytes swallowed "
                              << proxy.swallowed_bytes());
    REQUIRE(proxy.connections() >= 3);
    CHECK(stall_seen);
    CHECK(timeout_seen);
    CHECK(alarm_seen);
    CHECK(proxy.swallowed_bytes() > 0);

    REQUIRE(wait_until(
        [&] {
            const json h = latest_health(health);
            return hget(h, "/outbox/rows", int64_t{-1}) == 0 &&
                   hget(h, "/pipelines/t1s/events_in", int64_t{0}) >= load.published();
        },
        90s));
    // Quiet for a while: the last rows have reached the consumer.
    size_t last = consumer.count();
    auto since = std::chrono::steady_clock::now();
    wait_until(
        [&] {
            if (consumer.count() != last) {
                last = consumer.count();
                since = std::chrono::steady_clock::now();
            }
            return std::chrono::steady_clock::now() - since >= 1500ms;
        },
        20s);
    const json end = fresh_health(health);
    INFO("health at the end: " << end.dump());
    CHECK(end.value("alarms", json::array()).empty());  // upstream_stalled is gone
    CHECK(hget(end, "/upstream/reconnects", int64_t{0}) >= 2);
    CHECK(hget(end, "/outbox/dropped", int64_t{-1}) == 0);
    REQUIRE(daemon.terminate() == 0);

    const auto reference = replay_reference(dir.path(), config_path);
    const auto received = consumer.results();
    const auto got = ids_of(received);
    const auto want = ids_of(reference);
    INFO("received " << received.size() << " messages, " << got.size() << " distinct ids; "
                     << "reference " << want.size() << " results");
    INFO("reference not received: " << missing_text(want, got));
    INFO("received, not in the reference: " << missing_text(got, want));
    REQUIRE(want.size() > 300);
    CHECK(got == want);
    CHECK(conflicting_duplicates(received).empty());
    CHECK(upserted(received) == upserted(reference));
    // The publishes of the acks_lost connection reached the broker and were sent again.
    CHECK(received.size() > got.size());
    WARN("results " << want.size() << ", received " << received.size() << ", proxy connections "
                    << proxy.connections() << ", bytes swallowed " << proxy.swallowed_bytes());
}
