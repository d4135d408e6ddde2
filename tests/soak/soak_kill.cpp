// kill -9 soak with an independent checker (issue 14, DESIGN.md section 5): a gateway and an
// upstream mosquitto on loopback, a seeded publisher at a steady rate with late and out-of-order
// events, tidemark killed at random moments and at its named crash points (TIDEMARK_CRASH_AT)
// and started again, then every window recomputed from the acknowledged events (checker.h) and
// compared with what arrived upstream.
//
// Why the final revisions can be compared at all: both pipelines are tumbling windows of
// count/sum/min/max with an allowed lateness far above the events' largest lag, so whatever
// order the events arrive in and however often tidemark restarts, the highest revision of each
// window must be the aggregate over every event published into it.
//
// The last few kills land after the devices fell silent, while the all-idle advance closes the
// last windows.
//
// Limits: the seed fixes the kill schedule, the crash points and the events' lags and values,
// not the thread timing (publisher pace, when a kill lands): a failing run is reproduced by its
// seed and kill count, not byte for byte. A restart (down up to 0.7 s, then recovery and the
// broker's connect, which can take 2 s while mosquitto saves a large store) may exceed the
// idle timeout; what that makes late is far inside the allowed lateness, so it cannot change a
// final value. The gateway broker is never killed, so every acknowledged event is owed.
// Prints progress, then `soak.kills`, `soak.lost`, `soak.wrong`, `soak.duplicates_different_id`
// as the last lines; exit 1 when any of the last three is not 0, 2 when the rig failed.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/daemon.h"
#include "tests/soak/binary_path.h"
#include "tests/soak/checker.h"

std::string tidemark_soak_binary;

