// Issue 25, finding 4, end to end: devices publish QoS0 and QoS1 on the same topics space,
// interleaved; the PUBACKs of a burst are lost with the link (a proxy drops everything tidemark
// sends after its CONNECT), then tidemark is killed with SIGKILL. On the restart the broker
// redelivers the burst's QoS1 messages, flagged DUP. Before the fix the QoS0 records between
// them broke the redelivery filter's run after its first match: 18-19 of 20 redelivered QoS1
// messages were counted twice, in 5 of 5 rounds.
//
// Time: about 40 s.
#include <catch2/catch.hpp>

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/daemon.h"

namespace tidemark::test {
namespace {

using namespace std::chrono_literals;

// A TCP proxy on 127.0.0.1 in front of the gateway broker. Every connection is relayed both
// ways, except that while lose_acks() is armed, the next connection whose CONNECT names
// `client_id` (not its "-health" sibling) has everything it sends after the CONNECT dropped:
// its PUBACKs never reach the broker. Threads: one to accept, one per connection.
class AckLossProxy {
  public:
    AckLossProxy(int broker_port, std::string client_id)
        : broker_port_(broker_port), client_id_(std::move(client_id)) {
        listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in addr = loopback(0);
        socklen_t len = sizeof addr;
        if (listener_ < 0 || ::bind(listener_, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
            ::listen(listener_, 16) != 0 ||
            ::getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
            throw std::runtime_error("proxy: cannot listen on 127.0.0.1");
        port_ = ntohs(addr.sin_port);
        accept_thread_ = std::thread([this] { accept_loop(); });
    }
    ~AckLossProxy() {
        stopping_ = true;
        ::shutdown(listener_, SHUT_RDWR);
        accept_thread_.join();
        ::close(listener_);
        std::lock_guard lock(mutex_);
        for (auto& t : threads_)
            t.join();
    }
    AckLossProxy(const AckLossProxy&) = delete;
    AckLossProxy& operator=(const AckLossProxy&) = delete;

    std::string uri() const { return "tcp://127.0.0.1:" + std::to_string(port_); }
    void lose_acks(bool armed) { armed_ = armed; }
    uint64_t dropped_bytes() const { return dropped_.load(); }

  private:
    static sockaddr_in loopback(int port) {
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a.sin_port = htons(static_cast<uint16_t>(port));
        return a;
    }
    static bool send_all(int fd, const char* data, size_t n) {
        while (n > 0) {
            const ssize_t w = ::send(fd, data, n, MSG_NOSIGNAL);
            if (w <= 0) return false;
            data += w;
            n -= static_cast<size_t>(w);
        }
        return true;
    }
    void accept_loop() {
        while (!stopping_) {
            const int client = ::accept(listener_, nullptr, nullptr);
            if (client < 0) return;
            std::lock_guard lock(mutex_);
            threads_.emplace_back([this, client] { relay(client); });
        }
    }
    void relay(int client) {
        const int broker = ::socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in addr = loopback(broker_port_);
        if (broker < 0 || ::connect(broker, reinterpret_cast<sockaddr*>(&addr), sizeof addr)) {
            if (broker >= 0) ::close(broker);
            ::close(client);
            return;
        }
        bool first = true;    // the client's first bytes: its CONNECT (sent in one write)
        bool losing = false;  // everything after the CONNECT is dropped
        char buffer[16384];
        while (!stopping_) {
            pollfd fds[2] = {{client, POLLIN, 0}, {broker, POLLIN, 0}};
            if (::poll(fds, 2, 100) <= 0) continue;
            if (fds[0].revents != 0) {
                const ssize_t n = ::recv(client, buffer, sizeof buffer, 0);
                if (n <= 0) break;
                if (first) {
                    const std::string bytes(buffer, static_cast<size_t>(n));
                    losing = armed_ && bytes.find(client_id_) != std::string::npos &&
                             bytes.find(client_id_ + "-health") == std::string::npos;
                    first = false;
                    if (!send_all(broker, buffer, static_cast<size_t>(n))) break;
                } else if (losing) {
                    dropped_ += static_cast<uint64_t>(n);
                } else if (!send_all(broker, buffer, static_cast<size_t>(n))) {
                    break;
                }
            }
            if (fds[1].revents != 0) {
                const ssize_t n = ::recv(broker, buffer, sizeof buffer, 0);
                if (n <= 0 || !send_all(client, buffer, static_cast<size_t>(n))) break;
            }
        }
        ::close(broker);
        ::close(client);
    }

    const int broker_port_;
    const std::string client_id_;
    int listener_ = -1;
    int port_ = 0;
    std::atomic<bool> stopping_{false}, armed_{false};
    std::atomic<uint64_t> dropped_{0};
    std::mutex mutex_;
    std::vector<std::thread> threads_;
    std::thread accept_thread_;
};

std::map<std::string, int64_t> counted(const Rig& rig) {
    std::map<std::string, int64_t> n;
    for (const auto& [k, r] : upsert_view(rig.results()))
        n[k.key] += r.values.at("n").get<int64_t>();
    return n;
}

}  // namespace

TEST_CASE("interleaved QoS0 and QoS1, PUBACKs lost, kill -9: every QoS1 message counted once",
          "[integration][hostile]") {
    Broker::Options gateway;
    gateway.persistence = true;
    gateway.max_inflight = 100;  // the whole burst in flight at once
    Rig rig("qos0mix", gateway, {});
    AckLossProxy proxy(rig.gateway.port(), "tidemark-qos0mix");
    auto cfg = rig.config();
    cfg["source"]["uri"] = proxy.uri();
    cfg["pipelines"] = {{
        {"name", "count"},
        {"topic", "sensors/+/telemetry"},
        {"key", "topic:1"},
        {"timestamp", {{"pointer", "/ts"}, {"format", "epoch_ms"}}},
        {"fields", {{"v", "/v"}}},
        {"window", {{"type", "tumbling"}, {"size", "5s"}}},
        {"watermark",
         {{"delay", "30s"}, {"idle_timeout", "3s"}, {"max_future", "1m"}, {"scope", "global"}}},
        {"late", {{"allowed_lateness", "0s"}, {"too_late", "drop"}, {"corrections", "upsert"}}},
        {"aggregates", {{"n", {{"fn", "count"}}}}},
        {"limits", {{"max_keys", 100}, {"max_open_windows", 10000}}},
    }};
    rig.start(cfg);

    TestClient publisher = TestClient::connect(rig.gateway.uri());
    int64_t seq = 0, qos1 = 0, qos0 = 0;
    // QoS1 and QoS0 readings, one after the other: the log holds them interleaved.
    const auto burst = [&](int pairs) {
        for (int i = 0; i < pairs; ++i, ++seq) {
            publisher.publish("sensors/q1/telemetry", telemetry_seq(now_ms(), seq), 1);
            ++qos1;
            publisher.publish("sensors/q0/telemetry", telemetry_seq(now_ms(), seq), 0);
            ++qos0;
        }
    };
    const auto events_in = [&](int64_t at_least) {
        rig.wait_health(
            [&](const nlohmann::json& h) {
                return h["pipelines"]["count"].value("events_in", int64_t{0}) >= at_least;
            },
            30s, std::to_string(at_least) + " events in");
    };
    burst(10);
    events_in(20);

    const int rounds = 3;
    int64_t logged = 20, redeliveries_skipped = 0;
    for (int round = 0; round < rounds; ++round) {
        // The next ingest connection loses everything it sends: the burst is logged, and its
        // PUBACKs never reach the broker. Then SIGKILL, and a restart on a clean link.
        proxy.lose_acks(true);
        rig.daemon->kill9();
        rig.daemon->start();
        rig.wait_health(
            [](const nlohmann::json& h) { return h["ingest"].value("connected", false); }, 20s,
            "ingest connected on the lossy link");
        burst(20);
        // QoS0 is at most once (the broker may drop some for a client that does not
        // acknowledge), so "all 40 logged" cannot be waited for: the QoS1 half is, within a
        // few seconds on loopback. One that is not yet logged comes later, as a new message.
        logged += 20;
        events_in(logged);
        std::this_thread::sleep_for(3s);
        rig.daemon->kill9();
        proxy.lose_acks(false);
        rig.daemon->start();
        // The broker resends the burst's QoS1 messages, DUP: recognised in the log.
        const auto h = rig.wait_health(
            [](const nlohmann::json& x) {
                return x["ingest"].value("connected", false) &&
                       x["ingest"].value("duplicates_flagged", int64_t{0}) >= 20;
            },
            20s, "the burst redelivered");
        redeliveries_skipped += h["ingest"].value("redeliveries_skipped", int64_t{0});
        std::printf(
            "hostile_redelivery: round %d: %lld DUP messages, %lld recognised as "
            "redeliveries; %llu bytes of acknowledgements dropped so far\n",
            round, static_cast<long long>(h["ingest"].value("duplicates_flagged", 0)),
            static_cast<long long>(h["ingest"].value("redeliveries_skipped", 0)),
            static_cast<unsigned long long>(proxy.dropped_bytes()));
    }
    burst(5);  // traffic after the last restart, then silence closes the windows
    const bool complete = eventually(
        [&] {
            const auto n = counted(rig);
            return n.count("q1") && n.at("q1") >= qos1 && n.count("q0");
        },
        60s);
    std::this_thread::sleep_for(5s);  // a late double count would show here
    const auto got = counted(rig);
    INFO("tidemark log:\n" << rig.daemon_log());
    std::printf(
        "hostile_redelivery: QoS1 published %lld, counted %lld; QoS0 published %lld, "
        "counted %lld\n",
        static_cast<long long>(qos1), static_cast<long long>(got.count("q1") ? got.at("q1") : -1),
        static_cast<long long>(qos0), static_cast<long long>(got.count("q0") ? got.at("q0") : -1));
    CHECK(complete);
    REQUIRE(got.count("q1") == 1);
    CHECK(got.at("q1") == qos1);  // every acknowledged QoS1 message exactly once
    REQUIRE(got.count("q0") == 1);
    CHECK(got.at("q0") <= qos0);  // QoS0 is at most once: never twice
    // The redeliveries were seen, and skipped (before the fix: one a round, the run's first).
    // Not all 20 of a round: what the broker had not sent before the kill comes back as new.
    CHECK(redeliveries_skipped >= rounds * 5);
    CHECK(rig.daemon->terminate() == 0);
}

}  // namespace tidemark::test
