// Power-loss copies of the data directory (issue 14). While tidemark runs under load it is
// stopped (SIGSTOP) at random moments and its data directory copied as it is: LMDB commits with
// a full sync, so what the copy holds is what the disk would (a copy taken between a commit's
// page writes and its meta write is LMDB's previous snapshot). Each copy's log then loses a tail
// cut at a random byte after its checkpoint (the unsynced tail a power loss may take: DESIGN.md
// section 5). tidemark must start on every copy, deliver every row of that copy's outbox, and
// never emit a result that contradicts one already in it (same id, or same window and revision,
// with other values).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <filesystem>
#include <random>

#include "adapters/lmdb/store.h"
#include "tests/integration/forwarding/forwarding_support.h"

using namespace tidemark::test;
using namespace tidemark::test::fwd;

namespace {

constexpr int copies = 10;

struct CopyState {
    std::map<std::string, std::string> outbox;  // id -> payload
    uint64_t checkpoint_offset = 0;
};

// The copy's outbox and checkpoint, read as `tidemark inspect` would (read-only).
CopyState read_copy(const std::string& data_dir) {
    tidemark::lmdb::StoreOptions o;
    o.dir = data_dir + "/state";
    o.map_size_bytes = uint64_t{64} << 20;
    o.read_only = true;
    auto store = tidemark::lmdb::Store::open(o);
    if (!store) throw std::runtime_error("copy's store: " + store.error().message);
    CopyState s;
    const std::vector<tidemark::lmdb::OutboxRow> rows = (*store)->outbox_peek(0, 1 << 22).value();
    for (const auto& row : rows)
        if (!row.version_record)  // the retained version record is not a result
            s.outbox[parse_result(row.payload).id] = row.payload;
    auto checkpoint = (*store)->load_checkpoint().value();
    if (checkpoint) s.checkpoint_offset = checkpoint->log_offset;
    return s;
}

// Cuts the newest log segment at a random byte after the checkpoint's offset; returns the bytes
// cut. A compressed segment (storage.log_compression zstd) loses the tail of its stage, the
// frames appended since the last seal, which is what is not durable there (its blocks were
// fdatasynced before the seal's end was durable; a checkpoint follows a seal).
uint64_t cut_log_tail(const std::string& data_dir, uint64_t checkpoint_offset, std::mt19937& rng) {
    std::vector<std::filesystem::path> segments;
    for (const auto& e : std::filesystem::directory_iterator(data_dir + "/log")) {
        const std::string name = e.path().filename().string();
        if (name.ends_with(".log") || name.ends_with(".zlog.stage")) segments.push_back(e.path());
    }
    if (segments.empty()) return 0;
    std::sort(segments.begin(), segments.end());  // by the 20-digit first offset
    const auto& newest = segments.back();
    const uint64_t first = std::stoull(newest.filename().string().substr(0, 20));
    const uint64_t size = std::filesystem::file_size(newest);
    const uint64_t keep_min = checkpoint_offset > first ? checkpoint_offset - first : 0;
    if (keep_min >= size) return 0;
    const uint64_t keep = std::uniform_int_distribution<uint64_t>(keep_min, size)(rng);
    std::filesystem::resize_file(newest, keep);
    return size - keep;
}

using WindowRevision = std::tuple<std::string, std::string, int64_t, int64_t, int64_t>;

WindowRevision window_revision(const fwd::Result& r) {
    return {r.pipeline, r.key, r.start, r.end, r.revision};
}

}  // namespace

