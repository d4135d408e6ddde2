// End to end through real brokers: telemetry published on the gateway broker comes out of the
// upstream broker as exactly the tumbling, hopping and session windows computed here, closed by
// the watermark while traffic flows and by idleness once it stops (DESIGN.md section 4).
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <sstream>
#include <thread>

#include "tests/integration/daemon.h"

namespace tidemark::test {
namespace {

struct Event {
    std::string device;
    int64_t ts_ms;
    int64_t v;
};

struct Expected {
    int64_t n = 0;
    double sum = 0;
    int64_t first = 0, last = 0;  // sessions: by event time
    std::string closed_by;
};

constexpr int64_t size_ms = 10'000, advance_ms = 5'000, gap_ms = 3'000, delay_ms = 1'000;

nlohmann::json pipeline(const std::string& name, nlohmann::json window, nlohmann::json aggs) {
    TestPipeline p;
    p.window = std::move(window);
    p.aggregates = std::move(aggs);
    return test_pipeline(name, p);
}

int64_t floor_div(int64_t a, int64_t b) {
    return a >= 0 ? a / b : -((-a + b - 1) / b);
}

std::string describe(const WindowKey& k) {
    std::ostringstream s;
    s << k.pipeline << " " << k.key << " [" << k.start_ms << ", " << k.end_ms << ")";
    return s.str();
}

}  // namespace

TEST_CASE("tumbling, hopping and session windows arrive upstream with exact values",
          "[integration]") {
    Rig rig("e2e", {}, {});
    auto cfg = rig.config();
    const nlohmann::json sum_count = {{"n", {{"fn", "count"}}},
                                      {"s", {{"fn", "sum"}, {"field", "v"}}},
                                      {"avg", {{"fn", "mean"}, {"field", "v"}}}};
    cfg["pipelines"] = {
        pipeline("tumble", {{"type", "tumbling"}, {"size", "10s"}}, sum_count),
        pipeline("hop", {{"type", "hopping"}, {"size", "10s"}, {"advance", "5s"}}, sum_count),
        pipeline("sess", {{"type", "session"}, {"gap", "3s"}, {"max_duration", "1m"}},
                 {{"n", {{"fn", "count"}}},
                  {"s", {{"fn", "sum"}, {"field", "v"}}},
                  {"first", {{"fn", "first"}, {"field", "v"}}},
                  {"last", {{"fn", "last"}, {"field", "v"}}}})};
    rig.start(cfg);

    // Ten minutes in the past, on a minute boundary: event time is the devices' business.
    const int64_t t0 = floor_div(now_ms() - 600'000, 60'000) * 60'000;
    std::vector<Event> events = {{"dev-a", 1000, 1},    {"dev-a", 2500, 2},   {"dev-a", 4000, 3},
                                 {"dev-a", 9999, 4},    {"dev-a", 10000, 5},  {"dev-a", 14500, 6},
                                 {"dev-a", 26000, 7},   {"dev-b", 500, 10},   {"dev-b", 3000, 20},
                                 {"dev-b", 8000, 30},   {"dev-b", 15000, 40}, {"dev-b", 16500, 50},
                                 {"dev-b", 27500, 60},  {"dev-c", 5000, 100}, {"dev-c", 6000, 200},
                                 {"dev-c", 11000, 300}, {"dev-c", 21000, 400}};
    // In event-time order across devices, so that nothing is late for the global watermark.
    std::stable_sort(events.begin(), events.end(),
                     [](const Event& a, const Event& b) { return a.ts_ms < b.ts_ms; });
    // Then every device jumps to 45 s: the watermark (min over devices, minus 1 s) reaches 44 s
    // and closes every window ending by then; the rest close on idleness after traffic stops.
    for (const char* d : {"dev-a", "dev-b", "dev-c"})
        events.push_back({d, 45'000, 1000});
    const int64_t watermark_after_traffic = 45'000 - delay_ms;

    auto publisher = TestClient::connect(rig.gateway.uri());
    for (const auto& e : events) {
        publisher.publish("sensors/" + e.device + "/telemetry", telemetry(t0 + e.ts_ms, e.v), 1);
    }

    // The expectation, computed from the events.
    std::map<WindowKey, Expected> expected;
    auto closed_by = [&](int64_t end) {
        return end <= watermark_after_traffic ? "watermark" : "idle";
    };
    auto add = [&](const std::string& p, const Event& e, int64_t start, int64_t end) {
        Expected& x = expected[WindowKey{p, e.device, t0 + start, t0 + end}];
        x.n += 1;
        x.sum += static_cast<double>(e.v);
        x.closed_by = closed_by(end);
    };
    for (const auto& e : events) {
        const int64_t start = floor_div(e.ts_ms, size_ms) * size_ms;
        add("tumble", e, start, start + size_ms);
        for (int64_t s = floor_div(e.ts_ms, advance_ms) * advance_ms; s + size_ms > e.ts_ms;
             s -= advance_ms) {
            add("hop", e, s, s + size_ms);
        }
    }
    std::map<std::string, std::vector<Event>> by_device;
    for (const auto& e : events)
        by_device[e.device].push_back(e);
    for (auto& [device, list] : by_device) {
        // Each event opens [t, t + gap); overlapping ones merge (none of these touch exactly).
        size_t i = 0;
        while (i < list.size()) {
            const int64_t start = list[i].ts_ms;
            int64_t end = start + gap_ms;
            Expected x;
            x.first = list[i].v;
            size_t j = i;
            for (; j < list.size() && list[j].ts_ms < end; ++j) {
                end = std::max(end, list[j].ts_ms + gap_ms);
                x.n += 1;
                x.sum += static_cast<double>(list[j].v);
                x.last = list[j].v;
            }
            x.closed_by = closed_by(end);
            expected[WindowKey{"sess", device, t0 + start, t0 + end}] = x;
            i = j;
        }
    }

    // The last hopping window ends at 55 s: 10 s of idle advance after the 2 s idle timeout.
    auto messages = rig.collector->wait_for(expected.size(), std::chrono::seconds(45));
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // nothing more may come
    const auto results = rig.results();
    INFO("tidemark log:\n" << rig.daemon_log());
    REQUIRE(results.size() == expected.size());

    std::map<WindowKey, ResultRecord> got;
    for (const auto& r : results) {
        const WindowKey k{r.pipeline, r.key, r.start_ms, r.end_ms};
        INFO("result " << r.raw);
        CHECK(r.node == "e2e");
        CHECK(r.kind == "final");
        CHECK(r.revision == 0);
        CHECK(got.emplace(k, r).second);  // one record per window
    }
    for (const auto& [k, x] : expected) {
        INFO("window " << describe(k));
        auto it = got.find(k);
        REQUIRE(it != got.end());
        const ResultRecord& r = it->second;
        INFO("result " << r.raw);
        CHECK(r.closed_by == x.closed_by);
        CHECK(r.values.at("n").is_number_integer());
        CHECK(r.values.at("n").get<int64_t>() == x.n);
        CHECK(r.values.at("s").get<double>() == Approx(x.sum));
        if (k.pipeline == "sess") {
            CHECK(r.values.at("first").get<double>() == Approx(static_cast<double>(x.first)));
            CHECK(r.values.at("last").get<double>() == Approx(static_cast<double>(x.last)));
        } else {
            CHECK(r.values.at("avg").get<double>() == Approx(x.sum / static_cast<double>(x.n)));
        }
        // A watermark-closed window fired when the watermark reached its end.
        CHECK(r.watermark_ms >= k.end_ms);
    }
    const auto health = rig.wait_health(
        [](const nlohmann::json& h) { return h["pipelines"]["tumble"]["open_windows"] == 0; },
        std::chrono::seconds(10), "no open windows");
    for (const char* p : {"tumble", "hop", "sess"}) {
        INFO("health " << health.dump());
        CHECK(health["pipelines"][p]["events_in"] == events.size());
        CHECK(health["pipelines"][p]["too_late"] == 0);
        CHECK(health["pipelines"][p]["malformed"] == 0);
    }
    CHECK(rig.daemon->terminate() == 0);
}

}  // namespace tidemark::test
