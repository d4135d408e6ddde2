// The forwarder against a real mosquitto: order, delete on PUBACK, outages, TLS, topic escaping.
#include "adapters/mqtt/forwarder.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "adapters/codec/topic.h"
#include "firmware/clock.h"
#include "tests/support/broker.h"
#include "tests/support/broker_options.h"
#include "tests/support/manual_clock.h"

using namespace std::chrono_literals;
using tidemark::Result;
using tidemark::mqtt::Forwarder;
using tidemark::mqtt::ForwarderOptions;
using tidemark::mqtt::OutboundRow;
using tidemark::test::Broker;
using tidemark::test::ReceivedMessage;
using tidemark::test::TempDir;
using tidemark::test::TestClient;

namespace {

// The outbox as the forwarder sees it, in memory. `paused` hides every row from peek(), so a
// test can hold the forwarder back until its subscriber is in place.
class MemoryOutbox final : public tidemark::mqtt::OutboxSource {
  public:
    uint64_t append(std::string topic, std::string payload) {
        std::lock_guard lock(mutex_);
        const uint64_t seq = next_seq_++;
        rows_.emplace(seq, OutboundRow{seq, std::move(topic), std::move(payload)});
        return seq;
    }
    Result<std::vector<OutboundRow>> peek(uint64_t from_seq, size_t limit) override {
        std::lock_guard lock(mutex_);
        std::vector<OutboundRow> out;
        if (paused_) return out;
        for (auto it = rows_.lower_bound(from_seq); it != rows_.end() && out.size() < limit; ++it) {
            out.push_back(it->second);
        }
        return out;
    }
    Result<void> delivered(std::span<const uint64_t> seqs) override {
        std::unique_lock lock(mutex_);
        deletes_unblocked_.wait(lock, [&] { return !deletes_blocked_; });
        for (size_t i = 1; i < seqs.size(); ++i) {
            if (seqs[i - 1] >= seqs[i]) unordered_batches_++;
        }
        for (uint64_t seq : seqs)
            rows_.erase(seq);
        ++delete_batches_;
        return {};
    }
    void set_paused(bool paused) {
        std::lock_guard lock(mutex_);
        paused_ = paused;
    }
    // A disk whose commits do not return: delivered() waits until unblocked.
    void set_deletes_blocked(bool blocked) {
        {
            std::lock_guard lock(mutex_);
            deletes_blocked_ = blocked;
        }
        deletes_unblocked_.notify_all();
    }
    size_t size() const {
        std::lock_guard lock(mutex_);
        return rows_.size();
    }
    int unordered_batches() const {
        std::lock_guard lock(mutex_);
        return unordered_batches_;
    }
    int delete_batches() const {
        std::lock_guard lock(mutex_);
        return delete_batches_;
    }

  private:
    mutable std::mutex mutex_;
    std::condition_variable deletes_unblocked_;
    bool deletes_blocked_ = false;
    std::map<uint64_t, OutboundRow> rows_;
    uint64_t next_seq_ = 1;
    bool paused_ = false;
    int unordered_batches_ = 0;
    int delete_batches_ = 0;
};

ForwarderOptions options_for(const std::string& uri, const std::string& client_id,
                             int max_inflight = 20) {
    static const tidemark::firmware::SystemClock host_clock;
    ForwarderOptions options;
    options.clock = &host_clock;
    tidemark::test::set_address(options.broker, uri);
    options.broker.client_id = client_id;
    options.broker.max_inflight = max_inflight;
    options.broker.keep_alive_s = 5;
    options.broker.connect_timeout_s = 2;
    options.broker.config_name = "upstream";
    return options;
}

std::unique_ptr<Forwarder> start_forwarder(ForwarderOptions options, MemoryOutbox& outbox) {
    auto forwarder = Forwarder::create(std::move(options), outbox);
    REQUIRE(forwarder);
    REQUIRE((*forwarder)->start());
    return std::move(*forwarder);
}

template <typename Predicate>
bool eventually(Predicate predicate, std::chrono::milliseconds timeout = 15s) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!predicate()) {
        if (std::chrono::steady_clock::now() > deadline) return false;
        std::this_thread::sleep_for(5ms);
    }
    return true;
}

