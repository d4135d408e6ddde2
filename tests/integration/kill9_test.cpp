// Exactly once under kill -9 (DESIGN.md section 5): devices publish numbered messages at a
// steady rate while tidemark is SIGKILLed at random moments and started again with the same
// config. A consumer that dedupes by id and upserts by window must count every message that
// the gateway broker acknowledged exactly once.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <random>
#include <set>
#include <thread>
#include <tuple>

#include "tests/integration/daemon.h"

namespace tidemark::test {

namespace {
Broker::Options persistent() {
    Broker::Options o;
    o.persistence = true;
    return o;
}
}  // namespace

TEST_CASE("kill -9 at random moments: every published message is counted exactly once",
          "[integration]") {
    // The gateway broker is never killed here, only tidemark; its persistent session keeps
    // the messages that arrive while tidemark is down.
    Rig rig("kill9", persistent(), {});
    auto cfg = rig.config();
    cfg["pipelines"] = {{
        {"name", "count"},
        {"topic", "sensors/+/telemetry"},
        {"key", "topic:1"},
        {"timestamp", {{"pointer", "/ts"}, {"format", "epoch_ms"}}},
        {"fields", {{"v", "/v"}}},
        {"window", {{"type", "tumbling"}, {"size", "5s"}}},
        // The delay covers a restart (a few hundred ms) plus the backlog it builds, so nothing
        // is too late; the idle timeout lets the last windows close once traffic stops.
        {"watermark",
         {{"delay", "10s"}, {"idle_timeout", "3s"}, {"max_future", "1m"}, {"scope", "global"}}},
        {"late", {{"allowed_lateness", "0s"}, {"too_late", "drop"}, {"corrections", "upsert"}}},
        {"aggregates", {{"n", {{"fn", "count"}}}, {"s", {{"fn", "sum"}, {"field", "v"}}}}},
        {"limits", {{"max_keys", 100}, {"max_open_windows", 10000}}},
    }};
    rig.start(cfg);

    unsigned seed = 20240607;
    if (const char* s = std::getenv("TIDEMARK_SEED")) seed = static_cast<unsigned>(std::stoul(s));
    INFO("seed " << seed << " (set TIDEMARK_SEED to repeat another run)");
    std::mt19937 random(seed);
    std::uniform_int_distribution<int> run_ms(1200, 3500), down_ms(0, 800);

    const std::vector<std::string> devices{"dev-1", "dev-2", "dev-3", "dev-4"};
    SteadyPublisher publisher(rig.gateway.uri(), devices, std::chrono::milliseconds(40));
    publisher.start();
    const auto publish_until = std::chrono::steady_clock::now() + std::chrono::seconds(24);
    int kills = 0;
    while (std::chrono::steady_clock::now() < publish_until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(run_ms(random)));
        if (std::chrono::steady_clock::now() >= publish_until) break;
        rig.daemon->kill9();
        ++kills;
        std::this_thread::sleep_for(std::chrono::milliseconds(down_ms(random)));
        rig.daemon->start();
    }
    publisher.stop();
    REQUIRE(publisher.errors().empty());
    REQUIRE(kills >= 5);
    const auto published = publisher.published();
    int64_t total = 0;
    for (const auto& [d, n] : published)
        total += n;
    INFO("published " << total << " messages, " << kills << " kills");

    // Counted per device in the consumer's view.
    auto counted = [&] {
        std::map<std::string, int64_t> n;
        for (const auto& [k, r] : upsert_view(rig.results()))
            n[k.key] += r.values.at("n").get<int64_t>();
        return n;
    };
    const bool complete =
        eventually([&] { return counted() == published; }, std::chrono::seconds(90));
    const auto results = rig.results();
    INFO("tidemark log:\n" << rig.daemon_log());
    const auto got = counted();
    for (const auto& d : devices) {
        INFO("device " << d);
        CHECK(got.count(d) == 1);
        if (got.count(d)) CHECK(got.at(d) == published.at(d));
    }
    CHECK(complete);
    CHECK(rig.daemon->running());  // never stopped by itself

    // No two distinct ids for one (pipeline, key, window, revision, kind), and an id sent
    // twice (regenerated after a crash, or resent before its PUBACK) is byte-identical.
    std::map<std::string, std::string> payload_by_id;
    std::map<std::tuple<std::string, std::string, int64_t, int64_t, int64_t, std::string>,
             std::string>
        id_by_identity;
    for (const auto& r : results) {
        INFO("result " << r.raw);
        auto [it, fresh] = payload_by_id.emplace(r.id, r.raw);
        if (!fresh) CHECK(it->second == r.raw);
        auto [jt, new_identity] = id_by_identity.emplace(
            std::tuple{r.pipeline, r.key, r.start_ms, r.end_ms, r.revision, r.kind}, r.id);
        if (!new_identity) CHECK(jt->second == r.id);
        CHECK(r.kind == "final");  // no lateness allowed, nothing late: nothing to correct
    }

    const auto health = rig.wait_health(
        [](const nlohmann::json& h) { return h["pipelines"]["count"]["open_windows"] == 0; },
        std::chrono::seconds(20), "no open windows");
    INFO("health " << health.dump());
    CHECK(health["pipelines"]["count"]["too_late"] == 0);
    CHECK(health["pipelines"]["count"]["events_in"] == total);
    CHECK(rig.daemon->terminate() == 0);
}

}  // namespace tidemark::test
