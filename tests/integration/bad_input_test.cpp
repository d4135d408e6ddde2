// Bad input is counted, never fatal: malformed JSON, a payload over max_payload, a payload that
// is not UTF-8 and one without its timestamp. tidemark keeps running, health counts them per
// pipeline (and the oversized one as an ingest malformed record), and the valid messages
// around them are counted exactly.
#include <catch2/catch.hpp>

#include <thread>

#include "tests/integration/daemon.h"

namespace tidemark::test {

namespace {

nlohmann::json count_pipeline(const std::string& name, const std::string& topic) {
    return {{"name", name},
            {"topic", topic},
            {"key", "topic:1"},
            {"timestamp", {{"pointer", "/ts"}, {"format", "epoch_ms"}}},
            {"fields", {{"v", "/v"}}},
            {"window", {{"type", "tumbling"}, {"size", "10s"}}},
            {"watermark",
             {{"delay", "0s"}, {"idle_timeout", "2s"}, {"max_future", "1m"}, {"scope", "global"}}},
            {"late", {{"allowed_lateness", "0s"}, {"too_late", "drop"}}},
            {"aggregates", {{"n", {{"fn", "count"}}}, {"s", {{"fn", "sum"}, {"field", "v"}}}}},
            {"limits", {{"max_keys", 100}, {"max_open_windows", 10000}}}};
}

}  // namespace

TEST_CASE("malformed, oversized, non-UTF-8 and timestamp-less payloads are counted, not fatal",
          "[integration]") {
    Rig rig("bad", {}, {});
    auto cfg = rig.config();
    cfg["source"]["max_payload"] = "1KiB";
    // "other" matches none of the bad messages: its counters must stay at zero.
    cfg["pipelines"] = {count_pipeline("sensors", "sensors/+/telemetry"),
                        count_pipeline("other", "other/+/telemetry")};
    rig.start(cfg);

    const int64_t t0 = (now_ms() - 120'000) / 10'000 * 10'000;
    auto publisher = TestClient::connect(rig.gateway.uri());
    const std::string topic = "sensors/dev-1/telemetry";
    int64_t valid = 0, valid_sum = 0;
    auto publish_valid = [&](int64_t offset_ms, int64_t v) {
        publisher.publish(topic, telemetry(t0 + offset_ms, v), 1);
        ++valid;
        valid_sum += v;
    };
    publish_valid(1000, 1);
    publisher.publish(topic, "{\"ts\": " + std::to_string(t0 + 1500) + ", \"v\": 5", 1);  // cut
    publish_valid(2000, 2);
    // Valid JSON, but 2000 bytes > max_payload 1KiB.
    const std::string pad(2000, 'x');
    publisher.publish(
        topic, "{\"ts\":" + std::to_string(t0 + 2500) + ",\"v\":7,\"pad\":\"" + pad + "\"}", 1);
    publish_valid(3000, 3);
    // A lone 0xff byte inside a string: not UTF-8.
    publisher.publish(topic, "{\"ts\":" + std::to_string(t0 + 3500) + ",\"v\":9,\"s\":\"\xff\"}",
                      1);
    publish_valid(4000, 4);
    publisher.publish(topic, "{\"v\":11}", 1);  // no timestamp
    publish_valid(5000, 5);
    // Past the window, so that [t0, t0 + 10 s) closes on the watermark.
    publisher.publish("sensors/dev-1/telemetry", telemetry(t0 + 12'000, 100), 1);

    auto first = rig.collector->wait_for(1, std::chrono::seconds(20));
    INFO("tidemark log:\n" << rig.daemon_log());
    REQUIRE(!first.empty());
    const auto results = rig.results();
    const ResultRecord& r = results.front();
    INFO("result " << r.raw);
    CHECK(r.pipeline == "sensors");
    CHECK(r.start_ms == t0);
    CHECK(r.end_ms == t0 + 10'000);
    CHECK(r.values.at("n").get<int64_t>() == valid);
    CHECK(r.values.at("s").get<double>() == Approx(static_cast<double>(valid_sum)));
    CHECK(r.closed_by == "watermark");

    const auto health = rig.wait_health(
        [&](const nlohmann::json& h) {
            return h["pipelines"]["sensors"].value("events_in", 0) == valid + 1;
        },
        std::chrono::seconds(10), "every valid event counted");
    INFO("health " << health.dump());
    const auto& p = health["pipelines"]["sensors"];
    // Cut JSON, not UTF-8, no timestamp: three that could not be decoded, plus the oversized
    // one, which processor.h counts for every pipeline it matches.
    CHECK(p["malformed"] == 4);
    CHECK(health["ingest"]["malformed_records"] == 1);  // the oversized one
    CHECK(health["pipelines"]["other"]["malformed"] == 0);
    CHECK(health["pipelines"]["other"]["events_in"] == 0);
    CHECK(rig.daemon->running());

    // Still healthy afterwards: a valid message is counted after all that.
    publisher.publish("sensors/dev-1/telemetry", telemetry(t0 + 13'000, 1), 1);
    rig.wait_health(
        [&](const nlohmann::json& h) {
            return h["pipelines"]["sensors"].value("events_in", 0) == valid + 2;
        },
        std::chrono::seconds(10), "the event after the bad ones counted");
    CHECK(rig.daemon->terminate() == 0);
}

}  // namespace tidemark::test
