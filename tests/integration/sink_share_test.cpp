// Issue 28: two sinks share one stream through a mosquitto shared subscription
// ("$share/GROUP/...", MQTT 5): each writes part of it, together everything, and the table is
// right whichever sink wrote a row. MQTT 5 (4.8.2) says a new shared subscription is sent no
// retained messages, which would keep the retained version records from both sinks; mosquitto
// 2.0.11 sends them anyway (this test passes without the second filter), but a broker that
// follows the letter would not, so each sink also subscribes to the version topics directly,
// as docs/FLEET.md advises.
#include <catch2/catch.hpp>

#include "tests/integration/sink_support.h"

namespace tidemark::test {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;

const json aggregates = {{"n", "count"}, {"s", "sum"}};

}  // namespace

TEST_CASE("two sinks in one $share group split the stream and write all of it",
          "[integration][sink][fleet]") {
    Postgres pg = Postgres::start();
    Broker broker = Broker::start({.persistence = true, .max_inflight = 100, .extra_conf = ""});
    TempDir dir("tidemark-sink-share");
    auto publisher = TestClient::connect(broker.uri(), "share-publisher");

    // What was published, for the test's own computation of `current` (consumer_view).
    std::vector<ReceivedMessage> published;
    const auto send = [&](const std::string& topic, const std::string& payload, bool retained) {
        publisher.publish(topic, payload, 1, retained);
        published.push_back({topic, payload, 1, false, retained});
    };
    // The version records first, retained, as gateways publish them at their start.
    constexpr int nodes = 4;
    for (int g = 0; g < nodes; ++g) {
        const std::string node = "gw-" + std::to_string(g);
        send("tidemark/" + node + "/p/version", version_json(node, "p", "v1", 1000, aggregates),
             true);
    }

    const std::vector<std::string> topics{"$share/fleet/tidemark/#", "tidemark/+/+/version"};
    SinkProcess a(dir.path(),
                  sink_config(broker.uri(), pg, "sink-a", dir.path() + "/a", topics, 50),
                  broker.uri());
    SinkProcess b(dir.path(),
                  sink_config(broker.uri(), pg, "sink-b", dir.path() + "/b", topics, 50),
                  broker.uri());
    a.start();
    b.start();

    // 400 results, then 100 of them again with a higher revision (a correction) and the
    // first ones once more (a stale redelivery): whichever sink gets which, `current` is the
    // same.
    constexpr int keys = 100;
    for (int g = 0; g < nodes; ++g) {
        const std::string node = "gw-" + std::to_string(g);
        for (int k = 0; k < keys; ++k) {
            const std::string key = "dev-" + std::to_string(k);
            const std::string first =
                result_json(node, "p", "v1", key, 0, 60000, 0, "final", {{"n", k}, {"s", k * 2}});
            send("tidemark/" + node + "/p", first, false);
            if (g != 0) continue;
            send("tidemark/" + node + "/p",
                 result_json(node, "p", "v1", key, 0, 60000, 1, "update",
                             {{"n", k + 1}, {"s", k * 2 + 1}}),
                 false);
            send("tidemark/" + node + "/p", first, false);  // stale: no effect
        }
    }
    const CurrentView expected = consumer_view(published);
    REQUIRE(expected.size() == nodes * keys);
    const std::string difference = wait_for_view(pg, expected, 60s);
    INFO(difference << "\nsink-a log:\n" << a.log() << "\nsink-b log:\n" << b.log());
    CHECK(difference.empty());

    // Each got part of the stream: the broker split it.
    const json ha = a.wait_committed(30s);
    const json hb = b.wait_committed(30s);
    const int64_t ma = ha["broker"]["messages"].get<int64_t>();
    const int64_t mb = hb["broker"]["messages"].get<int64_t>();
    INFO("sink-a " << ma << " messages, sink-b " << mb);
    CHECK(ma > 0);
    CHECK(mb > 0);
    // 600 results between them, once each, plus the versions each subscribed to directly.
    CHECK(ma + mb >= 600 + 2 * nodes);
    CHECK(ma + mb < 2 * 600);
    CHECK(a.terminate() == 0);
    CHECK(b.terminate() == 0);
}

}  // namespace tidemark::test
