// Ingest against a real mosquitto: what reaches the handler, and what the broker redelivers.
#include "adapters/mqtt/ingest.h"

#include <sys/wait.h>
#include <unistd.h>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/broker.h"

using namespace std::chrono_literals;
using tidemark::mqtt::BrokerOptions;
using tidemark::mqtt::HandleResult;
using tidemark::mqtt::IncomingMessage;
using tidemark::mqtt::Ingest;
using tidemark::test::Broker;
using tidemark::test::TestClient;

namespace {

struct Seen {
    std::string topic;
    std::string payload;
    bool duplicate;
    int qos;
};

// Collects what the handler was given; thread-safe.
struct Collector {
    std::mutex mutex;
    std::vector<Seen> seen;

    tidemark::mqtt::Handler handler() {
        return [this](const IncomingMessage& m) {
            std::lock_guard lock(mutex);
            seen.push_back({std::string(m.topic), std::string(m.payload), m.duplicate, m.qos});
            return HandleResult::accepted;
        };
    }
    std::vector<Seen> wait_for(std::size_t n, std::chrono::milliseconds timeout = 10s) {
        const auto deadline = std::chrono::steady_clock::now() + timeout;
        while (std::chrono::steady_clock::now() < deadline) {
            {
                std::lock_guard lock(mutex);
                if (seen.size() >= n) return seen;
            }
            std::this_thread::sleep_for(5ms);
        }
        std::lock_guard lock(mutex);
        return seen;
    }
};

BrokerOptions options_for(const Broker& broker, std::string client_id) {
    BrokerOptions o;
    o.uri = broker.uri();
    o.client_id = std::move(client_id);
    o.config_name = "source";
    return o;
}

template <typename Predicate>
bool eventually(Predicate p, std::chrono::milliseconds timeout = 10s) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!p()) {
        if (std::chrono::steady_clock::now() >= deadline) return false;
        std::this_thread::sleep_for(5ms);
    }
    return true;
}

}  // namespace

TEST_CASE("the broker fixture starts, stops and restarts on the same port", "[broker]") {
    Broker broker = Broker::start();
    const int port = broker.port();
    CHECK(broker.uri() == "tcp://127.0.0.1:" + std::to_string(port));
    { TestClient::connect(broker.uri()).publish("a/b", "x"); }
    broker.stop();
    CHECK_FALSE(broker.running());
    CHECK_THROWS(TestClient::connect(broker.uri()));
    broker.restart();
    CHECK(broker.port() == port);
    TestClient client = TestClient::connect(broker.uri());
    client.subscribe("a/#");
    client.publish("a/c", "y");
    const auto got = client.wait_for(1, 5s);
    REQUIRE(got.size() == 1);
    CHECK(got[0].payload == "y");
}

TEST_CASE("QoS1 messages reach the handler with topic, payload and QoS", "[ingest]") {
    Broker broker = Broker::start();
    Collector collector;
    auto ingest = Ingest::create(options_for(broker, "ingest-basic"),
                                 {"sensors/+/telemetry", "other/#"}, collector.handler());
    REQUIRE(ingest.has_value());
    REQUIRE((*ingest)->start(5s).has_value());
    CHECK((*ingest)->connected());

    TestClient publisher = TestClient::connect(broker.uri());
    publisher.publish("sensors/dev-1/telemetry", R"({"ts":1,"temp":20.5})");
    publisher.publish("other/x", "raw bytes \x01\x02");
    publisher.publish("ignored/topic", "not subscribed");
    const auto seen = collector.wait_for(2);
    REQUIRE(seen.size() == 2);
    CHECK(seen[0].topic == "sensors/dev-1/telemetry");
    CHECK(seen[0].payload == R"({"ts":1,"temp":20.5})");
    CHECK(seen[0].qos == 1);
    CHECK_FALSE(seen[0].duplicate);
    CHECK(seen[1].topic == "other/x");
    CHECK(seen[1].payload == "raw bytes \x01\x02");
    std::this_thread::sleep_for(200ms);
    CHECK(collector.wait_for(3, 0ms).size() == 2);
    const auto stats = (*ingest)->stats();
    CHECK(stats.messages == 2);
    CHECK(stats.bytes == seen[0].payload.size() + seen[1].payload.size());
    (*ingest)->stop(5s);
    CHECK_FALSE((*ingest)->connected());
}

