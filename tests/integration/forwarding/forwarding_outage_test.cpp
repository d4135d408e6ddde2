// Store-and-forward across an upstream outage and across a kill -9 of tidemark while it drains a
// backlog: every result reaches the upstream consumer, which dedupes by id and upserts by window
// and then holds exactly what a replay of the log computes.
#include <catch2/catch.hpp>

#include "tests/integration/forwarding/forwarding_support.h"

using namespace tidemark::test;
using namespace tidemark::test::fwd;

namespace {

// What the consumer holds after deduping and upserting must be the replay's results.
void check_against_reference(const std::vector<fwd::Result>& received,
                             const std::vector<fwd::Result>& reference) {
    const auto got = ids_of(received);
    const auto want = ids_of(reference);
    INFO("received " << received.size() << " messages, " << got.size() << " distinct ids; "
                     << "reference " << want.size() << " results");
    INFO("reference not received: " << missing_text(want, got));
    INFO("received, not in the reference: " << missing_text(got, want));
    CHECK(got == want);
    CHECK(conflicting_duplicates(received).empty());
    CHECK(upserted(received) == upserted(reference));
}

bool drained(const TestClient& health, long published) {
    const json h = latest_health(health);
    if (h.is_null() || h.is_discarded()) return false;
    return hget(h, "/upstream/link_up", false) && hget(h, "/outbox/rows", int64_t{-1}) == 0 &&
           hget(h, "/pipelines/t1s/events_in", int64_t{0}) >= published;
}

// The consumer's count has not changed for `quiet`.
void wait_quiet(const Consumer& consumer, std::chrono::milliseconds quiet,
                std::chrono::milliseconds timeout) {
    size_t last = consumer.count();
    auto since = std::chrono::steady_clock::now();
    wait_until(
        [&] {
            const size_t now = consumer.count();
            if (now != last) {
                last = now;
                since = std::chrono::steady_clock::now();
            }
            return std::chrono::steady_clock::now() - since >= quiet;
        },
        timeout, 100ms);
}

}  // namespace

TEST_CASE("results produced while the upstream broker is down all arrive after it returns",
          "[forwarding][slow]") {
    TempDir dir("tm-fwd-outage");
    Broker gateway = Broker::start();
    Broker upstream = persistent_broker();
    Consumer consumer(upstream);
    TestClient health = TestClient::connect(gateway.uri());
    health.subscribe(health_topic, 1);

    const json config = base_config(dir.path(), gateway, upstream.uri());
    const std::string config_path = write_config(dir.path(), config);
    Daemon daemon(config_path, daemon_log_path("outage"));
    daemon.start();
    INFO("tidemark log: " << daemon.log_path());
    REQUIRE(wait_ready(health, true));

    TestClient publisher = TestClient::connect(gateway.uri());
    Load load(publisher, 20, load_base_ms());
    load.rounds(20);  // 5 s of event time: results flow upstream while the link is up
    REQUIRE(wait_until([&] { return consumer.count() > 0; }, 10s));

    consumer.lost();
    upstream.stop();
    // ~10 s of load with the upstream down: the results wait in the outbox.
    std::vector<int64_t> rows_seen;
    bool link_seen_down = false;
    const auto outage_end = std::chrono::steady_clock::now() + 10s;
    auto next_sample = std::chrono::steady_clock::now() + 1500ms;
    while (std::chrono::steady_clock::now() < outage_end) {
        load.round();
        if (std::chrono::steady_clock::now() >= next_sample) {
            next_sample += 1s;
            const json h = latest_health(health);
            rows_seen.push_back(hget(h, "/outbox/rows", int64_t{-1}));
            if (!hget(h, "/upstream/link_up", true)) link_seen_down = true;
            std::this_thread::sleep_for(20ms);
        }
    }
    load.flush();
    const json during = fresh_health(health);
    INFO("health during the outage: " << during.dump());
    CHECK(link_seen_down);
    CHECK_FALSE(hget(during, "/upstream/link_up", true));
    REQUIRE(rows_seen.size() >= 3);
    CHECK(rows_seen.back() > 0);
    CHECK(rows_seen.back() > rows_seen.front());  // the outbox grows while the link is down
    CHECK(hget(during, "/outbox/dropped", int64_t{-1}) == 0);

    upstream.restart();
    consumer.reconnect();
    REQUIRE(wait_until([&] { return drained(health, load.published()); }, 90s));
    wait_quiet(consumer, 1500ms, 20s);
    REQUIRE(daemon.terminate() == 0);

    const auto reference = replay_reference(dir.path(), config_path);
    REQUIRE(reference.size() > 300);
    bool has_corrections = false;
    for (const auto& r : reference)
        has_corrections |= r.revision > 0;
    CHECK(has_corrections);  // so that the upsert comparison means something
    check_against_reference(consumer.results(), reference);
}

TEST_CASE("kill -9 while forwarding a backlog: no result lost, duplicates are the same record",
          "[forwarding][slow]") {
    TempDir dir("tm-fwd-kill");
    Broker gateway = Broker::start();
    Broker upstream = persistent_broker(20);
    Consumer consumer(upstream);
    TestClient health = TestClient::connect(gateway.uri());
    health.subscribe(health_topic, 1);

    json config = base_config(dir.path(), gateway, upstream.uri());
    config["upstream"]["max_inflight"] = 8;  // a slower drain, so that the kill lands inside it
    const std::string config_path = write_config(dir.path(), config);
    Daemon daemon(config_path, daemon_log_path("kill9"));
    daemon.start();
    INFO("tidemark log: " << daemon.log_path());
    REQUIRE(wait_ready(health, true));

    // A backlog of ~10000 results: one event per key per 1 s window.
    consumer.lost();
    upstream.stop();
    TestClient publisher = TestClient::connect(gateway.uri());
    Load load(publisher, 200, load_base_ms(), 1000);
    load.rounds(50);
    load.flush();
    REQUIRE(wait_until(
        [&] {
            return health_value(health, "/pipelines/t1s/events_in", int64_t{0}) >= load.published();
        },
        60s));
    const json before = fresh_health(health);
    const int64_t backlog = hget(before, "/outbox/rows", int64_t{0});
    INFO("health before the kill: " << before.dump());
    REQUIRE(backlog >= 9000);

    upstream.restart();
    consumer.reconnect();
    // Kill once a part of the backlog has arrived upstream.
    REQUIRE(wait_until([&] { return consumer.count() >= 1500; }, 60s, 5ms));
    daemon.kill9();
    const size_t at_kill = consumer.count();
    INFO("received when killed: " << at_kill << " of a backlog of " << backlog);
    // The kill is meant to come mid-backlog; a drain fast enough to finish first (CI's run with
    // the other trees building beside it once had all 10,006 rows and 2 duplicates at the kill)
    // tests less, not something wrong: said, not failed.
    if (at_kill >= static_cast<size_t>(backlog))
        WARN("the whole backlog arrived before the kill (" << at_kill << " of " << backlog << ")");

    daemon.start();
    REQUIRE(wait_until([&] { return drained(health, load.published()); }, 90s));
    wait_quiet(consumer, 1500ms, 20s);
    REQUIRE(daemon.terminate() == 0);

    const auto reference = replay_reference(dir.path(), config_path);
    const auto received = consumer.results();
    INFO("duplicates received: " << received.size() - ids_of(received).size());
    check_against_reference(received, reference);
}
