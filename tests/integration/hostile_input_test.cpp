// Issue 25, finding 3: one large publish on a subscribed topic. Paho C reads a whole packet
// into memory before tidemark can look at its size, so a 150 MB retained message took
// tidemark to 300 MiB (VmHWM), past the unit's MemoryMax=256M: killed, restarted, sent the
// retained message again on the new subscription, killed again. Ingest now connects with
// MQTT 5 and a Maximum Packet Size from source.max_payload: the broker drops larger packets for
// this client (mosquitto logs "Dropping too large outgoing PUBLISH for <client id>").
//
// Time: about 30 s.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "tests/integration/daemon.h"

namespace tidemark::test {
namespace {

using namespace std::chrono_literals;

// A field of /proc/PID/status in KiB ("VmHWM", "VmRSS"); -1 when it cannot be read.
int64_t status_kib(pid_t pid, const std::string& field) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1));
    }
    return -1;
}

nlohmann::json count_pipeline() {
    return {
        {"name", "count"},
        {"topic", "sensors/+/telemetry"},
        {"key", "topic:1"},
        {"timestamp", "ingest"},
        {"window", {{"type", "tumbling"}, {"size", "2s"}}},
        {"watermark",
         {{"delay", "0s"}, {"idle_timeout", "2s"}, {"max_future", "1m"}, {"scope", "global"}}},
        {"late", {{"allowed_lateness", "0s"}, {"too_late", "drop"}, {"corrections", "upsert"}}},
        {"aggregates", {{"n", {{"fn", "count"}}}}},
        {"limits", {{"max_keys", 100}, {"max_open_windows", 10000}}},
    };
}

int64_t counted(const Rig& rig, const std::string& key) {
    int64_t n = 0;
    for (const auto& [k, r] : upsert_view(rig.results()))
        if (k.key == key) n += r.values.at("n").get<int64_t>();
    return n;
}

// Publishes `bytes` bytes of `fill` at QoS1 with mosquitto_pub (Paho C++ takes longer than
// the test client's 10 s for 150 MB here).
void publish_huge(const Broker& broker, const std::string& dir, const std::string& topic,
                  size_t bytes, char fill, bool retained) {
    const std::string path = dir + "/huge.bin";
    {
        std::ofstream out(path, std::ios::binary);
        const std::string chunk(1 << 20, fill);
        for (size_t left = bytes; left > 0; left -= std::min(left, chunk.size()))
            out.write(chunk.data(), static_cast<std::streamsize>(std::min(left, chunk.size())));
    }
    const std::string command = "mosquitto_pub -h 127.0.0.1 -p " + std::to_string(broker.port()) +
                                " -q 1 " + (retained ? "-r " : "") + "-t " + topic + " -f " + path;
    const int rc = std::system(command.c_str());
    std::remove(path.c_str());
    if (rc != 0) throw std::runtime_error(command + ": exit " + std::to_string(rc));
}

}  // namespace

TEST_CASE("a 150 MB retained message on a subscribed topic: tidemark stays up, under 64 MiB",
          "[integration][hostile]") {
    constexpr size_t huge_bytes = 150'000'000;
    Rig rig("huge", {}, {});
    // Retained before tidemark subscribes: the broker sends it on every subscription.
    publish_huge(rig.gateway, rig.dir.path(), "sensors/huge/telemetry", huge_bytes, 'x', true);
    auto cfg = rig.config();
    cfg["pipelines"] = {count_pipeline()};
    rig.start(cfg);
    const pid_t pid = rig.daemon->pid();

    // And one more, live (QoS1) while it is subscribed; then ordinary traffic behind both.
    TestClient publisher = TestClient::connect(rig.gateway.uri());
    publish_huge(rig.gateway, rig.dir.path(), "sensors/huge/telemetry", huge_bytes, 'y', false);
    for (int i = 0; i < 20; ++i)
        publisher.publish("sensors/small/telemetry", "{\"v\":" + std::to_string(i) + "}", 1);
    const bool all_small = eventually([&] { return counted(rig, "small") == 20; }, 30s);
    INFO("tidemark log:\n" << rig.daemon_log());
    CHECK(all_small);

    const int64_t hwm_kib = status_kib(pid, "VmHWM");
    std::printf(
        "hostile_input: after a 150 MB retained and a 150 MB live publish: VmHWM %lld "
        "KiB, VmRSS %lld KiB\n",
        static_cast<long long>(hwm_kib), static_cast<long long>(status_kib(pid, "VmRSS")));
    REQUIRE(hwm_kib > 0);
    CHECK(hwm_kib < 64 * 1024);
    CHECK(rig.daemon->running());
    CHECK(rig.daemon->starts() == 1);
    CHECK(counted(rig, "huge") == 0);  // neither reached tidemark
    // What an operator sees: the broker says so in its log, naming tidemark's client id.
    const std::string broker_log = rig.gateway.log();
    INFO("broker log:\n" << broker_log);
    CHECK(broker_log.find("Dropping too large outgoing PUBLISH for tidemark-huge") !=
          std::string::npos);

    // A restart subscribes again: the broker offers the retained message again, and drops it.
    CHECK(rig.daemon->terminate() == 0);
    rig.daemon->start();
    rig.wait_health([](const nlohmann::json& h) { return h["ingest"].value("connected", false); },
                    15s, "ingest connected after the restart");
    publisher.publish("sensors/small/telemetry", "{\"v\":20}", 1);
    CHECK(eventually([&] { return counted(rig, "small") == 21; }, 30s));
    const int64_t hwm_after_restart_kib = status_kib(rig.daemon->pid(), "VmHWM");
    std::printf("hostile_input: after the restart: VmHWM %lld KiB\n",
                static_cast<long long>(hwm_after_restart_kib));
    CHECK(hwm_after_restart_kib < 64 * 1024);
    CHECK(rig.daemon->terminate() == 0);
}

}  // namespace tidemark::test