TEST_CASE("retry_later holds the message: the handler is called again, nothing is lost",
          "[ingest]") {
    Broker broker = Broker::start();
    std::atomic<int> refusals_left{5};
    Collector collector;
    auto accept = collector.handler();
    auto ingest =
        Ingest::create(options_for(broker, "ingest-retry"), {"t/#"}, [&](const IncomingMessage& m) {
            if (refusals_left.fetch_sub(1) > 0) {
                return HandleResult::retry_later;
            }
            return accept(m);
        });
    REQUIRE(ingest.has_value());
    REQUIRE((*ingest)->start(5s).has_value());
    TestClient publisher = TestClient::connect(broker.uri());
    publisher.publish("t/1", "first");
    publisher.publish("t/2", "second");
    const auto seen = collector.wait_for(2);
    REQUIRE(seen.size() == 2);
    CHECK(seen[0].payload == "first");  // order kept: the second waited behind the first
    CHECK(seen[1].payload == "second");
    CHECK((*ingest)->stats().handler_retries == 5);
    CHECK((*ingest)->stats().messages == 2);
}

TEST_CASE(
    "a message the handler did not take is not acknowledged: after a crash it comes "
    "back with DUP",
    "[ingest]") {
    Broker broker = Broker::start();
    // A process whose log is full receives a message, holds it, and is killed.
    int pipe_fds[2];
    REQUIRE(::pipe(pipe_fds) == 0);
    const std::string uri = broker.uri();
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        ::dup2(pipe_fds[1], STDOUT_FILENO);
        ::close(pipe_fds[0]);
        ::execl(INGEST_REFUSER_PATH, INGEST_REFUSER_PATH, uri.c_str(), "ingest-dup", "sensors/#",
                static_cast<char*>(nullptr));
        ::_exit(127);
    }
    ::close(pipe_fds[1]);
    struct KillOnExit {
        pid_t pid;
        ~KillOnExit() {
            ::kill(pid, SIGKILL);
            ::waitpid(pid, nullptr, 0);
        }
    } kill_on_exit{child};
    FILE* from_child = ::fdopen(pipe_fds[0], "r");
    // The child's log lines go to the same pipe: read up to the line the test waits for.
    const auto read_until = [from_child](const std::string& wanted) {
        char line[512] = {};
        while (std::fgets(line, sizeof line, from_child) != nullptr) {
            if (std::string(line) == wanted + "\n") return true;
        }
        return false;
    };
    REQUIRE(read_until("ready"));
    TestClient publisher = TestClient::connect(uri);
    publisher.publish("sensors/dev-1/telemetry", "reading-1");
    REQUIRE(read_until("held"));
    std::this_thread::sleep_for(100ms);  // give a PUBACK, if one were sent, time to arrive
    ::kill(child, SIGKILL);
    std::fclose(from_child);

    // Same client id again: the broker resumes the session and redelivers, flagged DUP.
    Collector collector;
    auto accepting =
        Ingest::create(options_for(broker, "ingest-dup"), {"sensors/#"}, collector.handler());
    REQUIRE(accepting.has_value());
    REQUIRE((*accepting)->start(5s).has_value());
    const auto seen = collector.wait_for(1);
    REQUIRE(seen.size() == 1);
    CHECK(seen[0].payload == "reading-1");
    CHECK(seen[0].duplicate);
    CHECK((*accepting)->stats().duplicates == 1);
}