TEST_CASE("tidemark starts on power-loss copies of its data and contradicts none of its results",
          "[faults][slow]") {
    TempDir dir("tm-fault-powerloss");
    std::mt19937 rng(std::random_device{}());
    const uint32_t seed = rng();
    INFO("seed " << seed);
    rng.seed(seed);

    Broker gateway = Broker::start();
    TestClient health = TestClient::connect(gateway.uri());
    health.subscribe(health_topic, 1);
    // No upstream listens: every result stays in the outbox, so each copy holds many.
    json config = base_config(dir.path(), gateway, "tcp://127.0.0.1:1");
    config["storage"]["fsync_interval"] = "200ms";
    const std::string config_path = write_config(dir.path(), config);
    Daemon daemon(config_path, daemon_log_path("power_loss_copy"));
    daemon.start();
    INFO("tidemark log: " << daemon.log_path());
    REQUIRE(wait_ready(health, false));

    std::atomic<bool> loading{true};
    std::thread load_thread([&] {
        TestClient publisher = TestClient::connect(gateway.uri());
        Load load(publisher, 20, load_base_ms());
        while (loading.load())
            load.round();
    });
    std::vector<std::string> copy_dirs;
    for (int i = 0; i < copies; ++i) {
        std::this_thread::sleep_for(
            std::chrono::milliseconds(std::uniform_int_distribution<int>(300, 1500)(rng)));
        REQUIRE(::kill(daemon.pid(), SIGSTOP) == 0);
        int status = 0;
        REQUIRE(::waitpid(daemon.pid(), &status, WUNTRACED) == daemon.pid());
        REQUIRE(WIFSTOPPED(status));
        const std::string copy = dir.path() + "/copy" + std::to_string(i);
        std::filesystem::create_directories(copy);
        std::filesystem::copy(dir.path() + "/data", copy + "/data",
                              std::filesystem::copy_options::recursive);
        REQUIRE(::kill(daemon.pid(), SIGCONT) == 0);
        copy_dirs.push_back(copy);
    }
    loading = false;
    load_thread.join();
    REQUIRE(daemon.terminate() == 0);

    size_t rows_checked = 0;
    std::string summary;  // per copy: outbox rows / log bytes cut
    for (int i = 0; i < copies; ++i) {
        const std::string& copy = copy_dirs[i];
        INFO("copy " << i << " in " << copy);
        const CopyState before = read_copy(copy + "/data");
        const uint64_t cut = cut_log_tail(copy + "/data", before.checkpoint_offset, rng);
        INFO("outbox rows " << before.outbox.size() << ", checkpoint at "
                            << before.checkpoint_offset << ", log tail cut by " << cut);

        // A gateway of its own (nothing queued for it) and a reachable upstream.
        Broker gateway_i = Broker::start();
        Broker upstream_i = Broker::start();
        TestClient consumer = TestClient::connect(upstream_i.uri());
        consumer.subscribe("tidemark/#", 1);
        TestClient health_i = TestClient::connect(gateway_i.uri());
        health_i.subscribe(health_topic, 1);
        const std::string config_i =
            write_config(copy, base_config(copy, gateway_i, upstream_i.uri()));
        Daemon copy_daemon(config_i, daemon_log_path("power_loss_copy_" + std::to_string(i)));
        copy_daemon.start();
        INFO("its log: " << copy_daemon.log_path());
        REQUIRE(wait_ready(health_i, true, 30s));
        REQUIRE(wait_until([&] { return health_value(health_i, "/outbox/rows", int64_t{-1}) == 0; },
                           60s));
        // Quiet for a while: the last rows acknowledged have reached the consumer.
        size_t last = consumer.messages().size();
        auto since = std::chrono::steady_clock::now();
        wait_until(
            [&] {
                if (consumer.messages().size() != last) {
                    last = consumer.messages().size();
                    since = std::chrono::steady_clock::now();
                }
                return std::chrono::steady_clock::now() - since >= 1s;
            },
            20s);
        const json end = fresh_health(health_i);
        INFO("health: " << end.dump());
        CHECK(hget(end, "/log/poisoned", true) == false);
        REQUIRE(copy_daemon.terminate() == 0);

        const auto received = received_results(consumer);
        std::map<std::string, std::string> by_id;
        for (const auto& r : received)
            by_id.emplace(r.id, r.payload);
        // Every row of the copy's outbox arrives, as it was.
        for (const auto& [id, payload] : before.outbox) {
            auto it = by_id.find(id);
            INFO("outbox row " << payload);
            REQUIRE(it != by_id.end());
            CHECK(it->second == payload);
        }
        // Nothing emitted after the restart contradicts what the copy had already decided.
        std::map<WindowRevision, std::string> decided;
        for (const auto& [id, payload] : before.outbox) {
            const auto r = parse_result(payload);
            decided.emplace(window_revision(r), r.kind + " " + r.values.dump());
        }
        for (const auto& r : received) {
            auto it = decided.find(window_revision(r));
            if (it == decided.end()) continue;
            INFO("received " << r.payload);
            CHECK(it->second == r.kind + " " + r.values.dump());
        }
        CHECK(conflicting_duplicates(received).empty());
        rows_checked += before.outbox.size();
        summary += " " + std::to_string(before.outbox.size()) + "/" + std::to_string(cut);
    }
    CHECK(rows_checked > 0);
    WARN("outbox rows / log bytes cut per copy:" << summary);
}
