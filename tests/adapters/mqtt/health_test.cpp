// The health publisher against a real mosquitto: retained snapshots, online, offline and will.
#include "adapters/mqtt/health.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "firmware/clock.h"
#include "tests/support/broker.h"
#include "tests/support/broker_options.h"

using namespace std::chrono_literals;
using tidemark::mqtt::HealthOptions;
using tidemark::mqtt::HealthPublisher;
using tidemark::test::Broker;
using tidemark::test::ReceivedMessage;
using tidemark::test::TestClient;

extern char** environ;

namespace {

constexpr const char* child_uri_env = "TIDEMARK_HEALTH_CHILD_URI";

HealthOptions options_for(const std::string& uri, const std::string& client_id,
                          int64_t interval_ms) {
    static const tidemark::firmware::SystemClock host_clock;
    HealthOptions options;
    options.clock = &host_clock;
    tidemark::test::set_address(options.broker, uri);
    options.broker.client_id = client_id;
    options.broker.keep_alive_s = 5;
    options.broker.connect_timeout_s = 2;
    options.broker.config_name = "health";
    options.topic = "tidemark/gw-01/health";
    options.interval_ms = interval_ms;
    return options;
}

template <typename Predicate>
bool eventually(Predicate predicate, std::chrono::milliseconds timeout = 10s) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!predicate()) {
        if (std::chrono::steady_clock::now() > deadline) return false;
        std::this_thread::sleep_for(5ms);
    }
    return true;
}

// The latest message on `topic` that a fresh subscriber gets: the retained one.
ReceivedMessage retained_on(const Broker& broker, const std::string& topic) {
    TestClient late = TestClient::connect(broker.uri(), "late-reader");
    late.subscribe(topic, 1);
    const auto got = late.wait_for(1, 3s);
    REQUIRE(got.size() == 1);
    return got[0];
}

}  // namespace

TEST_CASE("status topic sits next to the health topic", "[health]") {
    CHECK(tidemark::mqtt::status_topic_for("tidemark/gw-01/health") == "tidemark/gw-01/status");
    CHECK(tidemark::mqtt::status_topic_for("health") == "health/status");
    CHECK(tidemark::mqtt::status_topic_for("a/status") == "a/status/status");
}

TEST_CASE("online on connect, a retained snapshot every interval, offline on clean stop",
          "[health][slow]") {
    Broker broker = Broker::start();
    TestClient watcher = TestClient::connect(broker.uri(), "watcher");
    watcher.subscribe("tidemark/gw-01/#", 1);

    std::atomic<int> calls{0};
    auto publisher = HealthPublisher::create(options_for(broker.uri(), "gw-01-health", 200), [&] {
        return R"({"snapshot":)" + std::to_string(calls++) + "}";
    });
    REQUIRE(publisher);
    const auto started = std::chrono::steady_clock::now();
    REQUIRE((*publisher)->start());
    CHECK(std::chrono::steady_clock::now() - started < 100ms);  // start() does not wait
    REQUIRE(eventually([&] { return calls.load() >= 5; }, 5s));
    const auto elapsed = std::chrono::steady_clock::now() - started;
    CHECK(elapsed >= 700ms);  // one now, then one per 200 ms interval: not faster
    (*publisher)->stop(2s);

    const auto seen = watcher.wait_for(7, 3s);
    REQUIRE(!seen.empty());
    CHECK(seen.front().topic == "tidemark/gw-01/status");
    CHECK(seen.front().payload == "online");
    CHECK(seen.back().topic == "tidemark/gw-01/status");
    CHECK(seen.back().payload == "offline");
    int snapshots = 0;
    for (const auto& m : seen) {
        if (m.topic == "tidemark/gw-01/health") {
            CHECK(m.payload == R"({"snapshot":)" + std::to_string(snapshots) + "}");
            ++snapshots;
        }
    }
    CHECK(snapshots >= 5);
    CHECK((*publisher)->stats().published >= 5);

    // Retained: a reader that comes later gets the last snapshot and the last status.
    const auto health = retained_on(broker, "tidemark/gw-01/health");
    CHECK(health.retained);
    CHECK(health.payload == R"({"snapshot":)" + std::to_string(snapshots - 1) + "}");
    CHECK(retained_on(broker, "tidemark/gw-01/status").payload == "offline");
}

TEST_CASE("a broker that is down costs skipped intervals, never a blocked caller",
          "[health][slow]") {
    Broker broker = Broker::start();
    const std::string uri = broker.uri();
    broker.stop();
    std::atomic<int> calls{0};
    auto publisher = HealthPublisher::create(options_for(uri, "gw-01-health", 100), [&] {
        ++calls;
        return std::string("{}");
    });
    REQUIRE(publisher);
    REQUIRE((*publisher)->start());
    REQUIRE(eventually([&] { return (*publisher)->stats().skipped >= 2; }, 5s));
    CHECK(calls.load() == 0);  // nothing is taken, so nothing queues up
    CHECK_FALSE((*publisher)->stats().last_error.empty());

    broker.restart();  // and it comes back on its own
    REQUIRE(eventually([&] { return calls.load() >= 1; }, 10s));
    CHECK(retained_on(broker, "tidemark/gw-01/status").payload == "online");
    const auto stop_started = std::chrono::steady_clock::now();
    (*publisher)->stop(1s);
    CHECK(std::chrono::steady_clock::now() - stop_started < 2s);
}

// Run by the test below in a child process: connect, publish, then die without a word.
TEST_CASE("health child process", "[.health_child]") {
    const char* uri = std::getenv(child_uri_env);
    if (uri == nullptr) return;
    auto publisher = HealthPublisher::create(options_for(uri, "gw-01-health-child", 100),
                                             [] { return std::string("{}"); });
    REQUIRE(publisher);
    REQUIRE((*publisher)->start());
    REQUIRE(eventually([&] { return (*publisher)->stats().published >= 1; }, 5s));
    ::raise(SIGKILL);
}

TEST_CASE("offline is published as the last will when the process is killed", "[health][slow]") {
    Broker broker = Broker::start();
    TestClient watcher = TestClient::connect(broker.uri(), "watcher");
    watcher.subscribe("tidemark/gw-01/status", 1);

    const std::string env_entry = std::string(child_uri_env) + "=" + broker.uri();
    std::vector<char*> env;
    for (char** e = environ; *e != nullptr; ++e)
        env.push_back(*e);
    env.push_back(const_cast<char*>(env_entry.c_str()));
    env.push_back(nullptr);
    const char* argv[] = {"health_test", "health child process", nullptr};
    pid_t child = -1;
    REQUIRE(::posix_spawn(&child, "/proc/self/exe", nullptr, nullptr, const_cast<char**>(argv),
                          env.data()) == 0);
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    REQUIRE(WIFSIGNALED(status));
    REQUIRE(WTERMSIG(status) == SIGKILL);

    const auto seen = watcher.wait_for(2, 10s);
    REQUIRE(seen.size() == 2);
    CHECK(seen[0].payload == "online");
    CHECK(seen[1].payload == "offline");
    CHECK(retained_on(broker, "tidemark/gw-01/status").payload == "offline");
}