namespace tidemark::soak {
namespace {

using namespace std::chrono_literals;
using test::Broker;
using test::Daemon;
using test::TestClient;

const std::string node_id = "soak";
constexpr int zones = 3;
// Event lags (ingest minus event time) reach 30 s; allowed lateness is twice that, so nothing is
// too late, and the window delay (1 s) is below most lags of the late share: many corrections.
constexpr int64_t lag_max_ms = 30'000;
const std::vector<PipelineSpec> pipelines{
    {"by_device", 5'000, 0, KeyBy::device},
    {"by_zone", 3'000, 1'000, KeyBy::zone},
};

struct Options {
    int kills = 200;
    uint64_t seed = 0;
    std::string binary;
    int rate_per_s = 1000;
    int devices = 8;
    int publisher_threads = 4;
    double crash_point_share = 0.4;
    bool keep = false;
    bool broker_debug = false;  // the gateway broker logs every packet (kept with the data)
};

[[noreturn]] void usage(const std::string& why) {
    std::cerr << "soak-kill: " << why << "\n"
              << "usage: tidemark_soak_kill [--kills N] [--seed S] [--tidemark PATH] [--rate "
                 "MSG_PER_S] [--devices N] [--crash-share 0..1] [--keep] [--broker-debug]\n";
    std::exit(2);
}

Options parse_options(int argc, char** argv) {
    Options o;
    o.seed = static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count()) %
             1'000'000'000;
#ifdef TIDEMARK_SOAK_DEFAULT_BINARY
    o.binary = TIDEMARK_SOAK_DEFAULT_BINARY;
#endif
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) usage(a + " needs a value");
            return argv[++i];
        };
        try {
            if (a == "--kills") {
                o.kills = std::stoi(value());
            } else if (a == "--seed") {
                o.seed = std::stoull(value());
            } else if (a == "--tidemark") {
                o.binary = value();
            } else if (a == "--rate") {
                o.rate_per_s = std::stoi(value());
            } else if (a == "--devices") {
                o.devices = std::stoi(value());
            } else if (a == "--crash-share") {
                o.crash_point_share = std::stod(value());
            } else if (a == "--keep") {
                o.keep = true;
            } else if (a == "--broker-debug") {
                o.broker_debug = true;
            } else {
                usage("unknown argument " + a);
            }
        } catch (const std::logic_error&) {
            usage("bad value for " + a);
        }
    }
    if (o.kills < 0 || o.kills > 100'000) usage("--kills must be 0..100000");
    if (o.rate_per_s < 1 || o.rate_per_s > 20'000) usage("--rate must be 1..20000");
    if (o.devices < 1 || o.devices > 1000) usage("--devices must be 1..1000");
    if (o.crash_point_share < 0 || o.crash_point_share > 1) usage("--crash-share must be 0..1");
    if (o.binary.empty()) usage("--tidemark PATH is required");
    if (::access(o.binary.c_str(), X_OK) != 0) usage("not an executable: " + o.binary);
    o.publisher_threads = std::min(o.publisher_threads, o.devices);
    return o;
}

std::string device_name(int d) {
    return "dev-" + std::to_string(d);
}

/// Operation: `threads` threads share the devices round-robin and publish
/// {"ts","seq","zone","v"} to sensors/DEVICE/telemetry at QoS1, together `rate_per_s` messages
/// a second; an event is remembered once the broker acknowledged it. Event times lag the wall
/// clock: 90 % by 0-0.8 s, 8 % by 1-6 s, 2 % by 6-30 s (late and out of order).
/// Limits: a thread that falls more than 200 ms behind its pace skips ahead rather than
/// bursting; a publish without acknowledgement (10 s) is kept apart as uncertain.
class Publisher {
  public:
    Publisher(std::string uri, int devices, int threads, int rate_per_s, uint64_t seed)
        : uri_(std::move(uri)),
          devices_(devices),
          threads_(threads),
          period_(std::chrono::nanoseconds(1'000'000'000LL * threads / rate_per_s)),
          seed_(seed) {}
    ~Publisher() { stop(); }

    void start() {
        for (int t = 0; t < threads_; ++t)
            workers_.emplace_back([this, t] { run(t); });
    }
    void stop() {
        stopping_ = true;
        for (auto& w : workers_)
            w.join();
        workers_.clear();
    }
    int64_t acknowledged() const { return acknowledged_; }
    std::vector<PublishedEvent> events() const {
        std::lock_guard lock(mutex_);
        return events_;
    }
    std::vector<PublishedEvent> uncertain() const {
        std::lock_guard lock(mutex_);
        return uncertain_;
    }
    std::vector<std::string> errors() const {
        std::lock_guard lock(mutex_);
        return errors_;
    }

  private:
    void run(int thread) {
        try {
            std::mt19937_64 random(seed_ * 1000 + static_cast<uint64_t>(thread));
            std::uniform_real_distribution<double> share(0, 1);
            std::uniform_int_distribution<int64_t> small_lag(0, 800), mid_lag(1'000, 6'000),
                big_lag(6'000, lag_max_ms), value(-1000, 1000);
            std::uniform_int_distribution<int> zone(0, zones - 1);
            std::vector<int> mine;
            for (int d = thread; d < devices_; d += threads_)
                mine.push_back(d);
            auto client = std::make_unique<TestClient>(TestClient::connect(uri_));
            std::vector<PublishedEvent> acked;
            int64_t seq = 0;
            auto next = std::chrono::steady_clock::now();
            while (!stopping_) {
                const int d = mine[static_cast<std::size_t>(seq) % mine.size()];
                const double s = share(random);
                const int64_t lag = s < 0.90   ? small_lag(random)
                                    : s < 0.98 ? mid_lag(random)
                                               : big_lag(random);
                PublishedEvent e{device_name(d), "z" + std::to_string(zone(random)),
                                 test::now_ms() - lag, value(random)};
                const std::string payload = "{\"ts\":" + std::to_string(e.ts_ms) +
                                            ",\"seq\":" + std::to_string(seq) + ",\"zone\":\"" +
                                            e.zone + "\",\"v\":" + std::to_string(e.v) + "}";
                try {
                    client->publish("sensors/" + e.device + "/telemetry", payload, 1);
                    acked.push_back(std::move(e));
                    ++acknowledged_;
                } catch (const std::exception& ex) {
                    std::lock_guard lock(mutex_);
                    uncertain_.push_back(std::move(e));
                    errors_.push_back(ex.what());
                    client.reset();
                    client = std::make_unique<TestClient>(TestClient::connect(uri_));
                }
                ++seq;
                next += period_;
                const auto now = std::chrono::steady_clock::now();
                if (now > next + 200ms) next = now;
                std::this_thread::sleep_until(next);
            }
            std::lock_guard lock(mutex_);
            events_.insert(events_.end(), acked.begin(), acked.end());
        } catch (const std::exception& ex) {
            std::lock_guard lock(mutex_);
            errors_.push_back(std::string("publisher thread stopped: ") + ex.what());
        }
    }

    std::string uri_;
    int devices_;
    int threads_;
    std::chrono::nanoseconds period_;
    uint64_t seed_;
    std::atomic<bool> stopping_{false};
    std::atomic<int64_t> acknowledged_{0};
    std::vector<std::thread> workers_;
    mutable std::mutex mutex_;
    std::vector<PublishedEvent> events_;
    std::vector<PublishedEvent> uncertain_;
    std::vector<std::string> errors_;
};

nlohmann::json pipeline_config(const PipelineSpec& p) {
    nlohmann::json c = {
        {"name", p.name},
        {"topic", "sensors/+/telemetry"},
        {"key", p.key_by == KeyBy::device ? "topic:1" : "/zone"},
        {"timestamp", {{"pointer", "/ts"}, {"format", "epoch_ms"}}},
        {"fields", {{"v", "/v"}}},
        {"window",
         {{"type", "tumbling"},
          {"size", std::to_string(p.size_ms) + "ms"},
          {"offset", std::to_string(p.offset_ms) + "ms"}}},
        // idle_timeout above the longest downtime plus restart, so that only the end of the
        // soak is the devices' silence; it closes the last windows (closed_by idle).
        {"watermark",
         {{"delay", "1s"}, {"idle_timeout", "4s"}, {"max_future", "1m"}, {"scope", "global"}}},
        {"late",
         {{"allowed_lateness", std::to_string(2 * lag_max_ms) + "ms"},
          {"too_late", "side_output"},
          {"corrections", p.key_by == KeyBy::device ? "upsert" : "retract"}}},
        {"aggregates",
         {{"n", {{"fn", "count"}}},
          {"s", {{"fn", "sum"}, {"field", "v"}}},
          {"lo", {{"fn", "min"}, {"field", "v"}}},
          {"hi", {{"fn", "max"}, {"field", "v"}}}}},
        {"limits", {{"max_keys", 100}, {"max_open_windows", 20000}}},
    };
    return c;
}

struct CrashPoint {
    const char* name;
    int count_max;  // hits per run: a few checkpoints, many appends
};
// Names from core/crash_point.h; the counts reach into a run of 1-6 s.
const CrashPoint crash_points[] = {
    {"after_log_append", 4000},  {"mid_checkpoint", 4},       {"after_checkpoint_commit", 4},
    {"after_outbox_append", 15}, {"after_outbox_delete", 80},
};

std::vector<UpstreamMessage> upstream_messages(const TestClient& collector) {
    std::vector<UpstreamMessage> out;
    for (const auto& m : collector.messages())
        out.push_back(UpstreamMessage{m.topic, m.payload});
    return out;
}

std::string tail(const std::string& text, std::size_t bytes) {
    return text.size() <= bytes ? text : text.substr(text.size() - bytes);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int run(const Options& o) {
    const auto t0 = std::chrono::steady_clock::now();
    std::printf("soak-kill: seed %llu, %d kills, %d msg/s over %d devices, tidemark %s\n",
                static_cast<unsigned long long>(o.seed), o.kills, o.rate_per_s, o.devices,
                o.binary.c_str());
    std::fflush(stdout);

    Broker::Options gateway_options;
    gateway_options.persistence = true;  // tidemark's session keeps what arrives while it is down
    gateway_options.max_inflight = 100;
    if (o.broker_debug) gateway_options.extra_conf = "log_type all\nlog_timestamp_format %H:%M:%S";
    Broker gateway = Broker::start(gateway_options);
    Broker upstream = Broker::start(Broker::Options{});
    const std::string dir = test::temp_dir("tidemark-soak");

    // Connected before tidemark first starts, persistent, never disconnected: nothing upstream
    // is missed.
    TestClient collector = TestClient::connect(upstream.uri(), "soak-collector", false);
    collector.subscribe("tidemark/" + node_id + "/#", 1);
    TestClient health = TestClient::connect(gateway.uri());
    const std::string health_topic = "tidemark/" + node_id + "/health";
    health.subscribe(health_topic, 1);

    nlohmann::json config =
        test::base_config(node_id, dir + "/data", gateway.uri(), upstream.uri());
    config["source"]["clock"] = "always";  // the all-idle advance closes the last windows
    config["pipelines"] = nlohmann::json::array();
    for (const auto& p : pipelines)
        config["pipelines"].push_back(pipeline_config(p));
    const std::string config_path = test::write_config(dir, "tidemark.json", config);
    const auto check_config = test::run_tidemark({"check-config", config_path});
    if (check_config.exit_code != 0) {
        std::printf("soak-kill: the config is refused:\n%s%s\n", check_config.out.c_str(),
                    check_config.err.c_str());
        return 2;
    }
    Daemon daemon(config_path, dir + "/tidemark.log");
    const std::string wrapper = dir + "/tidemark-crash-at";

    std::mt19937_64 random(o.seed);
    std::uniform_real_distribution<double> share(0, 1);
    std::uniform_int_distribution<int> long_run_ms(1'000, 4'000), short_run_ms(150, 1'000),
        longer_run_ms(4'000, 6'000), down_ms(0, 700);
    std::uniform_int_distribution<std::size_t> point_index(0, std::size(crash_points) - 1);

    // The broker keeps messages only for a session that subscribed: the first start must have
    // subscribed before the first event, or the broker drops it and the checker counts it lost.
    daemon.start();
    test::wait_health(
        health, health_topic,
        [](const nlohmann::json& h) {
            return h.contains("ingest") && h["ingest"].value("connected", false);
        },
        15s, "ingest.connected");
    std::this_thread::sleep_for(500ms);  // health may say connected just before the SUBACK
    Publisher publisher(gateway.uri(), o.devices, o.publisher_threads, o.rate_per_s, o.seed);
    publisher.start();

    int kills = 0, crash_hits = 0, unexpected_exits = 0;
    std::map<std::string, int> hits_by_point;
    // The last few kills land after the devices fell silent: while partitions go idle and the
    // all-idle advance closes the last windows (closed_by idle), which restarts must not change.
    const int traffic_kills = o.kills - std::min(o.kills / 4, 3);
    std::vector<PublishedEvent> events, uncertain;
    auto stop_publisher = [&] {
        publisher.stop();
        events = publisher.events();
        uncertain = publisher.uncertain();
        std::printf("[%4.0fs] publisher stopped: %zu events acknowledged, %zu uncertain\n",
                    seconds_since(t0), events.size(), uncertain.size());
        for (const auto& e : publisher.errors())
            std::printf("soak-kill: publisher: %s\n", e.c_str());
    };
    for (int k = 0; k < o.kills; ++k) {
        if (k == traffic_kills) stop_publisher();
        const double pick = share(random);
        const int run_ms = pick < 0.7   ? long_run_ms(random)
                           : pick < 0.9 ? short_run_ms(random)
                                        : longer_run_ms(random);
        std::string crash_at;
        if (share(random) < o.crash_point_share && k > 0) {
            const CrashPoint& point = crash_points[point_index(random)];
            // In silence only ticks (one a second) and the last windows reach the points.
            std::uniform_int_distribution<int> count(1, k < traffic_kills ? point.count_max : 3);
            crash_at = std::string(point.name) + ":" + std::to_string(count(random));
        }
        const int down = down_ms(random);
        // TIDEMARK_CRASH_AT reaches only the child, through a wrapper script: setenv here would
        // race with the Paho threads' getenv.
        if (crash_at.empty()) {
            tidemark_soak_binary = o.binary;
        } else {
            test::write_file(wrapper, "#!/bin/sh\nTIDEMARK_CRASH_AT=" + crash_at + " exec '" +
                                          o.binary + "' \"$@\"\n");
            std::filesystem::permissions(wrapper, std::filesystem::perms::owner_all);
            tidemark_soak_binary = wrapper;
        }
        if (k > 0) daemon.start();  // the first run is the one started above
        std::string how = "kill -9 after " + std::to_string(run_ms) + " ms";
        const auto started = std::chrono::steady_clock::now();
        // A crash-point run waits up to 6 s for the point; a missed one ends with kill -9.
        const auto deadline = started + (crash_at.empty() ? std::chrono::milliseconds(run_ms)
                                                          : std::chrono::milliseconds(6'000));
        bool exited = false;
        while (std::chrono::steady_clock::now() < deadline) {
            if (!daemon.running()) {
                exited = true;
                break;
            }
            std::this_thread::sleep_for(10ms);
        }
        if (exited) {
            const int status = daemon.wait_exit(0ms);
            const auto after_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                      std::chrono::steady_clock::now() - started)
                                      .count();
            if (!crash_at.empty() && status == 137) {
                ++crash_hits;
                ++hits_by_point[crash_at.substr(0, crash_at.find(':'))];
                how = "crash point " + crash_at + " hit after " + std::to_string(after_ms) + " ms";
            } else {
                ++unexpected_exits;
                how = "EXITED BY ITSELF with status " + std::to_string(status) + " after " +
                      std::to_string(after_ms) + " ms";
                std::printf("soak-kill: tidemark exited by itself; log tail:\n%s\n",
                            tail(daemon.log(), 3000).c_str());
            }
        } else {
            daemon.kill9();
            if (!crash_at.empty()) {
                how = "crash point " + crash_at + " not reached in 6 s: kill -9";
            }
        }
        ++kills;
        std::printf("[%4.0fs] kill %d/%d: %s; published %lld, upstream %zu\n", seconds_since(t0),
                    kills, o.kills, how.c_str(), static_cast<long long>(publisher.acknowledged()),
                    collector.messages().size());
        std::fflush(stdout);
        std::this_thread::sleep_for(std::chrono::milliseconds(down));
    }
    tidemark_soak_binary = o.binary;

    // The end: a last undisturbed run until the watermark has followed ingest time past every
    // window.
    daemon.start();
    if (traffic_kills == o.kills) {
        std::this_thread::sleep_for(3s);
        stop_publisher();
    }

    const auto silence = std::chrono::steady_clock::now();
    constexpr auto final_timeout = 300s;
    constexpr auto quiet_enough = 30s;
    std::size_t last_count = 0;
    auto last_change = std::chrono::steady_clock::now();
    Verdict verdict;
    while (true) {
        std::this_thread::sleep_for(2s);
        const auto messages = upstream_messages(collector);
        if (messages.size() != last_count) {
            last_count = messages.size();
            last_change = std::chrono::steady_clock::now();
        }
        verdict = check(pipelines, events, uncertain, messages);
        std::printf(
            "[%4.0fs] waiting for the last windows: upstream %zu, windows %lld of %lld, "
            "lost %lld, wrong %lld\n",
            seconds_since(t0), messages.size(), static_cast<long long>(verdict.windows_received),
            static_cast<long long>(verdict.windows_expected), static_cast<long long>(verdict.lost),
            static_cast<long long>(verdict.wrong));
        std::fflush(stdout);
        const auto now = std::chrono::steady_clock::now();
        if (verdict.lost == 0 && verdict.wrong == 0 && now - last_change >= 4s) break;
        if (now - last_change >= quiet_enough || now - silence >= final_timeout) break;
    }
    if (!daemon.running()) {
        ++unexpected_exits;
        std::printf("soak-kill: tidemark exited during the final run; log tail:\n%s\n",
                    tail(daemon.log(), 3000).c_str());
    }

    const auto records = test::health_records(health, health_topic);
    if (!records.empty()) {
        const auto& h = records.back();
        for (const auto& p : pipelines) {
            const auto& ph = h["pipelines"][p.name];
            std::printf("health %s: events_in %s, late_updated %s, too_late %s, emitted %s\n",
                        p.name.c_str(), ph.value("events_in", nlohmann::json()).dump().c_str(),
                        ph.value("late_updated", nlohmann::json()).dump().c_str(),
                        ph.value("too_late", nlohmann::json()).dump().c_str(),
                        ph.value("emitted", nlohmann::json()).dump().c_str());
        }
        std::printf("health outbox: %s, ingest: %s\n",
                    h.value("outbox", nlohmann::json()).dump().c_str(),
                    h.value("ingest", nlohmann::json()).dump().c_str());
    }
    int exit_code = -1;
    try {
        exit_code = daemon.terminate();
    } catch (const std::exception& e) {
        std::printf("soak-kill: %s\n", e.what());
    }

    for (const auto& text : verdict.examples)
        std::printf("soak-kill: %s\n", text.c_str());
    const bool failed =
        verdict.lost > 0 || verdict.wrong > 0 || verdict.duplicates_different_id > 0;
    if (failed || o.keep) {
        test::write_file(dir + "/gateway-mosquitto.log", gateway.log());
        // What the checker compared, for a look afterwards: one event, one message a line.
        std::ostringstream published_text, upstream_text;
        for (const auto& e : events)
            published_text << e.device << ' ' << e.zone << ' ' << e.ts_ms << ' ' << e.v << '\n';
        for (const auto& m : upstream_messages(collector))
            upstream_text << m.topic << ' ' << m.payload << '\n';
        test::write_file(dir + "/published.txt", published_text.str());
        test::write_file(dir + "/upstream.txt", upstream_text.str());
        std::printf(
            "soak-kill: kept %s (config, data, tidemark.log, gateway-mosquitto.log, published.txt, "
            "upstream.txt)\n",
            dir.c_str());
    } else {
        std::error_code ignored;
        std::filesystem::remove_all(dir, ignored);
    }
    std::printf("soak.seed: %llu\n", static_cast<unsigned long long>(o.seed));
    std::printf("soak.wall_s: %.0f\n", seconds_since(t0));
    std::printf("soak.events: %lld\n", static_cast<long long>(verdict.events));
    std::printf("soak.events_uncertain: %zu\n", uncertain.size());
    std::printf("soak.windows: %lld\n", static_cast<long long>(verdict.windows_expected));
    std::printf("soak.windows_uncertain: %lld\n",
                static_cast<long long>(verdict.windows_uncertain));
    std::printf("soak.results: %lld\n", static_cast<long long>(verdict.results));
    std::printf("soak.results_unique: %lld\n", static_cast<long long>(verdict.results_unique));
    std::printf("soak.side_records: %lld\n", static_cast<long long>(verdict.side_records));
    std::printf("soak.crash_point_hits: %d", crash_hits);
    for (const auto& [name, n] : hits_by_point)
        std::printf(" %s=%d", name.c_str(), n);
    std::printf("\n");
    std::printf("soak.unexpected_exits: %d\n", unexpected_exits);
    std::printf("soak.sigterm_exit: %d\n", exit_code);
    std::printf("soak.kills: %d\n", kills);
    std::printf("soak.lost: %lld\n", static_cast<long long>(verdict.lost));
    std::printf("soak.wrong: %lld\n", static_cast<long long>(verdict.wrong));
    std::printf("soak.duplicates_different_id: %lld\n",
                static_cast<long long>(verdict.duplicates_different_id));
    std::fflush(stdout);
    return failed ? 1 : 0;
}

}  // namespace
}  // namespace tidemark::soak

int main(int argc, char** argv) {
    const auto options = tidemark::soak::parse_options(argc, argv);
    tidemark_soak_binary = options.binary;
    try {
        return tidemark::soak::run(options);
    } catch (const std::exception& e) {
        std::printf("soak-kill: the rig failed: %s\n", e.what());
        return 2;
    }
}
