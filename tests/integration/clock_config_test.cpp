// The gateway's clock before NTP, and restarts with a changed config, through the real binary
// and brokers (issue 17, items 5 and 6).
#include <catch2/catch.hpp>

#include <cstdlib>
#include <thread>

#include "tests/integration/daemon.h"

namespace tidemark::test {
namespace {

nlohmann::json pipeline(const std::string& name, const std::string& size) {
    TestPipeline p;
    p.window["size"] = size;
    p.delay = "0s";
    p.idle_timeout = "1s";
    return test_pipeline(name, p);
}

const nlohmann::json& stats_of(const nlohmann::json& health, const std::string& name) {
    return health.at("pipelines").at(name);
}

bool has_alarm(const nlohmann::json& h, const std::string& alarm) {
    for (const auto& a : h.value("alarms", nlohmann::json::array()))
        if (a.get<std::string>().rfind(alarm, 0) == 0) return true;
    return false;
}

// The clock seam (firmware/clock.h): a file holding the state the kernel would report.
struct ClockFile {
    explicit ClockFile(std::string file) : path(std::move(file)) {
        ::setenv("TIDEMARK_CLOCK_STATUS", path.c_str(), 1);
    }
    ~ClockFile() { ::unsetenv("TIDEMARK_CLOCK_STATUS"); }
    void set(const std::string& state) { write_file(path, state + "\n"); }
    std::string path;
};

// Waits until the daemon's log holds `needle` at least `count` times (health is retained on the
// broker: a record from the previous run would satisfy a health wait at once).
void wait_log(Rig& rig, const std::string& needle, size_t count) {
    for (int i = 0; i < 150; ++i) {
        const std::string log = rig.daemon_log();
        size_t found = 0;
        for (size_t at = log.find(needle); at != std::string::npos; at = log.find(needle, at + 1))
            ++found;
        if (found >= count) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    FAIL("the daemon never logged '" << needle << "' " << count << " times:\n" << rig.daemon_log());
}

}  // namespace

TEST_CASE("an unsynchronised clock holds clamping and idle advance until it syncs",
          "[integration]") {
    Rig rig("clock", {}, {});
    ClockFile clock(rig.dir.path() + "/clock");
    clock.set("unsynchronised");
    auto cfg = rig.config();
    cfg["source"]["clock"] = "synchronised";
    cfg["pipelines"] = {pipeline("p", "10s")};
    rig.start(cfg);

    auto h = rig.wait_health([](const auto& j) { return has_alarm(j, "clock_unsynchronised"); },
                             std::chrono::seconds(10), "the clock alarm");
    CHECK(h["clock"]["trusted"] == false);

    // A device stamping correct time an hour ahead of this (slow) clock is not clamped.
    auto publisher = TestClient::connect(rig.gateway.uri());
    const int64_t ahead = now_ms() + 3'600'000;
    publisher.publish("sensors/dev/telemetry", telemetry(ahead, 1), 1);
    h = rig.wait_health([](const auto& j) { return stats_of(j, "p")["events_in"] == 1; },
                        std::chrono::seconds(10), "the event");
    CHECK(stats_of(h, "p")["clamped"] == 0);
    // Silence while unsynchronised: the idle partition's watermark stays where the event put it.
    const int64_t held = stats_of(h, "p")["watermark_ms"].get<int64_t>();
    std::this_thread::sleep_for(std::chrono::seconds(4));
    h = rig.wait_health([](const auto&) { return true; }, std::chrono::seconds(5), "health");
    CHECK(stats_of(h, "p")["watermark_ms"].get<int64_t>() == held);
    CHECK(stats_of(h, "p")["partitions_idle"] == 1);

    clock.set("synchronised");
    h = rig.wait_health([](const auto& j) { return j["clock"]["trusted"] == true; },
                        std::chrono::seconds(10), "the clock trusted");
    CHECK_FALSE(has_alarm(h, "clock_unsynchronised"));
    // Now idle time counts again (from the sync on, not from before it).
    h = rig.wait_health(
        [&](const nlohmann::json& j) {
            return stats_of(j, "p")["watermark_ms"].get<int64_t>() > held;
        },
        std::chrono::seconds(10), "the idle watermark to move");
    CHECK(stats_of(h, "p")["watermark_ms"].get<int64_t>() < held + 10'000);
    // And the clamp applies to an event far ahead of the synchronised clock.
    publisher.publish("sensors/dev2/telemetry", telemetry(now_ms() + 7'200'000, 1), 1);
    h = rig.wait_health([](const auto& j) { return stats_of(j, "p")["events_in"] == 2; },
                        std::chrono::seconds(10), "the second event");
    CHECK(stats_of(h, "p")["clamped"] == 1);

    // A replay of the same log (the clock changes are in it) gives what the service sent.
    CHECK(rig.daemon->terminate() == 0);
    const auto replayed = run_tidemark(
        {"replay", "--config", rig.config_path, "--out", rig.dir.path() + "/replay.jsonl"});
    INFO(replayed.err);
    CHECK(replayed.exit_code == 0);
}

TEST_CASE("a removed pipeline's state is dropped; a changed one backfills its new version",
          "[integration]") {
    Rig rig("restart-config", {}, {});
    auto cfg = rig.config();
    cfg["pipelines"] = {pipeline("keep", "10s"), pipeline("gone", "10s")};
    rig.start(cfg);
    auto publisher = TestClient::connect(rig.gateway.uri());
    publisher.publish("sensors/dev/telemetry", telemetry(now_ms(), 1), 1);
    rig.wait_health([](const auto& j) { return stats_of(j, "keep")["events_in"] == 1; },
                    std::chrono::seconds(10), "the event");
    CHECK(rig.daemon->terminate() == 0);

    // Removed: starts, says so, keeps running.
    cfg["pipelines"] = {pipeline("keep", "10s")};
    write_config(rig.dir.path(), "tidemark.json", cfg);
    rig.daemon->start();
    wait_log(rig, "ingest: connected", 2);
    INFO(rig.daemon_log());
    CHECK(rig.daemon_log().find("pipeline 'gone' is no longer in the config") != std::string::npos);
    CHECK(rig.daemon->terminate() == 0);

    // Changed: check-config says what the start will do; the start backfills the new version
    // from the log while the old one runs live, then switches (DESIGN.md section 4). Before
    // versions this was a refusal (exit 78).
    cfg["pipelines"] = {pipeline("keep", "20s")};
    write_config(rig.dir.path(), "tidemark.json", cfg);
    const auto checked = run_tidemark({"check-config", rig.config_path});
    INFO(checked.out);
    CHECK(checked.out.find("would backfill") != std::string::npos);
    rig.daemon->start();
    wait_log(rig, "ingest: connected", 3);
    wait_log(rig, "is live (previous: ", 1);
    CHECK(rig.daemon->running());

    // Dropping a pipeline's state by hand still works with the service stopped.
    CHECK(rig.daemon->terminate() == 0);
    const auto dropped =
        run_tidemark({"inspect", "--config", rig.config_path, "--drop-pipeline", "keep"});
    INFO(dropped.err);
    CHECK(dropped.exit_code == 0);
    rig.daemon->start();
    wait_log(rig, "ingest: connected", 4);
}

}  // namespace tidemark::test
