// run_service in-process (firmware/service/runtime.h), between two real mosquittos on loopback:
// what its contract says it does, tested on the function itself rather than through the binary.
// On stop it stops ingest, drains what was logged and takes a final checkpoint (so a second run
// over the same directory replays nothing and sends nothing twice); a reload (what SIGHUP sets)
// that adds a pipeline backfills it over the retained log; a reload of a config that does not
// parse leaves the service running as it was.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <thread>

#include "adapters/config/config.h"
#include "adapters/lmdb/store.h"
#include "adapters/log/log_reader.h"
#include "firmware/adapter_options.h"
#include "firmware/clock.h"
#include "firmware/service/runtime.h"
#include "tests/support/broker.h"

using namespace std::chrono_literals;
using nlohmann::json;
using tidemark::test::Broker;
using tidemark::test::TempDir;
using tidemark::test::TestClient;
namespace firmware = tidemark::firmware;
namespace config = tidemark::config;
namespace lmdb = tidemark::lmdb;
namespace logns = tidemark::log;

namespace {

json pipeline(const std::string& name, const std::string& fn) {
    return {{"name", name},
            {"topic", "sensors/+/telemetry"},
            {"key", "topic:1"},
            {"timestamp", {{"pointer", "/ts"}, {"format", "epoch_ms"}}},
            {"fields", {{"v", "/v"}}},
            {"window", {{"type", "tumbling"}, {"size", "10s"}}},
            {"watermark", {{"delay", "1s"}, {"max_future", "1m"}, {"scope", "global"}}},
            {"late", {{"allowed_lateness", "0s"}, {"too_late", "drop"}}},
            {"aggregates", {{"x", {{"fn", fn}, {"field", "v"}}}}},
            {"limits", {{"max_keys", 100}, {"max_open_windows", 1000}}}};
}

json service_config(const std::string& data_dir, const Broker& gateway, const Broker& upstream) {
    return {
        {"node_id", "rt-gw"},
        {"data_dir", data_dir},
        {"storage", {{"map_size", "64MiB"}, {"fsync", "interval"}, {"fsync_interval", "200ms"}}},
        {"checkpoint", {{"interval", "1s"}}},
        {"source", {{"uri", gateway.uri()}, {"client_id", "rt-gw-in"}}},
        {"upstream",
         {{"uri", upstream.uri()},
          {"client_id", "rt-gw-up"},
          {"topic", "tidemark/{node_id}/{pipeline}"},
          {"qos", 1},
          {"outbox", {{"max_bytes", "4MiB"}, {"when_full", "pause_ingest"}}}}},
        {"health", {{"topic", "tidemark/{node_id}/health"}, {"interval", "1s"}}},
        {"pipelines", json::array({pipeline("count_10s", "count")})}};
}

void write_text(const std::string& path, const std::string& text) {
    std::ofstream out(path, std::ios::trunc);
    out << text;
    REQUIRE(out.good());
}

config::Config load(const std::string& path) {
    auto loaded = config::load_config_file(path);
    if (!loaded) {
        std::string why;
        for (const auto& e : loaded.error())
            why += e.message + "; ";
        FAIL("config: " << why);
    }
    return std::move(*loaded);
}

// One run of the service on its own thread, as main runs it; stopped (and joined) by stop().
class Running {
  public:
    Running(const std::string& config_path) : config_(load(config_path)), options_{config_path} {
        thread_ = std::thread([this] {
            result_ = firmware::run_service(config_, options_, signals_, clock_);
            done_ = true;
        });
    }
    ~Running() { stop(); }
    void reload() { signals_.reload = true; }
    bool done() const { return done_; }
    tidemark::Result<void> stop() {
        signals_.stop = true;
        if (thread_.joinable()) thread_.join();
        return result_;
    }

  private:
    config::Config config_;
    firmware::RunOptions options_;
    firmware::Signals signals_;
    firmware::SystemClock clock_;
    std::atomic<bool> done_{false};
    tidemark::Result<void> result_;
    std::thread thread_;
};

struct Result {
    std::string id, pipeline, key;
    int64_t start_ms = 0;
    json values;
};

std::vector<Result> results(const TestClient& collector) {
    std::vector<Result> out;
    for (const auto& m : collector.messages()) {
        if (m.topic.ends_with("/health") || m.topic.ends_with("/side")) continue;
        const json j = json::parse(m.payload, nullptr, false);
        if (!j.is_object() || !j.contains("window")) continue;  // version records
        out.push_back({j["id"], j["pipeline"], j["key"], j["window"]["start"], j["values"]});
    }
    return out;
}

bool eventually(const std::function<bool()>& ok, std::chrono::milliseconds timeout) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (!ok()) {
        if (std::chrono::steady_clock::now() > end) return ok();
        std::this_thread::sleep_for(50ms);
    }
    return true;
}

