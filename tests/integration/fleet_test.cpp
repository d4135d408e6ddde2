// Issue 28: a fleet. Ten `tidemark run` gateways forward to a three-node nats-server cluster
// (JetStream, MQTT, stream_replicas 3) given as a list of all three addresses; two sinks, each
// with its own persistent session and its share of the gateways by topic filter, write one
// PostgreSQL. The node every gateway is on is killed while rows are in flight and brought back
// later; then one sink is killed and its share waits in its session until it returns. Every
// window of every gateway must end up in `current` equal to what this test computes from the
// events it published, with no duplicate row; every outbox ends empty; health shows the
// failovers. One cluster for the whole run (CI's budget).
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "tests/integration/sink_support.h"
#include "tests/support/nats_cluster.h"

namespace tidemark::test {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;

constexpr int gateway_count = 10;
const std::vector<std::string> devices{"dev-a", "dev-b"};
constexpr int64_t step_ms = 200;  // the publisher pauses a tenth of this between two rounds

std::string node_name(int g) {
    return "gw-" + std::string(g < 10 ? "0" : "") + std::to_string(g);
}

json tumble(const std::string& site) {
    return {
        {"name", "tumble"},
        {"topic", site + "/+/telemetry"},
        {"key", "topic:1"},
        {"timestamp", {{"pointer", "/ts"}, {"format", "epoch_ms"}}},
        {"fields", {{"v", "/v"}}},
        {"window", {{"type", "tumbling"}, {"size", "1s"}}},
        {"watermark",
         {{"delay", "200ms"}, {"idle_timeout", "2s"}, {"max_future", "1h"}, {"scope", "global"}}},
        {"late", {{"allowed_lateness", "1s"}, {"too_late", "drop"}, {"corrections", "upsert"}}},
        {"aggregates", {{"n", {{"fn", "count"}}}, {"s", {{"fn", "sum"}, {"field", "v"}}}}},
        {"limits", {{"max_keys", 100}, {"max_open_windows", 10000}}}};
}

// (node, key, window start) -> (count, sum): the independent computation.
using Windows =
    std::map<std::tuple<std::string, std::string, int64_t>, std::pair<int64_t, int64_t>>;

// What `current` holds for the tumble pipeline, as Windows; `rows` counts rows (a duplicate
// window would be two rows with one identity).
Windows current_windows(const Postgres& pg, size_t* rows = nullptr) {
    const auto result = pg.query(
        "SELECT node, key, (extract(epoch FROM window_start) * 1000)::bigint, "
        "aggregates::text FROM tidemark.current WHERE pipeline = 'tumble'");
    Windows out;
    for (const auto& r : result) {
        const json a = json::parse(*r[3]);
        out[{*r[0], *r[1], std::stoll(*r[2])}] = {a.value("n", int64_t{-1}),
                                                  static_cast<int64_t>(a.value("s", -1.0))};
    }
    if (rows) *rows = result.size();
    return out;
}

// The windows of `expected` whose node is in `nodes` and that `actual` lacks or differs on.
size_t missing(const Windows& expected, const Windows& actual, const std::set<std::string>& nodes,
               std::string* first = nullptr) {
    size_t count = 0;
    for (const auto& [id, value] : expected) {
        if (!nodes.contains(std::get<0>(id))) continue;
        auto it = actual.find(id);
        if (it != actual.end() && it->second == value) continue;
        if (count++ == 0 && first) {
            std::ostringstream o;
            o << std::get<0>(id) << " " << std::get<1>(id) << " @" << std::get<2>(id)
              << ": expected n=" << value.first << " s=" << value.second << ", found "
              << (it == actual.end() ? std::string("nothing")
                                     : "n=" + std::to_string(it->second.first) +
                                           " s=" + std::to_string(it->second.second));
            *first = o.str();
        }
    }
    return count;
}

struct Gateway {
    std::string node, site;
    std::unique_ptr<Daemon> daemon;
};

}  // namespace