TEST_CASE(
    "persistent session: messages published while ingest is away arrive after it "
    "reconnects",
    "[ingest]") {
    Broker broker = Broker::start();
    {
        Collector first;
        auto ingest = Ingest::create(options_for(broker, "ingest-session"), {"sensors/+/telemetry"},
                                     first.handler());
        REQUIRE(ingest.has_value());
        REQUIRE((*ingest)->start(5s).has_value());
        (*ingest)->stop(5s);
    }
    TestClient publisher = TestClient::connect(broker.uri());
    for (int i = 0; i < 5; ++i) {
        publisher.publish("sensors/dev-" + std::to_string(i) + "/telemetry", std::to_string(i));
    }
    Collector collector;
    auto ingest = Ingest::create(options_for(broker, "ingest-session"), {"sensors/+/telemetry"},
                                 collector.handler());
    REQUIRE(ingest.has_value());
    REQUIRE((*ingest)->start(5s).has_value());
    const auto seen = collector.wait_for(5);
    REQUIRE(seen.size() == 5);
    for (int i = 0; i < 5; ++i)
        CHECK(seen[static_cast<std::size_t>(i)].payload == std::to_string(i));
}

TEST_CASE("broker restart: ingest reconnects, keeps receiving, and queued messages survive",
          "[ingest]") {
    Broker::Options persistent;
    persistent.persistence = true;
    Broker broker = Broker::start(persistent);
    Collector collector;
    auto ingest =
        Ingest::create(options_for(broker, "ingest-restart"), {"sensors/#"}, collector.handler());
    REQUIRE(ingest.has_value());
    REQUIRE((*ingest)->start(5s).has_value());
    {
        TestClient publisher = TestClient::connect(broker.uri());
        publisher.publish("sensors/a", "before");
    }
    REQUIRE(collector.wait_for(1).size() == 1);

    broker.restart();
    REQUIRE(eventually([&] { return (*ingest)->connected(); }, 15s));
    CHECK((*ingest)->stats().reconnects >= 1);
    {
        TestClient publisher = TestClient::connect(broker.uri());
        publisher.publish("sensors/a", "after");
    }
    auto seen = collector.wait_for(2);
    REQUIRE(seen.size() == 2);
    CHECK(seen[1].payload == "after");

    // Queued for the persistent session while ingest is away, across a broker restart.
    (*ingest)->stop(5s);
    {
        TestClient publisher = TestClient::connect(broker.uri());
        publisher.publish("sensors/a", "queued-1");
        publisher.publish("sensors/a", "queued-2");
    }
    broker.restart();
    auto again =
        Ingest::create(options_for(broker, "ingest-restart"), {"sensors/#"}, collector.handler());
    REQUIRE(again.has_value());
    REQUIRE((*again)->start(5s).has_value());
    seen = collector.wait_for(4);
    REQUIRE(seen.size() == 4);
    CHECK(seen[2].payload == "queued-1");
    CHECK(seen[3].payload == "queued-2");
}

TEST_CASE("bad settings and refused connections are errors that say what to fix", "[ingest]") {
    Collector collector;
    BrokerOptions bad;
    bad.uri = "http://127.0.0.1:1883";
    bad.client_id = "x";
    bad.config_name = "source";
    auto created = Ingest::create(bad, {"t"}, collector.handler());
    REQUIRE_FALSE(created.has_value());
    CHECK_THAT(created.error().message, Catch::Contains("source.uri") && Catch::Contains("tcp://"));

    bad.uri = "ssl://127.0.0.1:8883";
    bad.ca_file = "/nonexistent/ca.pem";
    created = Ingest::create(bad, {"t"}, collector.handler());
    REQUIRE_FALSE(created.has_value());
    CHECK_THAT(created.error().message,
               Catch::Contains("ca_file") && Catch::Contains("/nonexistent/ca.pem"));

    // Nothing listens on a port of a broker that was stopped.
    Broker broker = Broker::start();
    broker.stop();
    auto ingest = Ingest::create(options_for(broker, "ingest-refused"), {"t"}, collector.handler());
    REQUIRE(ingest.has_value());
    const auto started = (*ingest)->start(3s);
    REQUIRE_FALSE(started.has_value());
    CHECK_THAT(started.error().message, Catch::Contains(broker.uri()));
    CHECK_FALSE((*ingest)->connected());
    CHECK((*ingest)->stats().connect_failures == 1);
}
