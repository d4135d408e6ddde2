// bench_fleet (issue 28): what a failover costs a fleet on a three-node nats-server cluster
// (tests/support/nats_cluster.h: JetStream, MQTT, stream_replicas 3). G forwarders (the
// gateways' own adapters/mqtt Forwarder, in this process, each with an outbox of generated
// rows, all three addresses) and one bare QoS1 client (Paho, a new connection to the next node
// at the first failed publish, as an application would) publish to node 0; node 0 is killed.
//   fleet.failover_ms    from the kill to a forwarder's first acknowledged row on another
//                        node, median over the forwarders;
//   fleet.bare_failover_ms  the same for the bare client;
//   fleet.failover_ratio the first over the second, per run; medians over runs.
// Usage: bench_fleet [--runs N] [--gateways G]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "adapters/mqtt/forwarder.h"
#include "firmware/clock.h"
#include "tests/support/broker.h"
#include "tests/support/nats_cluster.h"

namespace {

using Clock = std::chrono::steady_clock;
using tidemark::Result;
using tidemark::mqtt::OutboundRow;

// Rows made on peek(); deleted ones marked. Enough that no forwarder drains it within a run.
class GeneratedOutbox final : public tidemark::mqtt::OutboxSource {
  public:
    GeneratedOutbox(std::string node, uint64_t rows) : node_(std::move(node)), deleted_(rows, 0) {}
    Result<std::vector<OutboundRow>> peek(uint64_t from_seq, size_t limit) override {
        std::vector<OutboundRow> out;
        std::lock_guard lock(mutex_);
        for (uint64_t seq = from_seq; seq < deleted_.size() && out.size() < limit; ++seq) {
            if (deleted_[seq]) continue;
            out.push_back({seq, "tidemark/" + node_ + "/p",
                           "{\"id\":\"" + node_ + "|" + std::to_string(seq) + "\",\"n\":1}",
                           false});
        }
        return out;
    }
    Result<void> delivered(std::span<const uint64_t> seqs) override {
        std::lock_guard lock(mutex_);
        for (uint64_t seq : seqs)
            deleted_[seq] = 1;
        return {};
    }

  private:
    std::string node_;
    std::mutex mutex_;
    std::vector<char> deleted_;
};

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
}

double ms_since(Clock::time_point t) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

struct Run {
    double fleet_ms = 0, bare_ms = 0;
};

Run one_run(int gateways) {
    using namespace tidemark;
    auto cluster = test::NatsCluster::start();
    static const firmware::SystemClock host_clock;
    std::vector<std::unique_ptr<GeneratedOutbox>> outboxes;
    std::vector<std::unique_ptr<mqtt::Forwarder>> forwarders;
    for (int g = 0; g < gateways; ++g) {
        const std::string node = "gw-" + std::to_string(g);
        outboxes.push_back(std::make_unique<GeneratedOutbox>(node, 2'000'000));
        mqtt::ForwarderOptions o;
        o.clock = &host_clock;
        for (int n = 0; n < test::NatsCluster::nodes; ++n)
            o.broker.addresses.push_back({false, "127.0.0.1", cluster.mqtt_port(n)});
        o.broker.client_id = node + "-up";
        o.broker.max_inflight = 16;
        o.broker.config_name = "upstream";
        o.qos = 1;
        o.reconnect_delay_max_ms = 1'500;
        auto f = mqtt::Forwarder::create(o, *outboxes.back());
        if (!f) throw std::runtime_error(f.error().message);
        if (auto ok = (*f)->start(); !ok) throw std::runtime_error(ok.error().message);
        forwarders.push_back(std::move(*f));
    }
    const std::string node0 = cluster.mqtt_uri(0);
    // Every forwarder up on node 0 and acknowledged.
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    while (Clock::now() < deadline) {
        bool all = true;
        for (auto& f : forwarders) {
            const auto s = f->stats();
            all = all && s.link_up && s.node == node0 && s.acks > 100;
        }
        if (all) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }

    // The bare client: publishes QoS1 in a loop; after the kill, the time to its first
    // acknowledged publish on another node.
    std::atomic<bool> killed{false};
    std::atomic<double> bare_ms{-1};
    Clock::time_point kill_at;
    std::thread bare([&] {
        int node = 0;
        std::unique_ptr<test::TestClient> c;
        while (bare_ms.load() < 0) {
            try {
                if (!c)
                    c = std::make_unique<test::TestClient>(
                        test::TestClient::connect(cluster.mqtt_uri(node), "bare-qos1"));
                c->publish("bare/p", "{\"n\":1}", 1);
                if (killed.load() && node != 0) bare_ms = ms_since(kill_at);
            } catch (const std::exception&) {
                c.reset();
                node = (node + 1) % test::NatsCluster::nodes;
            }
        }
    });
    std::this_thread::sleep_for(std::chrono::seconds(2));
    std::vector<uint64_t> acks_at_kill;
    for (auto& f : forwarders)
        acks_at_kill.push_back(f->stats().acks);
    kill_at = Clock::now();
    cluster.kill(0);
    killed = true;
    std::vector<double> failover(forwarders.size(), -1);
    const auto limit = Clock::now() + std::chrono::seconds(90);
    size_t done = 0;
    while (done < forwarders.size() && Clock::now() < limit) {
        for (size_t i = 0; i < forwarders.size(); ++i) {
            if (failover[i] >= 0) continue;
            const auto s = forwarders[i]->stats();
            if (s.link_up && s.node != node0 && s.acks > acks_at_kill[i]) {
                failover[i] = ms_since(kill_at);
                ++done;
            }
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    while (bare_ms.load() < 0 && Clock::now() < limit)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (bare_ms.load() < 0) bare_ms = 1e9;  // ends the thread
    bare.join();
    for (auto& f : forwarders)
        f->stop(std::chrono::milliseconds(1000));
    std::vector<double> got;
    for (double v : failover)
        if (v >= 0) got.push_back(v);
    if (got.size() != failover.size())
        std::fprintf(stderr, "%zu of %zu forwarders did not fail over within 90 s\n",
                     failover.size() - got.size(), failover.size());
    Run r;
    r.fleet_ms = median(got);
    r.bare_ms = bare_ms.load();
    std::printf("  run: fleet.failover_ms median %.0f (min %.0f, max %.0f over %zu), bare %.0f\n",
                r.fleet_ms, got.empty() ? 0.0 : *std::min_element(got.begin(), got.end()),
                got.empty() ? 0.0 : *std::max_element(got.begin(), got.end()), got.size(),
                r.bare_ms);
    std::fflush(stdout);
    return r;
}

}  // namespace

int main(int argc, char** argv) {
    int runs = 3, gateways = 10;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (std::strcmp(argv[i], "--runs") == 0) runs = std::atoi(argv[i + 1]);
        if (std::strcmp(argv[i], "--gateways") == 0) gateways = std::atoi(argv[i + 1]);
    }
    std::vector<double> fleet, bare, ratio;
    for (int r = 0; r < runs; ++r) {
        const Run run = one_run(gateways);
        fleet.push_back(run.fleet_ms);
        bare.push_back(run.bare_ms);
        ratio.push_back(run.bare_ms > 0 ? run.fleet_ms / run.bare_ms : 0);
    }
    std::printf("fleet.failover_ms %.0f\nfleet.bare_failover_ms %.0f\nfleet.failover_ratio %.2f\n",
                median(fleet), median(bare), median(ratio));
    return 0;
}
