// Ingest against a real mosquitto: what reaches the handler, and what the broker redelivers.
#include "adapters/mqtt/ingest.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "adapters/mqtt/redelivery_filter.h"
#include "tests/support/broker.h"
#include "tests/support/broker_options.h"

using namespace std::chrono_literals;
using tidemark::mqtt::BrokerOptions;
using tidemark::mqtt::HandleResult;
using tidemark::mqtt::IncomingMessage;
using tidemark::mqtt::Ingest;
using tidemark::mqtt::IngestOptions;
using tidemark::mqtt::RedeliveryFilter;
using tidemark::test::Broker;
using tidemark::test::TestClient;

namespace {

struct Seen {
    std::string topic;
    std::string payload;
    bool duplicate;
    int qos;
    bool retained;
};

// Collects what the handler was given; thread-safe.
struct Collector {
    std::mutex mutex;
    std::vector<Seen> seen;

    tidemark::mqtt::Handler handler() {
        return [this](const IncomingMessage& m) {
            std::lock_guard lock(mutex);
            seen.push_back(
                {std::string(m.topic), std::string(m.payload), m.duplicate, m.qos, m.retained});
            return HandleResult::accepted;
        };
    }
    bool wait_for_payload(const std::string& payload, std::chrono::milliseconds timeout = 10s) {
        const auto deadline = std::chrono::steady_clock::now() + timeout;
        while (std::chrono::steady_clock::now() < deadline) {
            {
                std::lock_guard lock(mutex);
                for (const auto& m : seen)
                    if (m.payload == payload) return true;
            }
            std::this_thread::sleep_for(5ms);
        }
        return false;
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
    tidemark::test::set_address(o, broker.uri());
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

// Splits a byte stream into MQTT packets: fixed header byte, remaining length (1..4 bytes of 7
// bits), body.
class PacketSplitter {
  public:
    void feed(const char* data, std::size_t size) { buffer_.append(data, size); }
    // The next complete packet, or an empty string when more bytes are needed.
    std::string next() {
        std::size_t length = 0;
        std::size_t at = 1;
        for (int shift = 0;; shift += 7) {
            if (at >= buffer_.size()) return {};
            const auto byte = static_cast<unsigned char>(buffer_[at++]);
            length |= static_cast<std::size_t>(byte & 0x7f) << shift;
            if ((byte & 0x80) == 0) break;
            if (at > 4) throw std::runtime_error("bad MQTT remaining length");
        }
        if (buffer_.size() < at + length) return {};
        std::string packet = buffer_.substr(0, at + length);
        buffer_.erase(0, at + length);
        return packet;
    }

  private:
    std::string buffer_;
};

int packet_type(const std::string& packet) {
    return static_cast<unsigned char>(packet[0]) >> 4;
}
constexpr int mqtt_publish = 3;
constexpr int mqtt_puback = 4;

// A TCP relay on loopback between ingest and the broker, one connection at a time, that fails
// the way a link does, at a chosen packet: what ingest sends is lost (its PUBACKs) and only
// some of the broker's PUBLISH packets get through; then the connection is cut.
class Relay {
  public:
    explicit Relay(int broker_port) : broker_port_(broker_port) {
        listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in address = loopback(0);
        socklen_t size = sizeof address;
        if (listen_fd_ < 0 || ::bind(listen_fd_, address_of(address), size) != 0 ||
            ::listen(listen_fd_, 4) != 0 || ::getsockname(listen_fd_, address_of(address), &size))
            throw std::runtime_error("relay: cannot listen on 127.0.0.1");
        port_ = ntohs(address.sin_port);
        thread_ = std::thread([this] { run(); });
    }
    ~Relay() {
        stop_ = true;
        thread_.join();
        ::close(listen_fd_);
    }
    Relay(const Relay&) = delete;
    Relay& operator=(const Relay&) = delete;

    std::string uri() const { return "tcp://127.0.0.1:" + std::to_string(port_); }

    // Until this connection ends: everything ingest sends is lost, and of the broker's PUBLISH
    // packets only the next `publishes` reach ingest.
    void fail_after(int publishes) {
        publishes_left_ = publishes;
        lose_upstream_ = true;
    }
    // Closes the connection (both sides); the next one is relayed normally.
    void cut() {
        cut_ = true;
        while (cut_)
            std::this_thread::sleep_for(1ms);
    }
    int publishes_lost() const { return publishes_lost_; }
    // Every PUBLISH relayed to ingest on this connection was acknowledged to the broker: Paho
    // C may hold PUBACKs back for a while (MQTTProtocol_queueAck while a write is pending).
    bool settled() const { return publishes_relayed_ == acks_relayed_; }

  private:
    static sockaddr_in loopback(int port) {
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a.sin_port = htons(static_cast<std::uint16_t>(port));
        return a;
    }
    static sockaddr* address_of(sockaddr_in& a) { return reinterpret_cast<sockaddr*>(&a); }
    static bool send_all(int fd, const std::string& bytes) {
        std::size_t sent = 0;
        while (sent < bytes.size()) {
            const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
            if (n <= 0) return false;
            sent += static_cast<std::size_t>(n);
        }
        return true;
    }

    void close_connection() {
        if (client_ >= 0) ::close(client_);
        if (broker_ >= 0) ::close(broker_);
        client_ = broker_ = -1;
        lose_upstream_ = false;
        publishes_left_ = -1;
        publishes_relayed_ = 0;
        acks_relayed_ = 0;
    }

    // Relays what can be read from `from`; false when the connection is over.
    bool pump(int from, bool upstream) {
        char buffer[4096];
        const ssize_t n = ::read(from, buffer, sizeof buffer);
        if (n <= 0) return false;
        PacketSplitter& splitter = upstream ? up_ : down_;
        splitter.feed(buffer, static_cast<std::size_t>(n));
        for (std::string packet = splitter.next(); !packet.empty(); packet = splitter.next()) {
            if (upstream) {
                if (lose_upstream_) {
                    continue;
                }
                if (packet_type(packet) == mqtt_puback) ++acks_relayed_;
                if (!send_all(broker_, packet)) return false;
            } else {
                if (packet_type(packet) == mqtt_publish && publishes_left_ >= 0) {
                    if (publishes_left_ == 0) {
                        ++publishes_lost_;
                        continue;
                    }
                    --publishes_left_;
                }
                if (packet_type(packet) == mqtt_publish) ++publishes_relayed_;
                if (!send_all(client_, packet)) return false;
            }
        }
        return true;
    }

    void run() {
        while (!stop_) {
            if (cut_) {
                close_connection();
                cut_ = false;
            }
            if (client_ < 0) {
                pollfd listening{listen_fd_, POLLIN, 0};
                if (::poll(&listening, 1, 20) != 1) continue;
                client_ = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
                broker_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
                sockaddr_in address = loopback(broker_port_);
                if (client_ < 0 || broker_ < 0 ||
                    ::connect(broker_, address_of(address), sizeof address) != 0) {
                    close_connection();
                }
                up_ = {};
                down_ = {};
                continue;
            }
            pollfd fds[2] = {{client_, POLLIN, 0}, {broker_, POLLIN, 0}};
            if (::poll(fds, 2, 20) <= 0) continue;
            const bool still_open =
                ((fds[0].revents & (POLLIN | POLLHUP | POLLERR)) == 0 || pump(client_, true)) &&
                ((fds[1].revents & (POLLIN | POLLHUP | POLLERR)) == 0 || pump(broker_, false));
            if (!still_open) close_connection();
        }
        close_connection();
    }

    const int broker_port_;
    int listen_fd_ = -1;
    int port_ = 0;
    int client_ = -1;  // both owned by the relay thread
    int broker_ = -1;
    PacketSplitter up_, down_;
    std::atomic<bool> stop_{false}, cut_{false}, lose_upstream_{false};
    std::atomic<int> publishes_left_{-1};  // -1: no limit
    std::atomic<int> publishes_lost_{0};
    std::atomic<int> publishes_relayed_{0}, acks_relayed_{0};  // on this connection
    std::thread thread_;
};

// What the runtime does with each message: append it to the log unless it is a redelivery of
// a record already there. The "log" is a vector of payloads.
struct FilteredLog {
    std::mutex mutex;
    RedeliveryFilter filter;
    std::uint64_t connection = 0;
    std::vector<std::uint64_t> connections;
    std::vector<std::string> appended;
    int redeliveries_skipped = 0;
    int duplicates_appended = 0;  // flagged DUP, but never read before: new

    tidemark::mqtt::Handler handler() {
        return [this](const IncomingMessage& m) {
            std::lock_guard lock(mutex);
            if (m.connection != connection) {
                filter.connection_started();
                connection = m.connection;
                connections.push_back(m.connection);
            }
            if (m.duplicate && filter.is_redelivery(m.packet_id, m.topic, m.payload)) {
                ++redeliveries_skipped;
                return HandleResult::accepted;
            }
            appended.emplace_back(m.payload);
            if (m.duplicate) ++duplicates_appended;
            filter.remember(m.packet_id, m.topic, m.payload);
            return HandleResult::accepted;
        };
    }
    std::size_t size() {
        std::lock_guard lock(mutex);
        return appended.size();
    }
};

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

TEST_CASE("retry_later cuts the connection unacknowledged: the message comes back, in order",
          "[ingest]") {
    Broker broker = Broker::start();
    std::atomic<int> refusals_left{3};
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
    CHECK((*ingest)->stats().socket_known);  // Paho's trace named the socket
    TestClient publisher = TestClient::connect(broker.uri());
    publisher.publish("t/1", "first");
    publisher.publish("t/2", "second");
    // Each refusal costs a reconnect (250 ms, 500 ms, 1 s of backoff and Paho's own ~2 s).
    const auto seen = collector.wait_for(2, 30s);
    REQUIRE(seen.size() == 2);
    CHECK(seen[0].payload == "first");  // order kept: the second waited behind the first
    CHECK(seen[0].duplicate);           // redelivered: it was never acknowledged
    CHECK(seen[1].payload == "second");
    std::this_thread::sleep_for(300ms);  // a third delivery would show here
    CHECK(collector.wait_for(3, 0ms).size() == 2);
    CHECK((*ingest)->stats().handler_retries == 3);
    CHECK((*ingest)->stats().connections_cut == 3);
    CHECK((*ingest)->stats().messages == 2);
}

// Issue 25, finding 1: Paho C runs every callback of the process under one mutex. A handler
// that cannot take a message (a full disk) used to keep it in the callback, retrying: every
// other Paho call of the process (a second client's create, this one's stop) then waited for
// good. Now the callback cuts the connection and returns.
TEST_CASE("a handler that keeps refusing holds no Paho lock: create and stop still return",
          "[ingest]") {
    Broker broker = Broker::start();
    std::atomic<int> calls{0};
    auto refusing = Ingest::create(options_for(broker, "ingest-full-disk"), {"t/#"},
                                   [&](const IncomingMessage&) {
                                       ++calls;
                                       return HandleResult::retry_later;
                                   });
    REQUIRE(refusing.has_value());
    REQUIRE((*refusing)->start(5s).has_value());
    TestClient publisher = TestClient::connect(broker.uri());
    publisher.publish("t/1", "refused");
    REQUIRE(eventually([&] { return calls.load() >= 1; }));

    // What the runtime does next: stop the refusing ingest, make a new one, start it. Run on
    // another thread so that a hang fails the test instead of stopping it.
    Collector collector;
    auto work = std::async(std::launch::async, [&] {
        (*refusing)->stop(2s);
        auto next =
            Ingest::create(options_for(broker, "ingest-full-disk"), {"t/#"}, collector.handler());
        if (!next || !(*next)->start(5s)) return false;
        const bool got = collector.wait_for_payload("refused");
        (*next)->stop(2s);
        return got;
    });
    if (work.wait_for(30s) != std::future_status::ready) {
        FAIL_CHECK("stop() or create() of a Paho client blocked behind the refusing callback");
        std::_Exit(1);  // the blocked thread cannot be joined
    }
    CHECK(work.get());  // and the refused message arrived on the next connection, not lost
    const auto seen = collector.wait_for(1, 0ms);
    REQUIRE_FALSE(seen.empty());
    CHECK(seen[0].duplicate);
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
    bad.addresses = {{false, "127.0.0.1",
                      0}};  // the scheme of a uri is the config's check (config_readers_test)
    bad.client_id = "x";
    bad.config_name = "source";
    auto created = Ingest::create(bad, {"t"}, collector.handler());
    REQUIRE_FALSE(created.has_value());
    CHECK_THAT(created.error().message, Catch::Contains("source.port") && Catch::Contains("65535"));

    tidemark::test::set_address(bad, "ssl://127.0.0.1:8883");
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

TEST_CASE("retained messages are skipped on every subscribe unless asked for; live ones arrive",
          "[ingest][retained]") {
    const bool accept_retained = GENERATE(false, true);
    Broker broker = Broker::start();
    TestClient publisher = TestClient::connect(broker.uri());
    for (const std::string name : {"a", "b", "c"})
        publisher.publish("status/" + name, "kept-" + name, 1, /*retained=*/true);

    // Every start subscribes, as does every new Ingest the runtime makes on a pause.
    Collector collector;
    const std::string client_id = "ingest-retained-" + std::to_string(accept_retained);
    for (int round = 0; round < 3; ++round) {
        auto ingest =
            Ingest::create(options_for(broker, client_id), {"status/#", "live/#"},
                           collector.handler(), IngestOptions{.accept_retained = accept_retained});
        REQUIRE(ingest.has_value());
        REQUIRE((*ingest)->start(5s).has_value());
        // Retained, but published while we are subscribed: it arrives without the flag.
        if (round == 0) publisher.publish("status/d", "live-d", 1, /*retained=*/true);
        // Sent after the SUBACK: everything the subscription brought arrives before it.
        const std::string end = "end-" + std::to_string(round);
        publisher.publish("live/end", end);
        REQUIRE(collector.wait_for_payload(end));
        const std::uint64_t retained_now = round == 0 ? 3 : 4;
        CHECK((*ingest)->stats().retained_skipped == (accept_retained ? 0 : retained_now));
        (*ingest)->stop(5s);
    }
    const auto seen = collector.wait_for(0, 0ms);
    const auto count = [&](const std::string& payload, bool retained) {
        return std::count_if(seen.begin(), seen.end(), [&](const Seen& m) {
            return m.payload == payload && m.retained == retained;
        });
    };
    for (const std::string name : {"a", "b", "c"}) {
        INFO("kept-" << name);
        CHECK(count("kept-" + name, true) == (accept_retained ? 3 : 0));
        CHECK(count("kept-" + name, false) == 0);
    }
    CHECK(count("live-d", false) == 1);
    CHECK(count("live-d", true) == (accept_retained ? 2 : 0));
    CHECK(std::all_of(seen.begin(), seen.end(),
                      [&](const Seen& m) { return accept_retained || !m.retained; }));
}

TEST_CASE(
    "a link that fails mid-flight, then a pause and a reconnect: every message is logged "
    "once, in order",
    "[ingest][redelivery]") {
    Broker::Options in_flight_default;
    in_flight_default.max_inflight = 20;  // mosquitto's default max_inflight_messages
    Broker broker = Broker::start(in_flight_default);
    Relay relay(broker.port());
    FilteredLog log;
    BrokerOptions through_relay = options_for(broker, "ingest-redelivery");
    tidemark::test::set_address(through_relay, relay.uri());

    // Readings without a time stamp: the same bytes recur every four messages.
    const std::string topic = "sensors/dev-1/telemetry";
    std::vector<std::string> published;
    TestClient publisher = TestClient::connect(broker.uri());
    const auto publish = [&](int count) {
        for (int i = 0; i < count; ++i) {
            published.push_back(R"({"temp":2)" + std::to_string(published.size() % 4) + "}");
            publisher.publish(topic, published.back());
        }
    };

    auto first = Ingest::create(through_relay, {"sensors/#"}, log.handler());
    REQUIRE(first.has_value());
    REQUIRE((*first)->start(5s).has_value());
    publish(30);
    REQUIRE(eventually([&] { return log.size() == 30 && relay.settled(); }));

    // The link fails: five messages are read but their PUBACKs are lost; the rest of the
    // broker's in-flight window (20, at times one more after a reconnect) never reaches us.
    // Then the runtime pauses ingest (stop, and a new Ingest): the broker resends the whole
    // window flagged DUP.
    relay.fail_after(5);
    publish(30);
    REQUIRE(eventually([&] { return log.size() == 35 && relay.publishes_lost() >= 10; }));
    (*first)->stop(5s);
    auto second = Ingest::create(through_relay, {"sensors/#"}, log.handler());
    REQUIRE(second.has_value());
    REQUIRE((*second)->start(5s).has_value());
    REQUIRE(eventually([&] { return log.size() == 60 && relay.settled(); }));

    // Again, and this time the connection is cut under a running Ingest, which reconnects.
    const int lost_before = relay.publishes_lost();
    relay.fail_after(5);
    publish(30);
    REQUIRE(
        eventually([&] { return log.size() == 65 && relay.publishes_lost() >= lost_before + 10; }));
    relay.cut();
    REQUIRE(eventually([&] { return log.size() == 90; }, 15s));
    std::this_thread::sleep_for(300ms);  // a late duplicate would show here

    std::lock_guard lock(log.mutex);
    CHECK(log.appended == published);
    // Both kinds came back flagged DUP: the five read on each failed link (skipped), and
    // those never read, whose bytes repeat earlier records (kept): at least the ones the relay
    // dropped, more if the cut caught some on their way.
    CHECK(log.redeliveries_skipped == 10);
    CHECK(log.duplicates_appended >= relay.publishes_lost());
    CHECK(relay.publishes_lost() >= 20);
    // Three connections (the first Ingest, the second, its reconnect), each numbered anew.
    REQUIRE(log.connections.size() == 3);
    CHECK(log.connections[0] < log.connections[1]);
    CHECK(log.connections[1] < log.connections[2]);
}

TEST_CASE("a list of addresses: a dead first node is passed over, a lost node left for the next",
          "[ingest][fleet]") {
    Broker first = Broker::start({.persistence = true, .max_inflight = 100, .extra_conf = ""});
    Broker second = Broker::start();
    const int dead_port = tidemark::test::free_loopback_port();  // nothing listens there
    Collector collector;
    BrokerOptions o = options_for(first, "ingest-list");
    tidemark::test::set_addresses(
        o, {"tcp://127.0.0.1:" + std::to_string(dead_port), first.uri(), second.uri()});
    o.connect_timeout_s = 2;
    auto ingest = Ingest::create(o, {"t/#"}, collector.handler());
    REQUIRE(ingest.has_value());
    REQUIRE((*ingest)->start(5s).has_value());  // node 0 refuses: start() goes on to node 1
    CHECK((*ingest)->stats().node == first.uri());
    CHECK((*ingest)->stats().failovers == 0);  // the first link is no failover

    first.kill();  // node 1 dies: the next attempt is on node 2, at once
    REQUIRE(eventually(
        [&] { return (*ingest)->connected() && (*ingest)->stats().node == second.uri(); }, 30s));
    CHECK((*ingest)->stats().failovers == 1);
    TestClient publisher = TestClient::connect(second.uri());
    publisher.publish("t/x", "after the failover");
    const auto seen = collector.wait_for(1);
    REQUIRE(seen.size() == 1);
    CHECK(seen[0].payload == "after the failover");
    (*ingest)->stop(5s);
}