std::string row_payload(int i) {
    return R"({"id":"row-)" + std::to_string(i) + R"("})";
}

// Appends rows row-first..row-(last-1) on topic "up/rows".
void append_rows(MemoryOutbox& outbox, int first, int last) {
    for (int i = first; i < last; ++i)
        outbox.append("up/rows", row_payload(i));
}

std::set<std::string> distinct_payloads(const std::vector<ReceivedMessage>& messages) {
    std::set<std::string> out;
    for (const auto& m : messages)
        out.insert(m.payload);
    return out;
}

std::set<std::string> expected_payloads(int n) {
    std::set<std::string> out;
    for (int i = 0; i < n; ++i)
        out.insert(row_payload(i));
    return out;
}

int free_port() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    socklen_t len = sizeof addr;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    ::close(fd);
    return ntohs(addr.sin_port);
}

// The broker is taken down (stop or kill) while rows are on the wire, more rows are appended
// while it is away, and it comes back: every row arrives, duplicates allowed.
//
// mosquitto acknowledges a PUBLISH before it has written the copy to its subscribers, so what
// it had acknowledged but not written when it went down is the broker's loss, not ours. After a
// stop (SIGTERM) its persistence keeps that copy for the subscriber's persistent session, so
// the check is exact. After a kill it may be gone: the check then allows at most one
// forwarder window of such rows, all of them acknowledged before the kill.
void outage_case(bool kill) {
    Broker broker = Broker::start({.persistence = true, .max_inflight = 5000, .extra_conf = ""});
    TestClient before = TestClient::connect(broker.uri(), "sub", false);
    before.subscribe("up/#", 1);
    std::this_thread::sleep_for(1100ms);  // the subscription is in the autosaved store

    MemoryOutbox outbox;
    constexpr int rows_before = 3000;
    constexpr int rows_total = 4000;
    append_rows(outbox, 0, rows_before);
    auto forwarder = start_forwarder(options_for(broker.uri(), "fwd-outage"), outbox);
    REQUIRE(eventually([&] { return forwarder->stats().acks >= 300; }));

    // Hold the forwarder back after the outage until the new subscriber is in place.
    outbox.set_paused(true);
    if (kill) {
        broker.kill();
    } else {
        broker.stop();
    }
    const auto received_before = before.messages();
    REQUIRE(eventually([&] { return !forwarder->stats().link_up; }, 5s));
    CHECK(forwarder->stats().offline_since_ms > 0);
    append_rows(outbox, rows_before, rows_total);  // rows keep accumulating while offline
    forwarder->notify();
    std::this_thread::sleep_for(500ms);
    CHECK(outbox.size() > rows_total - rows_before);  // nothing is lost while the link is down

    const uint64_t acked_before_outage = forwarder->stats().acks;
    broker.restart();
    TestClient after = TestClient::connect(broker.uri(), "sub", false);
    after.subscribe("up/#", 1);
    outbox.set_paused(false);
    forwarder->notify();
    REQUIRE(eventually([&] { return outbox.size() == 0; }, 30s));
    const auto stats = forwarder->stats();
    CHECK(stats.link_up);
    CHECK(stats.reconnects >= 1);
    CHECK(stats.offline_since_ms == 0);
    forwarder->stop(2s);

    auto received = received_before;
    for (const auto& m : after.wait_for(rows_total, 3s))
        received.push_back(m);
    const auto distinct = distinct_payloads(received);
    if (!kill) {
        // Deduping by id leaves exactly the rows of the outbox: duplicates allowed, loss not.
        CHECK(distinct == expected_payloads(rows_total));
        return;
    }
    std::vector<int> missing;
    for (int i = 0; i < rows_total; ++i) {
        if (!distinct.contains(row_payload(i))) missing.push_back(i);
    }
    // A killed mosquitto loses what it acknowledged after its last autosave (every second) and
    // had not yet delivered: the broker's loss, which grows with how far the subscriber lagged
    // (44-125 rows on a loaded machine), not the forwarder's window. The forwarder's promise is
    // that only rows the broker acknowledged can be missing: every later one was re-sent.
    INFO("rows the killed broker had acknowledged but not passed on: " << missing.size());
    CHECK(std::all_of(missing.begin(), missing.end(),
                      [&](int row) { return row < static_cast<int>(acked_before_outage) + 20; }));
}

}  // namespace

