// A persistent session resumed behind a large backlog: mosquitto 2.0.11 sends it all at once,
// whatever max_inflight_messages says, before the SUBACK of a re-subscription.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "adapters/mqtt/ingest.h"
#include "tests/support/broker.h"
#include "tests/support/broker_options.h"

using namespace std::chrono_literals;
using tidemark::mqtt::BrokerOptions;
using tidemark::mqtt::HandleResult;
using tidemark::mqtt::IncomingMessage;
using tidemark::mqtt::Ingest;
using tidemark::test::Broker;
using tidemark::test::TempDir;
using tidemark::test::TestClient;

namespace {

const std::string topic = "sensors/dev-0/telemetry";

// Creates the persistent session and its subscription, then leaves.
void make_session(const Broker& broker, const std::string& client_id) {
    TestClient session = TestClient::connect(broker.uri(), client_id, false);
    session.subscribe("sensors/#", 1);
    session.disconnect();
}

void publish_backlog(const Broker& broker, int messages) {
    TestClient publisher = TestClient::connect(broker.uri());
    for (int i = 1; i <= messages; ++i)
        publisher.publish(topic, "{\"seq\":" + std::to_string(i) + "}");
}

// Runs ingest_crasher until it exits (killed itself) or, with kill_after 0, until the log
// holds `wanted` lines and nothing more came for a second.
void run_crasher(const Broker& broker, const std::string& log, long kill_after,
                 std::size_t wanted) {
    const std::string uri = broker.uri();
    const std::string kill = std::to_string(kill_after);
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        ::execl(INGEST_CRASHER_PATH, INGEST_CRASHER_PATH, uri.c_str(), "ingest-backlog",
                "sensors/#", log.c_str(), kill.c_str(), static_cast<char*>(nullptr));
        ::_exit(127);
    }
    const auto lines = [&log] {
        std::ifstream in(log);
        std::size_t n = 0;
        std::string line;
        while (std::getline(in, line))
            ++n;
        return n;
    };
    int status = 0;
    if (kill_after > 0) {
        REQUIRE(::waitpid(child, &status, 0) == child);
        CHECK((WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL));
        return;
    }
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    std::size_t last = 0;
    while (std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(1s);
        const std::size_t now = lines();
        if (now >= wanted && now == last) break;
        last = now;
    }
    ::kill(child, SIGKILL);
    ::waitpid(child, &status, 0);
}

}  // namespace

TEST_CASE("kill -9 behind a backlog: after the restart each message is in the log once",
          "[ingest][redelivery]") {
    Broker broker = Broker::start();
    TempDir dir;
    const std::string log = dir.path() + "/log";
    constexpr int messages = 20000;
    make_session(broker, "ingest-backlog");
    publish_backlog(broker, messages);
    // Thousands logged, few of their PUBACKs read by the broker: it resends them all (DUP).
    run_crasher(broker, log, 3000, 0);
    run_crasher(broker, log, 0, messages);
    std::map<std::string, int> copies;
    std::ifstream in(log);
    std::string line;
    while (std::getline(in, line))
        ++copies[line];
    CHECK(copies.size() == static_cast<std::size_t>(messages));
    std::size_t twice = 0;
    for (const auto& [payload, n] : copies)
        if (n != 1) ++twice;
    CHECK(twice == 0);
}

TEST_CASE(
    "a resumed session is connected at the CONNACK, however long the backlog before the "
    "SUBACK",
    "[ingest]") {
    Broker broker = Broker::start();
    constexpr int messages = 8000;
    make_session(broker, "ingest-suback");
    publish_backlog(broker, messages);
    std::mutex mutex;
    std::map<std::string, int> copies;
    std::uint64_t connection = 0;
    bool one_connection = true;
    BrokerOptions options;
    tidemark::test::set_address(options, broker.uri());
    options.client_id = "ingest-suback";
    options.config_name = "source";
    // A new Ingest subscribes again (the filters may have changed); the broker answers after
    // the backlog, which the handler takes at about 1 ms a message.
    auto ingest = Ingest::create(options, {"sensors/#"}, [&](const IncomingMessage& m) {
        std::this_thread::sleep_for(1ms);
        std::lock_guard lock(mutex);
        ++copies[std::string(m.payload)];
        if (connection != 0 && m.connection != connection) one_connection = false;
        connection = m.connection;
        return HandleResult::accepted;
    });
    REQUIRE(ingest.has_value());
    const auto started_at = std::chrono::steady_clock::now();
    auto started = (*ingest)->start(2s);
    INFO((started ? std::string() : started.error().message));
    REQUIRE(started.has_value());
    CHECK(std::chrono::steady_clock::now() - started_at < 3s);
    CHECK((*ingest)->connected());
    const std::uint64_t started_connection = (*ingest)->connection();
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    while (std::chrono::steady_clock::now() < deadline) {
        {
            std::lock_guard lock(mutex);
            if (copies.size() >= static_cast<std::size_t>(messages)) break;
        }
        std::this_thread::sleep_for(50ms);
    }
    std::this_thread::sleep_for(500ms);  // the SUBACK, then anything sent twice
    CHECK((*ingest)->connected());
    CHECK((*ingest)->connection() == started_connection);
    CHECK((*ingest)->stats().reconnects == 0);
    CHECK((*ingest)->stats().last_error.empty());
    // The re-subscription took effect: a live message still arrives.
    TestClient::connect(broker.uri()).publish(topic, "live");
    const auto live_deadline = std::chrono::steady_clock::now() + 10s;
    while (std::chrono::steady_clock::now() < live_deadline) {
        {
            std::lock_guard lock(mutex);
            if (copies.count("live") != 0) break;
        }
        std::this_thread::sleep_for(20ms);
    }
    (*ingest)->stop();
    std::lock_guard lock(mutex);
    CHECK(copies.size() == static_cast<std::size_t>(messages) + 1);
    CHECK(one_connection);
    CHECK(connection == started_connection);
}
