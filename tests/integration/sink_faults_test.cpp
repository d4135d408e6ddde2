// Issue 27: effectively once into PostgreSQL through faults. A stream of result records (out of
// order, with upserts, retracts and repeats), version records and poison messages flows to the
// upstream broker while the sink is killed with SIGKILL ten times at random moments, PostgreSQL is
// restarted and crashed, and the broker is restarted. In the end `current` equals the consumer
// view of everything published, and `rejected` holds each poison message exactly once: nothing
// lost, nothing duplicated (a rejected row has no key to dedupe on, so a duplicate would show).
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "tests/integration/sink_support.h"

namespace tidemark::test {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;

struct Message {
    std::string topic, payload;
    bool retained = false;
};

// The stream: two nodes' version records first, then every window's records shuffled across
// windows (so revisions arrive out of order too), a poison message every 40.
std::vector<Message> make_stream(std::mt19937& rng, int& poisons) {
    std::vector<Message> results;
    const json aggregates = {{"n", "count"}, {"s", "sum"}};
    for (const std::string node : {"gw-1", "gw-2"}) {
        const std::string topic = "tidemark/" + node + "/p";
        for (int key = 0; key < 20; ++key) {
            for (int w = 0; w < 25; ++w) {
                const int64_t start = 1764400000000 + w * 60000;
                const std::string k = "dev-" + std::to_string(key);
                auto add = [&](int64_t revision, const std::string& kind) {
                    results.push_back(
                        {topic, result_json(node, "p", "v1", k, start, start + 60000, revision,
                                            kind, {{"n", revision + 1}, {"s", 1.5 * w + key}})});
                };
                add(0, "final");
                const int revisions = static_cast<int>(rng() % 4);
                for (int r = 1; r <= revisions; ++r) {
                    if (rng() % 2) add(r - 1, "retract");
                    add(r, "update");
                }
                if (rng() % 5 == 0) add(0, "final");  // a repeat, as a redelivery would be
                if (rng() % 7 == 0) add(revisions, "retract");  // the window goes away
            }
        }
    }
    std::shuffle(results.begin(), results.end(), rng);
    std::vector<Message> stream;
    for (const std::string node : {"gw-1", "gw-2"})
        stream.push_back({"tidemark/" + node + "/p/version",
                          version_json(node, "p", "v1", 1000, aggregates), true});
    for (size_t i = 0; i < results.size(); ++i) {
        if (i % 40 == 39) {
            stream.push_back({"tidemark/gw-1/p", "poison #" + std::to_string(poisons++), false});
        }
        stream.push_back(results[i]);
    }
    return stream;
}

// Publishes the stream in order, about `rate` a second; hold() parks it between two publishes
// so that the broker can restart with nothing in flight (a publish the broker took but did not
// acknowledge would be published twice, and a poison message twice is two rejected rows).
class StreamPublisher {
  public:
    StreamPublisher(std::string uri, std::vector<Message> stream)
        : uri_(std::move(uri)), stream_(std::move(stream)) {}
    ~StreamPublisher() { join(); }

    void start() {
        thread_ = std::thread([this] { run(); });
    }
    void hold() {
        std::unique_lock lock(mutex_);
        holding_ = true;
        changed_.wait(lock, [&] { return parked_ || done_; });
    }
    void release() {
        std::lock_guard lock(mutex_);
        holding_ = false;
        changed_.notify_all();
    }
    void join() {
        if (thread_.joinable()) thread_.join();
    }
    size_t published() const { return published_.load(); }
    std::string error() const {
        std::lock_guard lock(mutex_);
        return error_;
    }

  private:
    void run() {
        try {
            auto client = std::make_unique<TestClient>(TestClient::connect(uri_));
            for (const Message& m : stream_) {
                {
                    std::unique_lock lock(mutex_);
                    if (holding_) {
                        parked_ = true;
                        changed_.notify_all();
                        changed_.wait(lock, [&] { return !holding_; });
                        parked_ = false;
                        client.reset();  // the broker restarted: a new connection
                    }
                }
                for (int attempt = 0;; ++attempt) {
                    try {
                        if (!client)
                            client = std::make_unique<TestClient>(TestClient::connect(uri_));
                        client->publish(m.topic, m.payload, 1, m.retained);
                        break;
                    } catch (const std::exception&) {
                        if (attempt > 100) throw;
                        client.reset();
                        std::this_thread::sleep_for(100ms);
                    }
                }
                ++published_;
                std::this_thread::sleep_for(4ms);
            }
        } catch (const std::exception& e) {
            std::lock_guard lock(mutex_);
            error_ = e.what();
        }
        std::lock_guard lock(mutex_);
        done_ = true;
        changed_.notify_all();
    }

