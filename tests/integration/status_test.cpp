// `tidemark status` (issue 29) against a real mosquitto and a real tidemark: the health it
// publishes read back by --broker, --node and --config, as JSON and as tables; a node that
// stopped shows offline; --watch redraws and gives events/s from two records, and ends cleanly
// on SIGTERM; a broker that is down and a node without health are refused with a message.
#include <catch2/catch.hpp>

#include <sstream>

#include "tests/integration/daemon.h"

namespace tidemark::test {
namespace {

nlohmann::json pipeline(const std::string& name, const std::string& size) {
    TestPipeline p;
    p.window["size"] = size;
    p.idle_timeout = "1h";
    p.max_open_windows = 1000;
    return test_pipeline(name, p);
}

nlohmann::json parse_json(const CommandResult& r) {
    INFO("stdout: " << r.out << "\nstderr: " << r.err);
    REQUIRE(r.exit_code == 0);
    return nlohmann::json::parse(r.out);
}

const nlohmann::json& node_of(const nlohmann::json& doc, const std::string& node) {
    for (const nlohmann::json& n : doc["nodes"])
        if (n["node"] == node) return n;
    FAIL("no node " << node << " in " << doc.dump());
    throw;
}

const nlohmann::json& pipeline_of(const nlohmann::json& node, const std::string& name) {
    for (const nlohmann::json& p : node["pipelines"])
        if (p["name"] == name) return p;
    FAIL("no pipeline " << name << " in " << node.dump());
    throw;
}

}  // namespace

TEST_CASE("tidemark status shows a running gateway's retained health, then its going offline",
          "[integration]") {
    Rig rig("status-gw", {}, {});
    auto cfg = rig.config();
    cfg["pipelines"] = {pipeline("count_10s", "10s"), pipeline("count_1m", "1m")};
    rig.start(cfg);

    // Ten minutes in the past on a minute boundary: the events at 25 s move the watermark (the
    // lower of the two devices') past [t0, t0 + 10s), so the last, back in that window, is too
    // late for count_10s.
    const int64_t t0 = (now_ms() - 600'000) / 60'000 * 60'000;
    TestClient devices = TestClient::connect(rig.gateway.uri());
    devices.publish("sensors/dev-a/telemetry", telemetry(t0 + 1'000, 1));
    devices.publish("sensors/dev-b/telemetry", telemetry(t0 + 2'000, 1));
    devices.publish("sensors/dev-a/telemetry", telemetry(t0 + 25'000, 1));
    devices.publish("sensors/dev-b/telemetry", telemetry(t0 + 25'000, 1));
    devices.publish("sensors/dev-a/telemetry", telemetry(t0 + 3'000, 1));
    const nlohmann::json health = rig.wait_health(
        [](const nlohmann::json& h) {
            if (!h.contains("pipelines") || !h["pipelines"].contains("count_10s")) return false;
            const nlohmann::json& p = h["pipelines"]["count_10s"];
            return p.value("events_in", 0) == 5 && p.value("too_late", 0) == 1;
        },
        std::chrono::seconds(30), "five events, one too late");
    // The window that lost the event, in the health record as the broker holds it (issue 29).
    const nlohmann::json& windows = health["pipelines"]["count_10s"]["too_late_windows"];
    REQUIRE(windows.size() == 1);
    CHECK(windows[0]["start_ms"] == t0);
    CHECK(windows[0]["end_ms"] == t0 + 10'000);
    CHECK(windows[0]["too_late"] == 1);
    CHECK(health["pipelines"]["count_1m"]["too_late_windows"].empty());

    const std::string uri = rig.gateway.uri();
    const nlohmann::json doc = parse_json(run_tidemark({"status", "--broker", uri, "--json"}));
    CHECK(doc["broker"] == uri);
    const nlohmann::json& n = node_of(doc, "status-gw");
    CHECK(n["status"] == "online");
    CHECK(n["health_topic"] == rig.health_topic());
    CHECK(n["ingest_connected"] == true);
    CHECK(n["upstream"]["configured"] == true);
    CHECK(n["upstream"]["link_up"] == health["upstream"]["link_up"]);
    CHECK(n["outbox"]["rows"].is_number());
    CHECK(n["alarms"].is_array());
    CHECK(n["uptime_s"].is_number());
    REQUIRE(n["pipelines"].size() == 2);
    const nlohmann::json& p = pipeline_of(n, "count_10s");
    CHECK(p["events_in"] == 5);
    CHECK(p["too_late"] == 1);
    CHECK(p["too_late_share"].get<double>() == Approx(0.2));
    CHECK(p["keys"] == health["pipelines"]["count_10s"]["keys"]);
    CHECK(p["version"] == health["pipelines"]["count_10s"]["version"]);
    CHECK(p["events_per_s"].is_null());  // one record: no rate
    CHECK(n["rate"]["source"].is_null());
    CHECK(pipeline_of(n, "count_1m")["too_late"] == 0);

    // The same through --node and through the gateway's own config.
    CHECK(node_of(parse_json(
                      run_tidemark({"status", "--broker", uri, "--node", "status-gw", "--json"})),
                  "status-gw")["pipelines"]
              .size() == 2);
    const nlohmann::json by_config =
        parse_json(run_tidemark({"status", "--config", rig.config_path, "--json"}));
    REQUIRE(by_config["nodes"].size() == 1);
    CHECK(by_config["nodes"][0]["node"] == "status-gw");

    // For a person: the node's line and the pipelines' table, no JSON.
    const CommandResult text = run_tidemark({"status", "--broker", uri});
    INFO(text.out << text.err);
    REQUIRE(text.exit_code == 0);
    CHECK(text.out.find('{') == std::string::npos);
    std::istringstream lines(text.out);
    bool node_line = false, header = false, row = false;
    for (std::string line; std::getline(lines, line);) {
        if (line.starts_with("status-gw ") && line.find(" online ") != std::string::npos &&
            line.find(" connected ") != std::string::npos)
            node_line = true;
        if (line.find("PIPELINE") != std::string::npos &&
            line.find("WATERMARK LAG") != std::string::npos &&
            line.find("TOO LATE") != std::string::npos)
            header = true;
        if (line.starts_with("  count_10s ") && line.find(" 1 (20%) ") != std::string::npos)
            row = true;
    }
    CHECK(node_line);
    CHECK(header);
    CHECK(row);

    // A clean stop says offline on the status topic; status shows it with the last record.
    REQUIRE(rig.daemon->terminate() == 0);
    const nlohmann::json after = parse_json(run_tidemark({"status", "--broker", uri, "--json"}));
    CHECK(node_of(after, "status-gw")["status"] == "offline");
}

TEST_CASE("tidemark status --watch redraws with events/s from two records and stops on SIGTERM",
          "[integration]") {
    Rig rig("status-watch", {}, {});
    auto cfg = rig.config();
    cfg["pipelines"] = {pipeline("count_10s", "10s")};
    rig.start(cfg);
    SteadyPublisher devices(rig.gateway.uri(), {"dev-a", "dev-b"}, std::chrono::milliseconds(50));
    devices.start();

    Daemon watch(rig.config_path, rig.dir.path() + "/watch.log", "status",
                 {"--watch", "--json", "--interval", "500ms"});
    watch.start();
    nlohmann::json rated;
    const bool redrawn = eventually(
        [&] {
            std::istringstream lines(watch.log());
            for (std::string line; std::getline(lines, line);) {
                if (!line.starts_with("{")) continue;
                const auto doc = nlohmann::json::parse(line, nullptr, false);
                if (doc.is_discarded() || doc["nodes"].empty()) continue;
                const nlohmann::json& n = doc["nodes"][0];
                const nlohmann::json& rate = n["pipelines"][0]["events_per_s"];
                if (n["rate"]["source"] == "records" && rate.is_number() &&
                    rate.get<double>() > 0) {
                    rated = n;
                    return true;
                }
            }
            return false;
        },
        std::chrono::seconds(30));
    devices.stop();
    INFO(watch.log());
    REQUIRE(redrawn);
    // Two devices at 20/s each: the rate is between two records' events_in over their span.
    CHECK(rated["rate"]["span_ms"].get<int64_t>() > 0);
    CHECK(watch.terminate(std::chrono::seconds(10)) == 0);
}

TEST_CASE("tidemark status refuses a broker that is down and a node without health",
          "[integration]") {
    Broker broker = Broker::start();
    const std::string uri = broker.uri();

    const CommandResult missing =
        run_tidemark({"status", "--broker", uri, "--node", "no-such-node", "--timeout", "2s"});
    INFO(missing.out << missing.err);
    CHECK(missing.exit_code == 1);
    CHECK(missing.err.find("no retained health") != std::string::npos);
    CHECK(missing.err.find("tidemark/no-such-node/health") != std::string::npos);

    const CommandResult empty = run_tidemark({"status", "--broker", uri, "--json"});
    CHECK(empty.exit_code == 1);
    CHECK(empty.out.empty());

    broker.stop();
    const CommandResult down =
        run_tidemark({"status", "--broker", uri, "--timeout", "2s"}, std::chrono::seconds(20));
    INFO(down.out << down.err);
    CHECK(down.exit_code == 1);
    CHECK(down.err.find("cannot connect to " + uri) != std::string::npos);

    const CommandResult usage = run_tidemark({"status"});
    CHECK(usage.exit_code == 2);
    CHECK(usage.err.find("--config FILE or --broker URI") != std::string::npos);
}

}  // namespace tidemark::test