TEST_CASE("rows are published in seq order and deleted on PUBACK", "[forwarder][slow]") {
    Broker broker = Broker::start({.persistence = false, .max_inflight = 1000, .extra_conf = ""});
    TestClient subscriber = TestClient::connect(broker.uri(), "sub");
    subscriber.subscribe("up/#", 1);

    MemoryOutbox outbox;
    constexpr int rows = 1000;
    append_rows(outbox, 0, rows);
    auto forwarder = start_forwarder(options_for(broker.uri(), "fwd-order"), outbox);
    REQUIRE(eventually([&] { return outbox.size() == 0; }));
    const auto received = subscriber.wait_for(rows, 10s);
    REQUIRE(received.size() == rows);
    for (int i = 0; i < rows; ++i)
        REQUIRE(received[static_cast<size_t>(i)].payload == row_payload(i));

    const auto stats = forwarder->stats();
    CHECK(stats.sends == rows);
    CHECK(stats.acks == rows);
    CHECK(stats.inflight == 0);
    CHECK(stats.link_up);
    CHECK(stats.first_row_after_reconnect_ms.has_value());
    CHECK(outbox.unordered_batches() == 0);
    CHECK(outbox.delete_batches() < rows / 4);  // deletes are batched, not one per row

    // New rows after the outbox ran dry go out on notify(), well before the poll interval.
    outbox.append("up/rows", "late");
    forwarder->notify();
    CHECK(eventually([&] { return outbox.size() == 0; }, 500ms));
    forwarder->stop(2s);
    CHECK_FALSE(forwarder->stats().link_up);
}

TEST_CASE("a row is not deleted without an acknowledgement", "[forwarder][slow]") {
    // No broker at all: the forwarder keeps retrying and the outbox keeps every row.
    const int port = free_port();
    MemoryOutbox outbox;
    append_rows(outbox, 0, 10);
    auto forwarder =
        start_forwarder(options_for("tcp://127.0.0.1:" + std::to_string(port), "fwd-none"), outbox);
    REQUIRE(eventually([&] { return forwarder->stats().connect_failures >= 2; }, 5s));
    const auto stats = forwarder->stats();
    CHECK_FALSE(stats.link_up);
    CHECK(stats.offline_since_ms > 0);
    CHECK_THAT(stats.last_error, Catch::Contains(std::to_string(port)));
    CHECK(outbox.size() == 10);
    const auto stop_started = std::chrono::steady_clock::now();
    forwarder->stop(1s);
    CHECK(std::chrono::steady_clock::now() - stop_started < 2s);
}

TEST_CASE("upstream stopped under load, then back: every row arrives", "[forwarder][slow]") {
    outage_case(false);
}

TEST_CASE("upstream killed mid-stream: duplicates allowed, loss not", "[forwarder][slow]") {
    outage_case(true);
}

TEST_CASE("the forwarder stopped mid-stream and started again re-sends what was unacknowledged",
          "[forwarder][slow]") {
    Broker broker = Broker::start({.persistence = false, .max_inflight = 5000, .extra_conf = ""});
    TestClient subscriber = TestClient::connect(broker.uri(), "sub");
    subscriber.subscribe("up/#", 1);
    MemoryOutbox outbox;
    constexpr int rows = 3000;
    append_rows(outbox, 0, rows);
    {
        auto first = start_forwarder(options_for(broker.uri(), "fwd-a"), outbox);
        REQUIRE(eventually([&] { return first->stats().acks >= 200; }));
        first->stop(0ms);  // no waiting for in-flight acknowledgements
    }
    CHECK(outbox.size() > 0);
    auto second = start_forwarder(options_for(broker.uri(), "fwd-a"), outbox);
    REQUIRE(eventually([&] { return outbox.size() == 0; }, 30s));
    second->stop(2s);
    const auto received = subscriber.wait_for(rows, 5s);
    CHECK(distinct_payloads(received) == expected_payloads(rows));
}

