// Issue 7: the live run's results, as the upstream broker delivered them, equal `tidemark replay`
// over the same log with the same config, byte for byte and in the same order. The stream has
// in-order data, late events that re-fire windows (upsert and retract), a late event that merges
// two fired sessions, a too-late event, and windows closed by the watermark and by idleness.
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "tests/integration/daemon.h"

namespace tidemark::test {

namespace {

nlohmann::json pipeline(const std::string& name, nlohmann::json window,
                        const std::string& corrections, nlohmann::json aggs) {
    return {
        {"name", name},
        {"topic", "sensors/+/telemetry"},
        {"key", "topic:1"},
        {"timestamp", {{"pointer", "/ts"}, {"format", "epoch_ms"}}},
        {"fields", {{"v", "/v"}}},
        {"window", std::move(window)},
        {"watermark",
         {{"delay", "1s"}, {"idle_timeout", "1s"}, {"max_future", "1m"}, {"scope", "global"}}},
        {"late", {{"allowed_lateness", "10s"}, {"too_late", "drop"}, {"corrections", corrections}}},
        {"aggregates", std::move(aggs)},
        {"limits", {{"max_keys", 100}, {"max_open_windows", 10000}}}};
}

std::vector<std::string> lines_of(const std::string& text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line))
        out.push_back(line);
    return out;
}

std::string pipeline_of(const std::string& payload) {
    return parse_result(payload).pipeline;
}

}  // namespace

TEST_CASE("live results upstream equal tidemark replay byte for byte", "[integration]") {
    Rig rig("replay", {}, {});
    auto cfg = rig.config();
    const nlohmann::json aggs = {{"n", {{"fn", "count"}}},
                                 {"s", {{"fn", "sum"}, {"field", "v"}}},
                                 {"avg", {{"fn", "mean"}, {"field", "v"}}},
                                 {"sd", {{"fn", "stddev"}, {"field", "v"}}},
                                 {"p90", {{"fn", "quantile"}, {"field", "v"}, {"q", 0.9}}},
                                 {"first", {{"fn", "first"}, {"field", "v"}}},
                                 {"last", {{"fn", "last"}, {"field", "v"}}}};
    cfg["pipelines"] = {
        pipeline("tumble", {{"type", "tumbling"}, {"size", "10s"}}, "upsert", aggs),
        pipeline("hop", {{"type", "hopping"}, {"size", "10s"}, {"advance", "5s"}}, "retract", aggs),
        pipeline("sess", {{"type", "session"}, {"gap", "3s"}, {"max_duration", "1m"}}, "upsert",
                 aggs)};
    rig.start(cfg);

    const int64_t t0 = (now_ms() - 600'000) / 60'000 * 60'000;
    struct Event {
        const char* device;
        int64_t ts_ms;
        int64_t v;
    };
    std::vector<Event> events = {{"dev-a", 1000, 1},    {"dev-a", 2500, 2},   {"dev-a", 4000, 3},
                                 {"dev-a", 9999, 4},    {"dev-a", 10000, 5},  {"dev-a", 14500, 6},
                                 {"dev-a", 26000, 7},   {"dev-b", 500, 10},   {"dev-b", 3000, 20},
                                 {"dev-b", 8000, 30},   {"dev-b", 15000, 40}, {"dev-b", 16500, 50},
                                 {"dev-b", 27500, 60},  {"dev-c", 5000, 100}, {"dev-c", 6000, 200},
                                 {"dev-c", 11000, 300}, {"dev-c", 21000, 400}};
    std::stable_sort(events.begin(), events.end(),
                     [](const Event& a, const Event& b) { return a.ts_ms < b.ts_ms; });
    // With the watermark at 20 s: 12 s is late but correctable (re-fires [10, 20) and the
    // hopping windows around it; joins two fired sessions of dev-a into one), 1 s is too late
    // for [0, 10) (its horizon, 10 s + 10 s lateness, is reached).
    events.push_back({"dev-a", 12000, 8});
    events.push_back({"dev-b", 1000, 9});
    // Quantile and stddev values with fractions, to compare number formatting too.
    events.push_back({"dev-c", 21500, 7});

    auto publisher = TestClient::connect(rig.gateway.uri());
    for (const auto& e : events) {
        publisher.publish(std::string("sensors/") + e.device + "/telemetry",
                          telemetry(t0 + e.ts_ms, e.v), 1);
    }

    // Everything closes on idleness (the last horizon is the hopping [25 s, 35 s) + 10 s);
    // then nothing more can be emitted, and the outbox must be empty before the stop.
    const auto health = rig.wait_health(
        [&](const nlohmann::json& h) {
            for (const char* p : {"tumble", "hop", "sess"}) {
                if (h["pipelines"][p].value("events_in", size_t{0}) != events.size()) return false;
                if (h["pipelines"][p].value("open_windows", 1) != 0) return false;
            }
            return h["outbox"].value("rows", 1) == 0 && h["upstream"].value("inflight", 1) == 0;
        },
        std::chrono::seconds(75), "every window closed and the outbox drained");
    INFO("health " << health.dump());
    CHECK(health["pipelines"]["tumble"]["late_updated"].get<int64_t>() >= 1);
    CHECK(health["pipelines"]["tumble"]["too_late"].get<int64_t>() >= 1);
    const int64_t emitted_total = [&] {
        int64_t n = 0;
        for (const char* p : {"tumble", "hop", "sess"}) {
            for (const char* k : {"final", "update", "retract"}) {
                n += health["pipelines"][p]["emitted"][k].get<int64_t>();
            }
        }
        return n;
    }();
    rig.collector->wait_for(static_cast<size_t>(emitted_total), std::chrono::seconds(10));
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    REQUIRE(rig.daemon->terminate() == 0);

    // Live, in arrival order; a resend of an id (none expected on a clean run) is left out.
    std::vector<std::string> live;
    std::set<std::string> ids;
    for (const auto& m : rig.collector->messages()) {
        if (ids.insert(parse_result(m.payload).id).second) live.push_back(m.payload);
    }
    CHECK(live.size() == rig.collector->messages().size());
    CHECK(static_cast<int64_t>(live.size()) == emitted_total);
    std::set<std::string> kinds;
    for (const auto& p : live)
        kinds.insert(parse_result(p).kind);
    CHECK(kinds == std::set<std::string>{"final", "update", "retract"});

    const std::string out = rig.dir.path() + "/replay.jsonl";
    const auto r = run_tidemark({"replay", "--config", rig.config_path, "--out", out});
    INFO("replay stderr: " << r.err);
    REQUIRE(r.exit_code == 0);
    const auto replayed = lines_of(read_file_text(out));

    // Per pipeline, the sequences are equal byte for byte.
    for (const char* p : {"tumble", "hop", "sess"}) {
        std::vector<std::string> a, b;
        for (const auto& s : live) {
            if (pipeline_of(s) == p) a.push_back(s);
        }
        for (const auto& s : replayed) {
            if (pipeline_of(s) == p) b.push_back(s);
        }
        INFO("pipeline " << p);
        CHECK(!a.empty());
        CHECK(a.size() == b.size());
        for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
            INFO("position " << i);
            CHECK(a[i] == b[i]);
        }
    }
    // One forwarder connection at QoS1 delivers in outbox order: the whole sequence matches.
    CHECK(live == replayed);
}

}  // namespace tidemark::test