    std::string uri_;
    std::vector<Message> stream_;
    std::thread thread_;
    mutable std::mutex mutex_;
    std::condition_variable changed_;
    bool holding_ = false, parked_ = false, done_ = false;
    std::string error_;
    std::atomic<size_t> published_{0};
};

}  // namespace

TEST_CASE(
    "kill -9 of the sink, PostgreSQL restarts and a broker restart lose nothing and "
    "duplicate nothing",
    "[integration][sink]") {
    Postgres pg = Postgres::start();
    Broker::Options persistent;
    persistent.persistence = true;
    Broker upstream = Broker::start(persistent);
    TempDir dir("tidemark-sink-faults");
    std::mt19937 rng(std::random_device{}());
    int poisons = 0;
    const std::vector<Message> stream = make_stream(rng, poisons);
    std::vector<ReceivedMessage> as_received;
    for (const auto& m : stream)
        as_received.push_back({m.topic, m.payload, 1, false, m.retained});
    const CurrentView expected = consumer_view(as_received);

    // Small batches: more commits for the kills to fall between.
    SinkProcess sink(
        dir.path(),
        sink_config(upstream.uri(), pg, "sink-faults", dir.path() + "/spool", {"tidemark/#"}, 50),
        upstream.uri());
    sink.start();
    StreamPublisher publisher(upstream.uri(), stream);
    publisher.start();

    std::uniform_int_distribution<int> pause_ms(150, 900);
    for (int kill = 0; kill < 10; ++kill) {
        std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms(rng)));
        INFO("kill " << kill << " after " << publisher.published() << " of " << stream.size());
        sink.kill9();
        if (kill % 3 == 1) std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms(rng)));
        sink.start();
        if (kill == 3) {
            // PostgreSQL away for a while: the sink spools, raises the alarm, and resumes.
            pg.stop();
            sink.wait_health(
                [](const json& h) {
                    for (const auto& a : h["alarms"])
                        if (a.get<std::string>().starts_with("postgres_down")) return true;
                    return false;
                },
                30s, "the alarm postgres_down");
            pg.start_again();
            sink.wait_health([](const json& h) { return h["postgres"]["up"] == true; }, 60s,
                             "postgres.up again");
        } else if (kill == 5) {
            pg.kill9();  // a crash: recovery from the WAL on the next start
            pg.start_again();
        } else if (kill == 7) {
            publisher.hold();
            upstream.restart();
            sink.reconnect_health();
            publisher.release();
            sink.wait_health([](const json& h) { return h["broker"]["link_up"] == true; }, 60s,
                             "broker.link_up after the broker's restart");
        }
    }
    publisher.join();
    REQUIRE(publisher.error().empty());
    REQUIRE(publisher.published() == stream.size());

    const std::string difference = wait_for_view(pg, expected, 120s);
    INFO(difference << "\nsink log:\n" << sink.log());
    REQUIRE(difference.empty());
    sink.wait_committed(60s);
    // Every poison message once: as many rows as were published, each its own.
    CHECK(pg.scalar("SELECT count(*) FROM tidemark.rejected") == std::to_string(poisons));
    CHECK(pg.scalar("SELECT count(DISTINCT payload) FROM tidemark.rejected") ==
          std::to_string(poisons));
    // Every window of the stream has its row, tombstones included.
    std::set<WindowId> windows;
    for (const auto& m : as_received) {
        const json j = json::parse(m.payload, nullptr, false);
        if (j.is_object() && j.contains("window"))
            windows.insert({j["node"].get<std::string>(), j["pipeline"].get<std::string>(),
                            j["version"].get<std::string>(), j["key"].get<std::string>(),
                            j["window"]["start"].get<int64_t>(),
                            j["window"]["end"].get<int64_t>()});
    }
    CHECK(pg.scalar("SELECT count(*) FROM tidemark.results") == std::to_string(windows.size()));
    CHECK(pg.scalar("SELECT count(*) FROM tidemark.versions") == "2");
    // The spool let go of what PostgreSQL holds.
    const auto health = sink.wait_committed(30s);
    CHECK(health["spool"]["backlog_bytes"] == 0);
    CHECK(sink.terminate() == 0);
}

}  // namespace tidemark::test