TEST_CASE("a crash re-sends at most crash_resend_rows_max rows: pending deletes and the window",
          "[forwarder][slow]") {
    // At the defaults (delete_batch_rows 1024, max_inflight 64), as docs/BENCHMARKS.md states.
    CHECK(tidemark::mqtt::undeleted_rows_max(ForwarderOptions{}) == 5120);
    CHECK(tidemark::mqtt::crash_resend_rows_max(ForwarderOptions{}) == 5183);

    // The disk stops returning from its commits: the forwarder sends until the acknowledged rows
    // awaiting their delete reach the bound, and stops there. Killed now, the next run would
    // send every one of those rows again (none is deleted): that is what a crash re-sends.
    Broker broker = Broker::start({.persistence = false, .max_inflight = 5000, .extra_conf = ""});
    MemoryOutbox outbox;
    const ForwarderOptions options = options_for(broker.uri(), "fwd-crash", 64);
    const size_t resend_max = tidemark::mqtt::crash_resend_rows_max(options);
    const size_t rows = resend_max + 2000;
    append_rows(outbox, 0, static_cast<int>(rows));
    outbox.set_deletes_blocked(true);
    auto forwarder = start_forwarder(options, outbox);
    // Sending has stopped: every row sent is acknowledged and no new one goes for 500 ms.
    uint64_t last_sends = 0;
    auto since = std::chrono::steady_clock::now();
    REQUIRE(eventually(
        [&] {
            const auto stats = forwarder->stats();
            if (stats.sends != last_sends || stats.acks != stats.sends) {
                last_sends = stats.sends;
                since = std::chrono::steady_clock::now();
            }
            return stats.sends > 0 && std::chrono::steady_clock::now() - since >= 500ms;
        },
        30s));
    const auto stats = forwarder->stats();
    INFO("sent " << stats.sends << ", undeleted bound "
                 << tidemark::mqtt::undeleted_rows_max(options) << ", re-send bound "
                 << resend_max);
    CHECK(outbox.size() == rows);  // nothing deleted
    CHECK(stats.sends <= resend_max);
    CHECK(stats.sends >= tidemark::mqtt::undeleted_rows_max(options));  // the bound was reached
    outbox.set_deletes_blocked(false);
    REQUIRE(eventually([&] { return outbox.size() == 0; }, 30s));
    forwarder->stop(2s);
}

TEST_CASE("a key with '/', '+' and '#' lands on exactly one escaped topic level",
          "[forwarder][slow]") {
    Broker broker = Broker::start();
    TestClient one_level = TestClient::connect(broker.uri(), "sub-level");
    one_level.subscribe("tm/gw-01/p/+", 1);
    TestClient everything = TestClient::connect(broker.uri(), "sub-all");
    everything.subscribe("#", 1);

    const std::string tmpl = "tm/{node_id}/{pipeline}/{key}";
    MemoryOutbox outbox;
    outbox.append(tidemark::codec::expand_topic_template(tmpl, "gw-01", "p", "a/b+c#d"), "x");
    auto forwarder = start_forwarder(options_for(broker.uri(), "fwd-topic"), outbox);
    REQUIRE(eventually([&] { return outbox.size() == 0; }));
    forwarder->stop(1s);

    const auto on_level = one_level.wait_for(1, 5s);
    REQUIRE(on_level.size() == 1);
    CHECK(on_level[0].topic == "tm/gw-01/p/a%2Fb%2Bc%23d");
    std::this_thread::sleep_for(200ms);
    CHECK(everything.messages().size() == 1);
}

