// Brokers restart while tidemark runs: the gateway broker (its persistent session keeps what
// tidemark had not acknowledged) and the upstream broker (results wait in the outbox and
// arrive once it is back). Every published message is still counted once.
#include <catch2/catch.hpp>

#include <thread>

#include "tests/integration/daemon.h"

namespace tidemark::test {

namespace {
Broker::Options persistent() {
    Broker::Options o;
    o.persistence = true;
    return o;
}
}  // namespace

TEST_CASE("gateway and upstream broker restarts lose and repeat nothing", "[integration]") {
    // Persistence on both: mosquitto saves sessions and queued messages on SIGTERM. The
    // collector upstream has a persistent session too, so it misses nothing while the upstream
    // broker is away.
    Rig rig("restart", persistent(), persistent(),
            /*persistent_collector=*/true);
    auto cfg = rig.config();
    cfg["pipelines"] = {{
        {"name", "count"},
        {"topic", "sensors/+/telemetry"},
        {"key", "topic:1"},
        {"timestamp", {{"pointer", "/ts"}, {"format", "epoch_ms"}}},
        {"window", {{"type", "tumbling"}, {"size", "2s"}}},
        // Ingest reconnects with backoff after the gateway restart; the backlog it then
        // receives must not be late.
        {"watermark",
         {{"delay", "10s"}, {"idle_timeout", "3s"}, {"max_future", "1m"}, {"scope", "global"}}},
        {"late", {{"allowed_lateness", "0s"}, {"too_late", "drop"}, {"corrections", "upsert"}}},
        {"aggregates", {{"n", {{"fn", "count"}}}}},
        {"limits", {{"max_keys", 100}, {"max_open_windows", 10000}}},
    }};
    rig.start(cfg);

    const std::vector<std::string> devices{"dev-1", "dev-2", "dev-3"};
    SteadyPublisher publisher(rig.gateway.uri(), devices, std::chrono::milliseconds(50));
    publisher.start();
    std::this_thread::sleep_for(std::chrono::seconds(5));

    // Gateway: publishers parked between two messages (see SteadyPublisher), so the count of
    // acknowledged messages is exact; tidemark is mid-stream, with messages in flight to it.
    publisher.hold();
    rig.gateway.restart();
    publisher.release();
    rig.reconnect_health();
    const auto after_gateway = rig.wait_health(
        [](const nlohmann::json& h) {
            return h["ingest"].value("connected", false) && h["ingest"].value("reconnects", 0) >= 1;
        },
        std::chrono::seconds(40), "ingest reconnected after the gateway restart");
    INFO("health after gateway restart " << after_gateway.dump());
    std::this_thread::sleep_for(std::chrono::seconds(3));

    // Upstream: down for 5 s while windows keep closing.
    const size_t before_upstream = rig.results().size();
    rig.upstream.stop();
    std::this_thread::sleep_for(std::chrono::seconds(5));
    rig.upstream.restart();
    rig.reconnect_collector();
    std::this_thread::sleep_for(std::chrono::seconds(4));
    publisher.stop();
    REQUIRE(publisher.errors().empty());
    const auto published = publisher.published();
    int64_t total = 0;
    for (const auto& [d, n] : published)
        total += n;

    auto counted = [&] {
        std::map<std::string, int64_t> n;
        for (const auto& [k, r] : upsert_view(rig.results()))
            n[k.key] += r.values.at("n").get<int64_t>();
        return n;
    };
    const bool complete =
        eventually([&] { return counted() == published; }, std::chrono::seconds(90));
    INFO("published " << total << "; tidemark log:\n" << rig.daemon_log());
    const auto got = counted();
    for (const auto& d : devices) {
        INFO("device " << d);
        CHECK(got.count(d) == 1);
        if (got.count(d)) CHECK(got.at(d) == published.at(d));
    }
    CHECK(complete);
    // Results fired while upstream was down arrived after it came back.
    CHECK(rig.results().size() > before_upstream);
    const auto health = rig.wait_health(
        [](const nlohmann::json& h) {
            return h["upstream"].value("link_up", false) && h["outbox"].value("rows", 1) == 0;
        },
        std::chrono::seconds(20), "upstream link up and the outbox empty");
    INFO("health " << health.dump());
    CHECK(health["upstream"]["reconnects"].get<int64_t>() >= 1);
    CHECK(health["pipelines"]["count"]["too_late"] == 0);
    CHECK(rig.daemon->terminate() == 0);
}

}  // namespace tidemark::test