// The window starts 60 s ago on the 10 s grid; 250 events of device d1, one per 100 ms of
// event time: windows t0 and t0+10s close with 100 each, t0+20s stays open (50).
int64_t publish_history(TestClient& publisher) {
    const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
    const int64_t t0 = now / 10000 * 10000 - 60000;
    for (int i = 0; i < 250; ++i) {
        publisher.publish(
            "sensors/d1/telemetry",
            "{\"ts\":" + std::to_string(t0 + i * 100) + ",\"v\":" + std::to_string(i) + "}", 1);
    }
    return t0;
}

}  // namespace

TEST_CASE(
    "run_service: a stop drains, checkpoints at the log's end, and a second run sends "
    "nothing twice; a reload adds a pipeline over the retained log",
    "[runtime]") {
    Broker gateway = Broker::start();
    Broker upstream = Broker::start();
    TempDir dir("tm-runtime");
    const std::string data_dir = dir.path() + "/data";
    const std::string config_path = dir.path() + "/tidemark.json";
    json cfg = service_config(data_dir, gateway, upstream);
    write_text(config_path, cfg.dump(2));

    TestClient collector = TestClient::connect(upstream.uri(), "rt-collector");
    collector.subscribe("tidemark/rt-gw/#", 1);
    int64_t t0 = 0;
    {
        Running service(config_path);
        // Ingest subscribes a moment after the start: QoS 1 publishes before that have no
        // subscriber, so wait for the health record that says it is connected.
        TestClient health = TestClient::connect(gateway.uri(), "rt-health");
        health.subscribe("tidemark/rt-gw/health", 0);
        REQUIRE(eventually(
            [&] {
                for (const auto& m : health.messages()) {
                    const json h = json::parse(m.payload, nullptr, false);
                    if (h.is_object() && h["ingest"].value("connected", false)) return true;
                }
                return false;
            },
            15s));
        TestClient publisher = TestClient::connect(gateway.uri(), "rt-pub");
        t0 = publish_history(publisher);
        REQUIRE(eventually([&] { return results(collector).size() >= 2; }, 20s));
        std::this_thread::sleep_for(500ms);  // the PUBACKs of what was sent
        auto stopped = service.stop();
        INFO((stopped ? std::string() : stopped.error().message));
        REQUIRE(stopped);
    }

    // Every acknowledged message is in the log, and the final checkpoint is at its end.
    {
        auto reader = logns::LogReader::open(firmware::log_dir(data_dir));
        REQUIRE(reader);
        logns::Record rec;
        size_t messages = 0;
        while (true) {
            auto next = (*reader)->next(rec);
            REQUIRE(next);
            if (!*next) break;
            if (rec.type == logns::RecordType::message) ++messages;
        }
        CHECK(messages == 250);
        lmdb::StoreOptions so;
        so.dir = firmware::state_dir(data_dir);
        so.read_only = true;
        so.map_size_bytes = uint64_t{64} << 20;
        auto store = lmdb::Store::open(so);
        REQUIRE(store);
        auto meta = (*store)->load_checkpoint();
        REQUIRE(meta);
        REQUIRE(meta->has_value());
        CHECK((*meta)->log_offset == (*reader)->position());
    }
    const auto first = results(collector);
    std::map<int64_t, int64_t> counts;
    for (const Result& r : first)
        counts[r.start_ms] = r.values["x"].get<int64_t>();
    CHECK(counts[t0] == 100);
    CHECK(counts[t0 + 10000] == 100);

    // A second run over the same directory: recovery starts at the final checkpoint, so the
    // results it sends are none of the first run's. Then a reload adds a pipeline, which
    // backfills over the retained log and sends its own windows; then a config that does not
    // parse is refused and the service goes on.
    {
        Running service(config_path);
        cfg["pipelines"].push_back(pipeline("sum_10s", "sum"));
        write_text(config_path, cfg.dump(2));
        service.reload();
        auto has_sum = [&] {
            size_t n = 0;
            for (const Result& r : results(collector))
                n += r.pipeline == "sum_10s";
            return n >= 2;
        };
        REQUIRE(eventually(has_sum, 30s));
        write_text(config_path, "{ not json");
        service.reload();
        std::this_thread::sleep_for(1500ms);
        CHECK(!service.done());  // a refused reload does not stop the service
        auto stopped = service.stop();
        INFO((stopped ? std::string() : stopped.error().message));
        REQUIRE(stopped);
    }
    std::set<std::string> ids;
    std::map<int64_t, int64_t> sums;
    for (const Result& r : results(collector)) {
        CHECK(ids.insert(r.id).second);  // no result twice, across both runs and the reload
        if (r.pipeline == "sum_10s") sums[r.start_ms] = r.values["x"].get<int64_t>();
    }
    CHECK(sums[t0] == 99 * 100 / 2);                   // v = 0..99
    CHECK(sums[t0 + 10000] == (100 + 199) * 100 / 2);  // v = 100..199
}