TEST_CASE("TLS upstream: the right CA connects, a wrong CA is refused with a clear error",
          "[forwarder][slow]") {
    TempDir dir("tidemark-tls");
    const std::string d = dir.path();
    const std::string script =
        "set -e; cd '" + d +
        "'; "
        "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=test-ca -keyout ca.key "
        "-out ca.crt 2>/dev/null; "
        "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=wrong-ca -keyout wrong.key "
        "-out wrong.crt 2>/dev/null; "
        "openssl req -newkey rsa:2048 -nodes -subj /CN=localhost -keyout server.key "
        "-out server.csr 2>/dev/null; "
        "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > san.ext; "
        "openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 "
        "-extfile san.ext -out server.crt 2>/dev/null; chmod 644 *.key";
    REQUIRE(std::system(script.c_str()) == 0);

    const int tls_port = free_port();
    Broker broker = Broker::start(
        {.persistence = false,
         .max_inflight = 100,
         .extra_conf = "listener " + std::to_string(tls_port) + " 127.0.0.1\ncafile " + d +
                       "/ca.crt\ncertfile " + d + "/server.crt\nkeyfile " + d + "/server.key\n"});
    const std::string tls_uri = "ssl://127.0.0.1:" + std::to_string(tls_port);

    SECTION("the CA that signed the broker's certificate") {
        MemoryOutbox outbox;
        append_rows(outbox, 0, 5);
        auto options = options_for(tls_uri, "fwd-tls");
        options.broker.ca_file = d + "/ca.crt";
        auto forwarder = start_forwarder(options, outbox);
        CHECK(eventually([&] { return outbox.size() == 0; }, 10s));
        CHECK(forwarder->stats().link_up);
        forwarder->stop(1s);
    }
    SECTION("a CA that did not sign it") {
        MemoryOutbox outbox;
        append_rows(outbox, 0, 5);
        auto options = options_for(tls_uri, "fwd-wrong-ca");
        options.broker.ca_file = d + "/wrong.crt";
        auto forwarder = start_forwarder(options, outbox);
        // Refused, explained, retried with backoff; the rows stay.
        REQUIRE(eventually([&] { return forwarder->stats().connect_failures >= 2; }, 10s));
        const auto stats = forwarder->stats();
        CHECK_FALSE(stats.link_up);
        CHECK_THAT(stats.last_error, Catch::Contains("TLS"));
        CHECK_THAT(stats.last_error, Catch::Contains("certificate verify failed"));
        CHECK_THAT(stats.last_error, Catch::Contains("wrong.crt"));
        CHECK(outbox.size() == 5);
        forwarder->stop(1s);
    }
}

TEST_CASE("after a long outage the first row leaves within the reconnect cap",
          "[forwarder][slow]") {
    // With the backoff doubling to 30 s, as it once did, the attempt after a 9 s outage came
    // about 15 s in, some 6 s after the broker was back.
    Broker broker = Broker::start({.persistence = false, .max_inflight = 1000, .extra_conf = ""});
    MemoryOutbox outbox;
    auto options = options_for(broker.uri(), "fwd-cap");
    options.reconnect_delay_max_ms = 400;
    auto forwarder = start_forwarder(options, outbox);
    REQUIRE(eventually([&] { return forwarder->stats().link_up; }, 5s));
    broker.stop();
    REQUIRE(eventually([&] { return !forwarder->stats().link_up; }, 5s));
    append_rows(outbox, 0, 5);
    forwarder->notify();
    std::this_thread::sleep_for(9s);
    const uint64_t failures = forwarder->stats().connect_failures;
    INFO("connect attempts that failed during the outage: " << failures);
    CHECK(failures >= 9000 / 400);  // each wait is at most the cap

    broker.restart();
    const auto back = std::chrono::steady_clock::now();
    REQUIRE(eventually([&] { return outbox.size() == 0; }, 10s));
    const auto first_rows_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::steady_clock::now() - back)
                                   .count();
    INFO("broker back -> rows delivered: " << first_rows_ms << " ms");
    CHECK(first_rows_ms < 2000);
    forwarder->stop(2s);
}

