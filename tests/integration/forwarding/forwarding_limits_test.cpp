// The outbox bound (upstream.outbox.max_bytes) under each when_full policy, with the upstream
// down: drop_oldest drops the oldest results and counts exactly what is missing upstream;
// pause_ingest drops nothing, pauses ingest (the gateway broker keeps the messages) and resumes
// once the upstream has taken the backlog.
#include <algorithm>
#include <catch2/catch.hpp>

#include "tests/integration/forwarding/forwarding_support.h"

using namespace tidemark::test;
using namespace tidemark::test::fwd;

namespace {

bool drained(const TestClient& health, long published) {
    const json h = latest_health(health);
    return hget(h, "/upstream/link_up", false) && hget(h, "/outbox/rows", int64_t{-1}) == 0 &&
           hget(h, "/pipelines/t1s/events_in", int64_t{0}) >= published;
}

void wait_quiet(const Consumer& consumer) {
    size_t last = consumer.count();
    auto since = std::chrono::steady_clock::now();
    wait_until(
        [&] {
            const size_t now = consumer.count();
            if (now != last) {
                last = now;
                since = std::chrono::steady_clock::now();
            }
            return std::chrono::steady_clock::now() - since >= 1500ms;
        },
        20s);
}

// ~8000 results of ~250 bytes: several times the smallest outbox (1 MiB).
constexpr int keys = 200;
constexpr int rounds = 40;

}  // namespace

TEST_CASE("outbox full, drop_oldest: the oldest results go and health counts exactly them",
          "[forwarding][slow]") {
    TempDir dir("tm-fwd-drop");
    Broker gateway = Broker::start();
    Broker upstream = persistent_broker();
    Consumer consumer(upstream);
    TestClient health = TestClient::connect(gateway.uri());
    health.subscribe(health_topic, 1);

    json config = base_config(dir.path(), gateway, upstream.uri());
    config["upstream"]["outbox"] = {{"max_bytes", "1MiB"}, {"when_full", "drop_oldest"}};
    const std::string config_path = write_config(dir.path(), config);
    Daemon daemon(config_path, daemon_log_path("drop_oldest"));
    daemon.start();
    INFO("tidemark log: " << daemon.log_path());
    REQUIRE(wait_ready(health, true));

    consumer.lost();
    upstream.stop();
    TestClient publisher = TestClient::connect(gateway.uri());
    Load load(publisher, keys, load_base_ms(), 1000);
    load.rounds(rounds);
    load.flush();
    REQUIRE(wait_until(
        [&] {
            return health_value(health, "/pipelines/t1s/events_in", int64_t{0}) >= load.published();
        },
        60s));
    const json full = fresh_health(health);
    INFO("health with the outbox full: " << full.dump());
    CHECK(hget(full, "/outbox/dropped", int64_t{0}) > 0);
    CHECK(hget(full, "/outbox/bytes", int64_t{1} << 30) <= int64_t{1} << 20);
    CHECK_FALSE(hget(full, "/ingest/paused", true));

    upstream.restart();
    consumer.reconnect();
    REQUIRE(wait_until([&] { return drained(health, load.published()); }, 90s));
    wait_quiet(consumer);
    const json after = fresh_health(health);
    INFO("health after the drain: " << after.dump());
    const auto dropped = hget(after, "/outbox/dropped", int64_t{-1});
    REQUIRE(daemon.terminate() == 0);

    const auto reference = replay_reference(dir.path(), config_path);
    const auto received = consumer.results();
    const auto got = ids_of(received);
    const auto want = ids_of(reference);
    INFO("reference " << reference.size() << ", received " << got.size() << " distinct, dropped "
                      << dropped);
    CHECK(std::includes(want.begin(), want.end(), got.begin(), got.end()));
    CHECK(static_cast<int64_t>(want.size() - got.size()) == dropped);
    // Nothing was sent during the outage, so the dropped rows are a prefix of the emission
    // order, which is the replay's order.
    std::set<std::string> oldest;
    for (size_t i = 0;
         i < static_cast<size_t>(std::max<int64_t>(dropped, 0)) && i < reference.size(); ++i)
        oldest.insert(reference[i].id);
    std::set<std::string> missing;
    std::set_difference(want.begin(), want.end(), got.begin(), got.end(),
                        std::inserter(missing, missing.end()));
    CHECK(missing == oldest);
    CHECK(conflicting_duplicates(received).empty());
}

TEST_CASE("outbox full, pause_ingest: nothing dropped, ingest pauses and resumes, all counted",
          "[forwarding][slow]") {
    TempDir dir("tm-fwd-pause");
    Broker gateway = Broker::start();
    Broker upstream = persistent_broker();
    Consumer consumer(upstream);
    TestClient health = TestClient::connect(gateway.uri());
    health.subscribe(health_topic, 1);

    json config = base_config(dir.path(), gateway, upstream.uri());
    config["upstream"]["outbox"] = {{"max_bytes", "1MiB"}, {"when_full", "pause_ingest"}};
    const std::string config_path = write_config(dir.path(), config);
    Daemon daemon(config_path, daemon_log_path("pause_ingest"));
    daemon.start();
    INFO("tidemark log: " << daemon.log_path());
    REQUIRE(wait_ready(health, true));

    consumer.lost();
    upstream.stop();
    // The gateway broker takes every message (it queues them for tidemark's persistent session
    // while ingest is paused).
    TestClient publisher = TestClient::connect(gateway.uri());
    Load load(publisher, keys, load_base_ms(), 1000);
    load.rounds(rounds);
    load.flush();
    json paused;
    const bool saw_pause = wait_until(
        [&] {
            paused = latest_health(health);
            return hget(paused, "/ingest/paused", false);
        },
        60s);
    INFO("health while paused: " << paused.dump());
    REQUIRE(saw_pause);
    CHECK(paused.at("alarms").dump().find("outbox_full") != std::string::npos);
    CHECK(hget(paused, "/outbox/dropped", int64_t{-1}) == 0);
    CHECK(hget(paused, "/pipelines/t1s/events_in", int64_t{0}) < load.published());
    // It stays paused (the broker holds the rest) while the upstream is down.
    std::this_thread::sleep_for(2s);
    CHECK(health_value(health, "/ingest/paused", false));

    upstream.restart();
    consumer.reconnect();
    const bool all_drained = wait_until([&] { return drained(health, load.published()); }, 120s);
    INFO("health at the end of the drain: " << latest_health(health).dump());
    REQUIRE(all_drained);
    wait_quiet(consumer);
    const json after = fresh_health(health);
    INFO("health after the drain: " << after.dump());
    CHECK_FALSE(hget(after, "/ingest/paused", true));
    CHECK(hget(after, "/outbox/dropped", int64_t{-1}) == 0);
    CHECK(hget(after, "/pipelines/t1s/events_in", int64_t{0}) == load.published());
    CHECK(after.at("alarms").dump().find("outbox_full") == std::string::npos);
    REQUIRE(daemon.terminate() == 0);

    const auto reference = replay_reference(dir.path(), config_path);
    const auto received = consumer.results();
    INFO("reference not received: " << missing_text(ids_of(reference), ids_of(received)));
    CHECK(ids_of(received) == ids_of(reference));
    CHECK(upserted(received) == upserted(reference));
    CHECK(conflicting_duplicates(received).empty());
}
