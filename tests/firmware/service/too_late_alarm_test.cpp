// late.alarm (issue 29): health raises `too_late: PIPELINE` while more than a share of the
// pipeline's events over a span were too late, and clears it when they no longer are.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <string>

#include "adapters/config/config.h"
#include "firmware/service/prometheus_text.h"
#include "firmware/service/service_parts.h"
#include "firmware/service/too_late_alarm.h"
#include "tests/firmware/command_test_support.h"
#include "tests/support/broker.h"
#include "tests/support/manual_clock.h"

using namespace tidemark;
using nlohmann::json;

namespace {

std::string pipelines_json(const std::string& alarm) {
    return R"([{"name": "p", "topic": "t/+", "key": "topic:1",
    "timestamp": {"pointer": "/ts", "format": "epoch_ms"}, "fields": {"v": "/v"},
    "window": {"type": "tumbling", "size": "10s"},
    "watermark": {"delay": "0s", "idle_timeout": "1h"},
    "late": {"allowed_lateness": "5s")" +
           alarm + R"(}, "aggregates": {"n": {"fn": "count"}}}])";
}

bool has_alarm(const std::string& health_json, const std::string& alarm) {
    const json health = json::parse(health_json);
    for (const json& a : health["alarms"])
        if (a == alarm) return true;
    return false;
}

}  // namespace

TEST_CASE("TooLateWatch: the share over the span, at least 1 / share events") {
    const config::PipelineConfig::TooLateAlarm alarm{true, 0.01, 300'000};
    firmware::TooLateWatch w;
    uint64_t events = 0, late = 0;
    int64_t now = 0;
    // 1,000 events a minute, 2 % too late: raised once a span holds 100 events.
    CHECK_FALSE(w.update(now, events, late, alarm));
    for (int s = 1; s <= 600; ++s) {
        now += 1'000;
        events += 17;
        if (s % 3 == 0) late += 1;  // 1 in 51
        const bool raised = w.update(now, events, late, alarm);
        if (events - 0 < 100) CHECK_FALSE(raised);
        if (s >= 10) CHECK(raised);
    }
    CHECK(w.share() > 0.01);
    // Then none too late: cleared once the late ones are under 1 % of the span.
    bool cleared_at_s = false;
    int cleared_s = 0;
    for (int s = 1; s <= 600; ++s) {
        now += 1'000;
        events += 17;
        if (!w.update(now, events, late, alarm) && !cleared_at_s) {
            cleared_at_s = true;
            cleared_s = s;
        }
    }
    REQUIRE(cleared_at_s);
    // 1 in 51 of the span's events until about half of it (1 % = half of 2 %) is on time.
    CHECK(cleared_s > 120);
    CHECK(cleared_s < 180);
    CHECK_FALSE(w.update(now, events, late, alarm));

    // Three events, one too late: no rate yet.
    firmware::TooLateWatch few;
    CHECK_FALSE(few.update(0, 0, 0, alarm));
    CHECK_FALSE(few.update(1'000, 3, 1, alarm));
    // Off: never.
    firmware::TooLateWatch off;
    const config::PipelineConfig::TooLateAlarm disabled{false, 0.01, 300'000};
    CHECK_FALSE(off.update(0, 0, 0, disabled));
    CHECK_FALSE(off.update(1'000, 1000, 1000, disabled));
    // Counters that went down (another version took over): the span starts again.
    firmware::TooLateWatch reset;
    CHECK_FALSE(reset.update(0, 0, 0, alarm));
    CHECK(reset.update(1'000, 1000, 500, alarm));
    CHECK_FALSE(reset.update(2'000, 10, 0, alarm));
    CHECK_FALSE(reset.update(3'000, 500, 0, alarm));
}

TEST_CASE("health raises and clears too_late for a pipeline whose events come too late") {
    test::TempDir dir("tidemark-too-late-alarm");
    std::string text = test::config_text(
        dir.path(), pipelines_json(R"(, "alarm": {"share": 0.05, "over": "1m"})"));
    text.insert(text.rfind('}'), R"(, "storage": {"fsync": "never"})");
    auto config = config::parse_config(text, "/");
    INFO((config ? std::string() : config::format_errors(config.error())));
    REQUIRE(config);
    REQUIRE(config->pipelines[0].too_late_alarm.share == 0.05);

    test::ManualClock clock(1'000'000 + 700'000);
    auto opened = firmware::ServiceParts::open(*config, clock);
    REQUIRE(opened);
    firmware::ServiceParts& parts = **opened;
    REQUIRE(parts.host().recover([] { return false; }));
    int next = 0;
    // `count` events from three devices, one in `late_every` 30 s late (past the 5 s lateness).
    auto feed = [&](int count, int late_every) {
        for (int k = 0; k < count; ++k, ++next) {
            const int64_t ingest = 1'000'000 + int64_t{next} * 100;
            const int64_t ts =
                late_every && k % late_every == late_every - 1 ? ingest - 30'000 : ingest;
            REQUIRE(parts.host().log().append(log::RecordType::message, ingest,
                                              "t/d" + std::to_string(next % 3),
                                              R"({"ts": )" + std::to_string(ts) + R"(, "v": 1})"));
        }
        for (;;) {
            auto n = parts.host().step(4096, /*drain=*/true);
            REQUIRE(n);
            if (*n == 0) break;
        }
        parts.refresh_health(nullptr, nullptr);
    };
    feed(0, 0);
    CHECK_FALSE(has_alarm(parts.health_json(), "too_late: p"));
    // A minute of 50 events a second, one in ten too late (10 % > 5 %).
    for (int s = 0; s < 60; ++s) {
        clock.advance(1'000);
        feed(50, 10);
    }
    INFO(parts.health_json());
    CHECK(has_alarm(parts.health_json(), "too_late: p"));
    // The Prometheus text names the alarm with its pipeline.
    auto prom = firmware::prometheus_text(parts.health_json());
    REQUIRE(prom);
    CHECK(prom->find(R"(tidemark_alarm{node="gw-test",alarm="too_late",pipeline="p"} 1)") !=
          std::string::npos);
    // Then a minute and a half of events on time: cleared.
    for (int s = 0; s < 90; ++s) {
        clock.advance(1'000);
        feed(50, 0);
    }
    CHECK_FALSE(has_alarm(parts.health_json(), "too_late: p"));
}

TEST_CASE("late.alarm: false turns it off; a share outside (0, 1] is refused") {
    test::TempDir dir("tidemark-too-late-config");
    {
        auto c = config::parse_config(
            test::config_text(dir.path(), pipelines_json(R"(, "alarm": false)")), "/");
        INFO((c ? std::string() : config::format_errors(c.error())));
        REQUIRE(c);
        CHECK_FALSE(c->pipelines[0].too_late_alarm.enabled);
    }
    {
        auto c = config::parse_config(test::config_text(dir.path(), pipelines_json("")), "/");
        REQUIRE(c);
        CHECK(c->pipelines[0].too_late_alarm.enabled);  // on by default: 1 % over 5 minutes
        CHECK(c->pipelines[0].too_late_alarm.share == 0.01);
        CHECK(c->pipelines[0].too_late_alarm.over_ms == 300'000);
    }
    for (const char* bad : {R"(, "alarm": {"share": 0})", R"(, "alarm": {"share": 1.5})",
                            R"(, "alarm": {"over": "0s"})", R"(, "alarm": true)"}) {
        INFO(bad);
        auto c = config::parse_config(test::config_text(dir.path(), pipelines_json(bad)), "/");
        REQUIRE_FALSE(c);
        CHECK(config::format_errors(c.error()).find("/late/alarm") != std::string::npos);
    }
}