TEST_CASE("a fleet fails over across a nats cluster and two sinks share its results",
          "[integration][fleet]") {
    NatsCluster cluster = NatsCluster::start();
    Postgres pg = Postgres::start();
    Broker gateway_broker = Broker::start();
    TempDir dir("tidemark-fleet");
    const std::vector<std::string> uris = cluster.mqtt_uris();

    // Gateway health (and so upstream.node, upstream.failovers, the outbox) on the gateway broker.
    auto health = TestClient::connect(gateway_broker.uri(), "fleet-health");
    health.subscribe("tidemark/+/health", 1);

    // Two sinks, each its half of the gateways by topic filter, each its own persistent session
    // (nats-server 2.9 has no $share). Their health is watched on node 2, which stays up.
    std::set<std::string> share_a, share_b, all;
    std::vector<std::string> topics_a, topics_b;
    for (int g = 0; g < gateway_count; ++g) {
        const std::string node = node_name(g);
        all.insert(node);
        (g < gateway_count / 2 ? share_a : share_b).insert(node);
        (g < gateway_count / 2 ? topics_a : topics_b).push_back("tidemark/" + node + "/#");
    }
    auto sink_cfg = [&](const std::string& id, const std::vector<std::string>& topics) {
        json c = sink_config(uris[0], pg, id, dir.path() + "/" + id + "-spool", topics, 200);
        c["sink"]["source"]["uri"] = uris;
        c["sink"]["source"]["protocol"] = "3.1.1";
        return c;
    };
    SinkProcess sink_a(dir.path(), sink_cfg("sink-a", topics_a), uris[2]);
    SinkProcess sink_b(dir.path(), sink_cfg("sink-b", topics_b), uris[2]);
    sink_a.start();
    sink_b.start();

    std::vector<Gateway> gateways;
    for (int g = 0; g < gateway_count; ++g) {
        Gateway gw{node_name(g), "site-" + std::to_string(g), nullptr};
        json cfg = base_config(gw.node, dir.path() + "/" + gw.node, gateway_broker.uri(), "");
        cfg["upstream"] = {{"uri", uris},
                           {"client_id", gw.node + "-up"},
                           {"qos", 1},
                           {"max_inflight", 16},
                           {"outbox", {{"max_bytes", "16MiB"}, {"when_full", "pause_ingest"}}}};
        cfg["pipelines"] = {tumble(gw.site)};
        gw.daemon = std::make_unique<Daemon>(write_config(dir.path(), gw.node + ".json", cfg),
                                             dir.path() + "/" + gw.node + ".log");
        gw.daemon->start();
        gateways.push_back(std::move(gw));
    }
    const auto newest_health = [&] {
        std::map<std::string, json> out;
        for (const auto& m : health.messages()) {
            auto j = json::parse(m.payload, nullptr, false);
            if (j.is_object() && j.contains("upstream")) out[m.topic.substr(9, 5)] = j;
        }
        return out;
    };
    const auto every_gateway = [&](const std::function<bool(const json&)>& ok,
                                   std::chrono::milliseconds timeout, const std::string& what) {
        const int64_t since = now_ms();
        std::map<std::string, json> last;
        const bool done = eventually(
            [&] {
                last = newest_health();
                if (last.size() < gateway_count) return false;
                for (const auto& [node, h] : last)
                    if (h.value("time_ms", int64_t{0}) < since || !ok(h)) return false;
                return true;
            },
            timeout);
        if (!done) {
            std::string text;
            for (const auto& [node, h] : last)
                text += node + ": " + h["upstream"].dump() + "\n";
            FAIL("not every gateway's health showed " << what << ":\n" << text);
        }
    };
    every_gateway([&](const json& h) { return h["upstream"]["link_up"] == true; }, 60s,
                  "the upstream link up");

    // Events stamped with the wall clock as they are published (the watermark's idle timeout
    // moves on with the wall clock: events from the past published after a pause would be too
    // late), strictly increasing, to the gateway broker (which no failure touches), in three
    // phases; `expected` is computed from them here.
    int64_t last_ts = 0;
    Windows expected;
    auto publisher = TestClient::connect(gateway_broker.uri(), "fleet-publisher");
    const auto publish = [&](int from, int to) {
        for (int k = from; k < to; ++k) {
            const int64_t ts = std::max(now_ms(), last_ts + 1);
            last_ts = ts;
            for (int g = 0; g < gateway_count; ++g)
                for (const auto& d : devices) {
                    const int64_t v = (k % 7) + g + 1;
                    publisher.publish("site-" + std::to_string(g) + "/" + d + "/telemetry",
                                      telemetry(ts, v), 1);
                    auto& w = expected[{node_name(g), d, ts / 1000 * 1000}];
                    ++w.first;
                    w.second += v;
                }
            std::this_thread::sleep_for(std::chrono::milliseconds(step_ms / 10));
        }
    };

    // Phase 1, then the node every gateway is on dies with rows in flight and in outboxes.
    publish(0, 40);
    auto before = newest_health();
    const std::string first_node = before.begin()->second["upstream"]["node"].get<std::string>();
    const int victim =
        cluster.node_of_port(std::stoi(first_node.substr(first_node.rfind(':') + 1)));
    REQUIRE(victim >= 0);
    REQUIRE(victim != 2);  // node 2 carries the test's own health watchers
    cluster.kill(victim);
    publish(40, 80);  // phase 2, during the failover
    every_gateway(
        [&](const json& h) {
            return h["upstream"]["link_up"] == true && h["upstream"]["node"] != first_node &&
                   h["upstream"]["failovers"].get<int64_t>() >= 1;
        },
        120s, "a link up on another node, one failover or more");

    // The node comes back; then sink-b dies: its share waits in its session on the cluster.
    cluster.restart(victim);
    sink_b.kill9();
    publish(80, 120);  // phase 3
    std::string first;
    const bool a_done = eventually(
        [&] { return missing(expected, current_windows(pg), share_a, &first) == 0; }, 120s);
    if (!a_done) {
        std::map<std::string, size_t> per_node;
        const Windows got = current_windows(pg);
        for (const auto& [id, value] : expected) {
            auto it = got.find(id);
            if (it != got.end() && it->second == value) continue;
            ++per_node[std::get<0>(id)];
        }
        for (const auto& [node, n] : per_node)
            UNSCOPED_INFO(node << ": " << n << " windows wrong");
        for (const auto& [node, h] : newest_health())
            UNSCOPED_INFO(node << " outbox " << h["outbox"].dump() << " upstream "
                               << h["upstream"].dump());
        std::string gw0;
        for (const auto& [id, value] : expected) {
            if (std::get<0>(id) != "gw-00") continue;
            auto it = got.find(id);
            gw0 += std::get<1>(id) + "@" + std::to_string(std::get<2>(id) / 1000 % 1000) +
                   "s:" + std::to_string(value.first) + "/" +
                   (it == got.end() ? std::string("-") : std::to_string(it->second.first)) + " ";
        }
        UNSCOPED_INFO("gw-00 windows (expected n / found n): " << gw0);
        UNSCOPED_INFO("gw-00 log:\n" << gateways[0].daemon->log());
    }
    INFO("sink-a's share: " << first << "\nsink-a log:\n" << sink_a.log());
    REQUIRE(a_done);
    CHECK(missing(expected, current_windows(pg), share_b) > 0);  // nobody wrote sink-b's share

    sink_b.start();
    const bool all_done =
        eventually([&] { return missing(expected, current_windows(pg), all, &first) == 0; }, 120s);
    INFO("every share: " << first << "\nsink-b log:\n" << sink_b.log());
    REQUIRE(all_done);

    size_t rows = 0;
    const Windows now = current_windows(pg, &rows);
    CHECK(rows == now.size());             // no window twice
    CHECK(now.size() == expected.size());  // and none that was not published
    CHECK(pg.scalar("SELECT count(*) FROM (SELECT node, pipeline, key, window_start FROM "
                    "tidemark.results GROUP BY 1, 2, 3, 4 HAVING count(*) > 1) d") == "0");

    every_gateway(
        [&](const json& h) {
            return h["outbox"]["rows"] == 0 && h["upstream"]["failovers"].get<int64_t>() >= 1;
        },
        60s, "an empty outbox and the failover counted");
    // sink-a was on the killed node too (every client tries node 0 first): it moved on.
    sink_a.wait_health([](const json& h) { return h["broker"]["failovers"].get<int64_t>() >= 1; },
                       30s, "sink-a's failover counted");
    std::vector<int64_t> outages;
    for (const auto& [node, h] : newest_health())
        if (h["upstream"]["last_outage_ms"].is_number())
            outages.push_back(h["upstream"]["last_outage_ms"].get<int64_t>());
    std::sort(outages.begin(), outages.end());
    if (!outages.empty())
        WARN("fleet: " << outages.size() << " gateways failed over from node " << victim
                       << "; outage to the first acknowledged row: median "
                       << outages[outages.size() / 2] << " ms, max " << outages.back() << " ms");
    for (auto& g : gateways)
        CHECK(g.daemon->terminate() == 0);
    CHECK(sink_a.terminate() == 0);
    CHECK(sink_b.terminate() == 0);
}

}  // namespace tidemark::test