TEST_CASE("the reconnect backoff waits on the clock the forwarder is given", "[forwarder][slow]") {
    Broker broker = Broker::start({.persistence = false, .max_inflight = 1000, .extra_conf = ""});
    broker.stop();  // nothing listens on its port until restart()
    tidemark::test::ManualClock clock;
    MemoryOutbox outbox;
    append_rows(outbox, 0, 5);
    auto options = options_for(broker.uri(), "fwd-clock");
    options.reconnect_delay_min_ms = 1'000;
    options.reconnect_delay_max_ms = 1'000;
    options.clock = &clock;
    auto forwarder = start_forwarder(options, outbox);
    REQUIRE(eventually([&] { return forwarder->stats().connect_failures >= 1; }, 5s));
    CHECK(forwarder->stats().offline_since_ms == clock.wall_ms());

    // Twice the longest wait by the host's clock, none by the forwarder's: no new attempt.
    broker.restart();
    std::this_thread::sleep_for(2s);
    CHECK(forwarder->stats().connect_failures == 1);
    CHECK_FALSE(forwarder->stats().link_up);
    CHECK(outbox.size() == 5);

    clock.advance(1'000);
    REQUIRE(eventually([&] { return forwarder->stats().acks == 5; }, 5s));
    CHECK(forwarder->stats().connect_failures == 1);
    // Acknowledged rows are deleted once the delete interval (50 ms) has passed, by that clock.
    std::this_thread::sleep_for(500ms);
    CHECK(outbox.size() == 5);
    clock.advance(50);
    REQUIRE(eventually([&] { return outbox.size() == 0; }, 5s));
    forwarder->stop(2s);
}

TEST_CASE("a row no broker can take is deleted and counted; the rows behind it arrive",
          "[forwarder][slow]") {
    Broker broker = Broker::start({.persistence = false, .max_inflight = 1000, .extra_conf = ""});
    TestClient subscriber = TestClient::connect(broker.uri(), "sub");
    subscriber.subscribe("up/#", 1);
    MemoryOutbox outbox;
    append_rows(outbox, 0, 3);
    outbox.append("up/\xff\xfe", "not UTF-8");  // MQTT topics must be UTF-8
    append_rows(outbox, 3, 6);
    auto forwarder = start_forwarder(options_for(broker.uri(), "fwd-reject"), outbox);
    REQUIRE(eventually([&] { return outbox.size() == 0; }));
    CHECK(distinct_payloads(subscriber.wait_for(6, 5s)) == expected_payloads(6));
    const auto stats = forwarder->stats();
    CHECK(stats.rejected == 1);
    CHECK(stats.acks == 6);
    CHECK(stats.link_up);
    CHECK(stats.reconnects == 0);  // refused before it reached the wire
    forwarder->stop(2s);
}

TEST_CASE("two sources share one link, each in its own order, the first one first",
          "[forwarder][slow]") {
    Broker broker = Broker::start({.persistence = false, .max_inflight = 1000, .extra_conf = ""});
    TestClient subscriber = TestClient::connect(broker.uri(), "sub");
    subscriber.subscribe("up/#", 1);
    MemoryOutbox results;
    MemoryOutbox side;
    for (int i = 0; i < 200; ++i) {
        results.append("up/results", "r" + std::to_string(i));
        side.append("up/side", "s" + std::to_string(i));
    }
    auto forwarder = Forwarder::create(options_for(broker.uri(), "fwd-two", 8),
                                       std::vector<tidemark::mqtt::OutboxSource*>{&results, &side});
    REQUIRE(forwarder);
    REQUIRE((*forwarder)->start());
    REQUIRE(eventually([&] { return results.size() == 0 && side.size() == 0; }));
    const auto received = subscriber.wait_for(400, 5s);
    REQUIRE(received.size() == 400);
    std::vector<std::string> from_results, from_side;
    size_t last_result_at = 0, first_side_at = received.size();
    for (size_t i = 0; i < received.size(); ++i) {
        if (received[i].topic == "up/results") {
            from_results.push_back(received[i].payload);
            last_result_at = i;
        } else {
            from_side.push_back(received[i].payload);
            first_side_at = std::min(first_side_at, i);
        }
    }
    for (int i = 0; i < 200; ++i) {
        REQUIRE(from_results[static_cast<size_t>(i)] == "r" + std::to_string(i));
        REQUIRE(from_side[static_cast<size_t>(i)] == "s" + std::to_string(i));
    }
    // Side rows wait while results are queued (a window of 8 may overlap the switch).
    CHECK(first_side_at + 8 >= last_result_at);
    (*forwarder)->stop(2s);
}

TEST_CASE("a connection that takes rows but never acknowledges them is rebuilt",
          "[forwarder][slow]") {
    // A "broker" that accepts the connection and the rows and stays silent: no PUBACK, ever.
    const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    REQUIRE(::listen(listener, 8) == 0);
    socklen_t len = sizeof addr;
    ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
    std::atomic<int> connections{0};
    std::thread silent([&] {
        std::vector<int> clients;
        while (connections.load() < 2) {
            const int client = ::accept(listener, nullptr, nullptr);
            if (client < 0) break;
            clients.push_back(client);
            char buffer[4096];
            (void)::recv(client, buffer, sizeof buffer, 0);  // CONNECT
            const unsigned char connack[] = {0x20, 0x02, 0x00, 0x00};
            (void)::send(client, connack, sizeof connack, MSG_NOSIGNAL);
            ++connections;
        }
        std::this_thread::sleep_for(200ms);
        for (int client : clients)
            ::close(client);
    });

    MemoryOutbox outbox;
    append_rows(outbox, 0, 5);
    auto options =
        options_for("tcp://127.0.0.1:" + std::to_string(ntohs(addr.sin_port)), "fwd-silent");
    options.ack_timeout_ms = 500;
    auto forwarder = start_forwarder(options, outbox);
    CHECK(eventually([&] { return connections.load() >= 2; }, 10s));
    const auto stats = forwarder->stats();
    CHECK_THAT(stats.last_error, Catch::Contains("no acknowledgement for 500 ms"));
    CHECK(outbox.size() == 5);  // nothing acknowledged, nothing deleted
    ::shutdown(listener, SHUT_RDWR);
    ::close(listener);
    silent.join();
    forwarder->stop(1s);
    CHECK(outbox.size() == 5);
}

TEST_CASE("a list of addresses: past a dead first node, then the next node takes over the outbox",
          "[forwarder][fleet]") {
    Broker a = Broker::start({.persistence = false, .max_inflight = 5000, .extra_conf = ""});
    Broker b = Broker::start({.persistence = false, .max_inflight = 5000, .extra_conf = ""});
    TestClient sub_a = TestClient::connect(a.uri(), "sub-a");
    sub_a.subscribe("up/#", 1);
    TestClient sub_b = TestClient::connect(b.uri(), "sub-b");
    sub_b.subscribe("up/#", 1);
    MemoryOutbox outbox;
    ForwarderOptions options = options_for(a.uri(), "fwd-list");
    tidemark::test::set_addresses(
        options.broker, {"tcp://127.0.0.1:" + std::to_string(free_port()), a.uri(), b.uri()});
    constexpr int rows_before = 200, rows_total = 3000;
    append_rows(outbox, 0, rows_before);
    auto forwarder = start_forwarder(options, outbox);
    REQUIRE(eventually([&] { return outbox.size() == 0; }, 30s));
    CHECK(forwarder->stats().node == a.uri());  // node 0 refused: node 1, no failover yet
    CHECK(forwarder->stats().failovers == 0);

    append_rows(outbox, rows_before, rows_total);
    forwarder->notify();
    REQUIRE(eventually([&] { return forwarder->stats().acks >= rows_before + 100; }, 30s));
    a.kill();  // mid-stream: rows in flight on a lost link go again, to node 2
    // What node 1 acknowledged: the link to node 2 is not up microseconds after the kill.
    const uint64_t acked_by_a = forwarder->stats().acks;
    REQUIRE(eventually([&] { return outbox.size() == 0; }, 30s));
    const auto stats = forwarder->stats();
    CHECK(stats.node == b.uri());
    CHECK(stats.failovers == 1);
    CHECK(stats.last_outage_ms.has_value());
    forwarder->stop(2s);

    auto received = sub_a.messages();
    for (const auto& m : sub_b.wait_for(rows_total, 3s))  // all that is on its way
        received.push_back(m);
    const auto distinct = distinct_payloads(received);
    int missing = 0, missing_past_acked = 0;
    for (int i = 0; i < rows_total; ++i) {
        if (distinct.contains(row_payload(i))) continue;
        ++missing;
        if (static_cast<uint64_t>(i) >= acked_by_a + 20) ++missing_past_acked;
    }
    // Only what the killed broker acknowledged and had not passed on yet may be missing (a
    // SIGKILLed mosquitto loses its queue to the subscriber, which under load held 64 rows,
    // more than the forwarder's window): rows are sent in order and acknowledged within the
    // window (max_inflight 20), so every missing one is below acked_by_a + 20; everything after
    // reached node 2.
    INFO("rows the killed node had acknowledged but not passed on: " << missing << " (of the first "
                                                                     << acked_by_a << " rows)");
    CHECK(missing_past_acked == 0);
}
