// bench_forward: how fast the forwarder drains a backlog after an outage, from the LMDB outbox
// and from memory, against QoS0.
//
// Starts its own mosquitto on 127.0.0.1 (a free port, no persistence), then --pairs times (3):
//  1. the whole outbox (--rows, default 1M rows of ~240 byte JSON) drained at QoS1, rows deleted
//     on PUBACK, first ack -> last delete, once from tidemark's own LMDB store (the daemon's
//     outbox: under $TIDEMARK_BUILD_DIR or /var/tmp, so that its fsyncs reach a disk; filled
//     before the drain, untimed) and once from rows generated in memory (the forwarder and the
//     broker alone), the two in alternating order; the very first drain starts with the broker
//     down for --outage-ms: forward.first_row_ms = broker accepting connections -> first
//     PUBACKed row;
//  2. the same rows through the same forwarder at QoS0, same broker (the baseline);
//  3. the CPU each side spent per row (the broker's from /proc/PID/stat, ours from getrusage):
//     both are bound by the broker's one thread, so broker CPU per QoS0 row / broker CPU per
//     QoS1 row is the best drain / QoS0 ratio any client could reach against this broker here.
// Figures are medians over the pairs: forward.drain_rows_per_s (LMDB), forward.ratio = drain /
// QoS0, forward.ratio_ceiling, forward.ratio_to_ceiling = ratio / ratio_ceiling, and
// forward.store_ratio = LMDB drain / memory drain of the same pair.
// Usage: bench_forward [--rows N] [--max-inflight N] [--outage-ms N] [--pairs N]
//                      [--outbox both|lmdb|memory] [--delete-batch N]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "adapters/lmdb/store.h"
#include "adapters/mqtt/forwarder.h"
#include "firmware/clock.h"

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using tidemark::Result;
using tidemark::mqtt::OutboundRow;

double seconds_between(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
}

pid_t broker_pid = -1;  // stopped by die(): an orphaned broker would hold our output pipe

[[noreturn]] void die(const std::string& message) {
    std::fprintf(stderr, "bench_forward: %s\n", message.c_str());
    if (broker_pid > 0) {
        ::kill(broker_pid, SIGTERM);
        ::waitpid(broker_pid, nullptr, 0);
    }
    std::exit(1);
}

int free_port() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) die("bind failed");
    socklen_t len = sizeof addr;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    ::close(fd);
    return ntohs(addr.sin_port);
}

bool port_open(int port) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    ::close(fd);
    return ok;
}

// A mosquitto of our own: the bench must not depend on the test support library.
class Mosquitto {
  public:
    explicit Mosquitto(int port) : port_(port) {
        dir_ = std::filesystem::temp_directory_path() /
               ("bench_forward." + std::to_string(::getpid()));
        std::filesystem::create_directories(dir_);
        conf_ = (dir_ / "mosquitto.conf").string();
        std::ofstream(conf_) << "listener " << port << " 127.0.0.1\n"
                             << "allow_anonymous true\npersistence false\n"
                             << "max_queued_messages 0\nlog_type error\n";
    }
    ~Mosquitto() {
        stop();
        std::filesystem::remove_all(dir_);
    }
    // Returns when the port accepts connections.
    Clock::time_point start() {
        const char* argv[] = {"mosquitto", "-c", conf_.c_str(), nullptr};
        if (::posix_spawnp(&pid_, "mosquitto", nullptr, nullptr, const_cast<char**>(argv),
                           environ) != 0) {
            die("cannot start mosquitto (apt-get install mosquitto)");
        }
        broker_pid = pid_;
        const auto deadline = Clock::now() + 10s;
        while (!port_open(port_)) {
            if (Clock::now() > deadline) die("mosquitto did not open its port");
            std::this_thread::sleep_for(1ms);
        }
        return Clock::now();
    }
    // CPU seconds the broker process has used so far (user + system).
    double cpu_s() const {
        std::ifstream stat("/proc/" + std::to_string(pid_) + "/stat");
        std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
        // Fields after the command name, which is in parentheses and may hold spaces.
        std::istringstream rest(text.substr(text.rfind(')') + 2));
        std::string field;
        unsigned long long utime = 0, stime = 0;
        for (int i = 3; i <= 15 && rest >> field; ++i) {
            if (i == 14) utime = std::stoull(field);
            if (i == 15) stime = std::stoull(field);
        }
        return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
    }
    void stop() {
        if (pid_ <= 0) return;
        ::kill(pid_, SIGTERM);
        ::waitpid(pid_, nullptr, 0);
        pid_ = -1;
        broker_pid = -1;
    }

  private:
    int port_;
    pid_t pid_ = -1;
    std::filesystem::path dir_;
    std::string conf_;
};

// An outbox of `rows` generated rows; deleting marks them. Rows are made on peek() so that a
// million rows do not need ~300 MB of strings.
class MemoryOutbox final : public tidemark::mqtt::OutboxSource {
  public:
    explicit MemoryOutbox(uint64_t rows) : deleted_(rows, 0) {}

    Result<std::vector<OutboundRow>> peek(uint64_t from_seq, size_t limit) override {
        std::vector<OutboundRow> out;
        std::lock_guard lock(mutex_);
        while (first_live_ < deleted_.size() && deleted_[first_live_])
            ++first_live_;
        for (uint64_t seq = std::max(from_seq, first_live_);
             seq < deleted_.size() && out.size() < limit; ++seq) {
            if (!deleted_[seq]) out.push_back(make_row(seq));
        }
        return out;
    }
    Result<void> delivered(std::span<const uint64_t> seqs) override {
        std::lock_guard lock(mutex_);
        for (uint64_t seq : seqs) {
            if (!deleted_[seq]) {
                deleted_[seq] = 1;
                ++deleted_count_;
                if (deleted_count_ == deleted_.size()) last_delete_at_ = Clock::now();
            }
        }
        return {};
    }

    bool drained() const {
        std::lock_guard lock(mutex_);
        return deleted_count_ == deleted_.size();
    }
    uint64_t deleted() const {
        std::lock_guard lock(mutex_);
        return deleted_count_;
    }
    Clock::time_point last_delete_at() const {
        std::lock_guard lock(mutex_);
        return last_delete_at_;
    }

    static OutboundRow make_row(uint64_t seq) {
        char payload[256];
        const int n = std::snprintf(
            payload, sizeof payload,
            R"({"id":"%016llx","node":"gw-01","pipeline":"room_temp_1m","key":"dev-%llu",)"
            R"("window":{"start":%llu,"end":%llu},"kind":"final","revision":0,)"
            R"("closed_by":"watermark","values":{"avg":21.4,"n":60},"watermark":%llu})",
            static_cast<unsigned long long>(seq * 0x9E3779B97F4A7C15ULL),
            static_cast<unsigned long long>(seq % 1000),
            static_cast<unsigned long long>(1764400000000ULL + seq / 1000 * 60000),
            static_cast<unsigned long long>(1764400060000ULL + seq / 1000 * 60000),
            static_cast<unsigned long long>(1764400065000ULL + seq / 1000 * 60000));
        return OutboundRow{seq, "tidemark/gw-01/room_temp_1m",
                           std::string(payload, static_cast<size_t>(n))};
    }

  private:
    mutable std::mutex mutex_;
    std::vector<uint8_t> deleted_;
    uint64_t first_live_ = 0;
    uint64_t deleted_count_ = 0;
    Clock::time_point last_delete_at_;
};

// The outbox as the daemon has it: rows in LMDB, deleted in batches on PUBACK (fsync each).
class LmdbOutbox final : public tidemark::mqtt::OutboxSource {
  public:
    explicit LmdbOutbox(uint64_t rows) : rows_(rows) {
        const char* base = std::getenv("TIDEMARK_BUILD_DIR");
        dir_ = std::string(base ? base : "/var/tmp") + "/bench-forward-" +
               std::to_string(::getpid()) + "-" + std::to_string(instance_++);
        std::filesystem::remove_all(dir_);
        tidemark::lmdb::StoreOptions options;
        options.dir = dir_;
        options.map_size_bytes = (rows * 600 + (64 << 20)) * 2;
        options.outbox_bytes_max = options.map_size_bytes / 2;
        options.compact_superseded = false;
        auto store = tidemark::lmdb::Store::open(options);
        if (!store) die("cannot open the LMDB outbox in " + dir_ + ": " + store.error().message);
        store_ = std::move(*store);
        // Appended in the daemon's way: batches in one transaction each.
        std::vector<tidemark::lmdb::OutboxRow> batch;
        for (uint64_t seq = 0; seq < rows; ++seq) {
            const OutboundRow generated = MemoryOutbox::make_row(seq);
            tidemark::lmdb::OutboxRow row;
            row.id = seq * 0x9E3779B97F4A7C15ULL + 1;
            row.pipeline = "room_temp_1m";
            row.key = "dev-" + std::to_string(seq % 1000);
            row.window_start_ms = static_cast<int64_t>(1764400000000ULL + seq / 1000 * 60000);
            row.window_end_ms = row.window_start_ms + 60000;
            row.payload = generated.payload;
            row.enqueued_ms = 1;
            batch.push_back(std::move(row));
            if (batch.size() == 10'000 || seq + 1 == rows) {
                if (auto ok = store_->outbox_append(batch); !ok) die(ok.error().message);
                batch.clear();
            }
        }
    }
    ~LmdbOutbox() override {
        store_.reset();
        std::filesystem::remove_all(dir_);
    }
    Result<std::vector<OutboundRow>> peek(uint64_t from_seq, size_t limit) override {
        auto rows = store_->outbox_peek(from_seq, limit);
        if (!rows) return tidemark::fail(rows.error().message);
        std::vector<OutboundRow> out;
        out.reserve(rows->size());
        for (auto& r : *rows)
            out.push_back({r.seq, "tidemark/gw-01/" + r.pipeline, std::move(r.payload)});
        return out;
    }
    Result<void> delivered(std::span<const uint64_t> seqs) override {
        if (auto ok = store_->outbox_delete(seqs); !ok) return tidemark::fail(ok.error().message);
        std::lock_guard lock(mutex_);
        deleted_ += seqs.size();  // the forwarder never acknowledges a row twice here
        if (deleted_ >= rows_) last_delete_at_ = Clock::now();
        return {};
    }

    bool drained() const {
        std::lock_guard lock(mutex_);
        return deleted_ >= rows_;
    }
    uint64_t deleted() const {
        std::lock_guard lock(mutex_);
        return deleted_;
    }
    Clock::time_point last_delete_at() const {
        std::lock_guard lock(mutex_);
        return last_delete_at_;
    }

  private:
    static inline int instance_ = 0;
    uint64_t rows_;
    std::string dir_;
    std::unique_ptr<tidemark::lmdb::Store> store_;
    mutable std::mutex mutex_;
    uint64_t deleted_ = 0;
    Clock::time_point last_delete_at_;
};

size_t delete_batch_rows = tidemark::mqtt::ForwarderOptions{}.delete_batch_rows;

tidemark::mqtt::ForwarderOptions forwarder_options(int port, int qos, int max_inflight,
                                                   const std::string& client_id) {
    static const tidemark::firmware::SystemClock host_clock;
    tidemark::mqtt::ForwarderOptions options;
    options.clock = &host_clock;
    options.delete_batch_rows = delete_batch_rows;
    options.broker.addresses = {{false, "127.0.0.1", port}};
    options.broker.client_id = client_id;
    options.broker.max_inflight = max_inflight;
    options.broker.config_name = "upstream";
    options.qos = qos;
    return options;
}

struct Drain {
    double rows_per_s = 0;
    double first_row_ms = 0;
    double first_row_after_connect_ms = 0;
    double broker_cpu_us_per_row = 0;
    double client_cpu_us_per_row = 0;
};

double own_cpu_s() {
    rusage usage{};
    ::getrusage(RUSAGE_SELF, &usage);
    auto seconds = [](const timeval& t) {
        return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6;
    };
    return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

// Runs one forwarder over a fresh outbox of `rows`; when `outage` is set the broker is down at
// start and comes back after outage_ms.
template <typename Outbox>
Drain drain(Mosquitto& broker, int port, uint64_t rows, int qos, int max_inflight,
            std::chrono::milliseconds outage) {
    Outbox outbox(rows);
    auto forwarder = tidemark::mqtt::Forwarder::create(
        forwarder_options(port, qos, max_inflight, "bench-forward-qos" + std::to_string(qos)),
        outbox);
    if (!forwarder) die(forwarder.error().message);
    Clock::time_point available;
    if (outage.count() > 0) {
        broker.stop();
        if (auto ok = (*forwarder)->start(); !ok) die(ok.error().message);
        std::this_thread::sleep_for(outage);
        available = broker.start();
    } else {
        available = Clock::now();
        if (auto ok = (*forwarder)->start(); !ok) die(ok.error().message);
    }
    // first_row_after_reconnect_ms counts from the connect; we want from broker availability.
    Clock::time_point first_ack{};
    double broker_cpu_at_first_ack = 0;
    double own_cpu_at_first_ack = 0;
    const auto deadline = Clock::now() + std::chrono::seconds(30 + rows / 2000);
    while (!outbox.drained()) {
        if (first_ack == Clock::time_point{} && (*forwarder)->stats().acks > 0) {
            first_ack = Clock::now();
            broker_cpu_at_first_ack = broker.cpu_s();
            own_cpu_at_first_ack = own_cpu_s();
        }
        if (Clock::now() > deadline) {
            const auto stuck = (*forwarder)->stats();
            die("drain did not finish: " + std::to_string(outbox.deleted()) + " of " +
                std::to_string(rows) + " rows deleted; sends " + std::to_string(stuck.sends) +
                ", acks " + std::to_string(stuck.acks) + ", inflight " +
                std::to_string(stuck.inflight) + ", link " + (stuck.link_up ? "up" : "down") +
                "; last error: " + stuck.last_error);
        }
        std::this_thread::sleep_for(first_ack == Clock::time_point{} ? 1ms : 10ms);
    }
    const double broker_cpu_s = broker.cpu_s() - broker_cpu_at_first_ack;
    const double own_cpu = own_cpu_s() - own_cpu_at_first_ack;
    const auto stats = (*forwarder)->stats();
    (*forwarder)->stop(2s);
    Drain result;
    result.broker_cpu_us_per_row = broker_cpu_s * 1e6 / static_cast<double>(rows);
    result.client_cpu_us_per_row = own_cpu * 1e6 / static_cast<double>(rows);
    result.first_row_after_connect_ms =
        static_cast<double>(stats.first_row_after_reconnect_ms.value_or(-1));
    result.first_row_ms = std::chrono::duration<double, std::milli>(first_ack - available).count();
    // The drain rate is taken from the first acknowledgement: the wait before it (backoff) is
    // first_row_ms.
    result.rows_per_s =
        static_cast<double>(rows) / seconds_between(first_ack, outbox.last_delete_at());
    std::fprintf(stderr,
                 "qos%d max_inflight %d: %llu rows, sends %llu, acks %llu, reconnects %llu, "
                 "first ack %.1f ms after the broker came up (%lld ms after connect)\n",
                 qos, max_inflight, static_cast<unsigned long long>(rows),
                 static_cast<unsigned long long>(stats.sends),
                 static_cast<unsigned long long>(stats.acks),
                 static_cast<unsigned long long>(stats.reconnects), result.first_row_ms,
                 static_cast<long long>(stats.first_row_after_reconnect_ms.value_or(-1)));
    return result;
}

double median(std::vector<double> values) {
    std::sort(values.begin(), values.end());
    const size_t n = values.size();
    return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
    uint64_t rows = 1'000'000;
    int max_inflight = 64;
    int64_t outage_ms = 3000;
    int pairs = 3;
    std::string outbox_kind = "both";
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        auto value = [&]() -> long long {
            if (i + 1 >= argc) die(arg + " needs a value");
            return std::atoll(argv[++i]);
        };
        if (arg == "--rows")
            rows = static_cast<uint64_t>(value());
        else if (arg == "--max-inflight")
            max_inflight = static_cast<int>(value());
        else if (arg == "--outage-ms")
            outage_ms = value();
        else if (arg == "--delete-batch")
            delete_batch_rows = static_cast<size_t>(value());
        else if (arg == "--pairs")
            pairs = static_cast<int>(value());
        else if (arg == "--outbox" && i + 1 < argc)
            outbox_kind = argv[++i];
        else
            die("unknown argument " + arg +
                " (use --rows N, --max-inflight N, --outage-ms N, --outbox both|lmdb|memory, "
                "--delete-batch N, --pairs N)");
    }
    if (rows == 0 || max_inflight < 1 || pairs < 1)
        die("--rows, --max-inflight and --pairs must be positive");
    if (outbox_kind != "both" && outbox_kind != "lmdb" && outbox_kind != "memory")
        die("--outbox is both, lmdb or memory");
    const bool with_lmdb = outbox_kind != "memory";
    const bool with_memory = outbox_kind != "lmdb";
    ::signal(SIGPIPE, SIG_IGN);

    const int port = free_port();
    Mosquitto broker(port);
    broker.start();

    std::fprintf(stderr,
                 "bench_forward: %llu rows of ~%zu bytes, max_inflight %d, outage %lld ms, "
                 "outbox %s, %d pairs\n",
                 static_cast<unsigned long long>(rows), MemoryOutbox::make_row(0).payload.size(),
                 max_inflight, static_cast<long long>(outage_ms), outbox_kind.c_str(), pairs);
    // Each pair: the two QoS1 drains, in alternating order (so that neither always runs on a
    // warmer broker or page cache), then the QoS0 baseline. The first drain of all starts with
    // the outage. The outbox's rows go in before its drain starts and are not timed.
    std::vector<double> lmdb_rate, memory_rate, qos0_rate, store_ratio, ceiling, to_ceiling;
    std::vector<double> broker_us_qos1, broker_us_qos0, client_us_lmdb, client_us_memory,
        client_us_qos0;
    Drain first{};
    bool first_done = false;
    for (int pair = 0; pair < pairs; ++pair) {
        Drain lmdb{}, memory{};
        for (int turn = 0; turn < 2; ++turn) {
            const bool lmdb_turn = (turn == 0) == (pair % 2 == 0);
            if (lmdb_turn ? !with_lmdb : !with_memory) continue;
            const auto outage = first_done ? 0ms : std::chrono::milliseconds(outage_ms);
            const Drain d = lmdb_turn
                                ? drain<LmdbOutbox>(broker, port, rows, 1, max_inflight, outage)
                                : drain<MemoryOutbox>(broker, port, rows, 1, max_inflight, outage);
            if (!first_done) first = d;
            first_done = true;
            (lmdb_turn ? lmdb : memory) = d;
        }
        const Drain qos0 = drain<MemoryOutbox>(broker, port, rows, 0, max_inflight, 0ms);
        const Drain& qos1 = with_lmdb ? lmdb : memory;
        qos0_rate.push_back(qos0.rows_per_s);
        broker_us_qos0.push_back(qos0.broker_cpu_us_per_row);
        client_us_qos0.push_back(qos0.client_cpu_us_per_row);
        broker_us_qos1.push_back(qos1.broker_cpu_us_per_row);
        // The best drain / QoS0 ratio any client could reach against this broker here.
        ceiling.push_back(qos0.broker_cpu_us_per_row / qos1.broker_cpu_us_per_row);
        to_ceiling.push_back(qos1.rows_per_s / qos0.rows_per_s / ceiling.back());
        if (with_lmdb) {
            lmdb_rate.push_back(lmdb.rows_per_s);
            client_us_lmdb.push_back(lmdb.client_cpu_us_per_row);
        }
        if (with_memory) {
            memory_rate.push_back(memory.rows_per_s);
            client_us_memory.push_back(memory.client_cpu_us_per_row);
        }
        if (with_lmdb && with_memory) store_ratio.push_back(lmdb.rows_per_s / memory.rows_per_s);
        std::fprintf(stderr,
                     "pair %d: lmdb %.0f rows/s, memory %.0f rows/s, qos0 %.0f msgs/s, "
                     "store_ratio %.3f, ceiling %.2f, to_ceiling %.2f\n",
                     pair + 1, lmdb.rows_per_s, memory.rows_per_s, qos0.rows_per_s,
                     store_ratio.empty() ? 0.0 : store_ratio.back(), ceiling.back(),
                     to_ceiling.back());
    }
    broker.stop();

    // Medians over the pairs; the drain figures are the LMDB outbox's (the daemon's) unless
    // --outbox memory.
    const double drain_rate = median(with_lmdb ? lmdb_rate : memory_rate);
    const double qos0 = median(qos0_rate);
    std::printf("forward.pairs: %d pairs\n", pairs);
    std::printf("forward.drain_rows_per_s: %.0f rows/s\n", drain_rate);
    if (with_memory)
        std::printf("forward.memory_drain_rows_per_s: %.0f rows/s\n", median(memory_rate));
    std::printf("forward.qos0_msgs_per_s: %.0f msgs/s\n", qos0);
    std::printf("forward.ratio: %.2f ratio\n", drain_rate / qos0);
    std::printf("forward.first_row_ms: %.0f ms\n", first.first_row_ms);
    std::printf("forward.first_row_after_connect_ms: %.0f ms\n", first.first_row_after_connect_ms);
    std::printf("forward.broker_cpu_us_per_row_qos1: %.1f us\n", median(broker_us_qos1));
    std::printf("forward.broker_cpu_us_per_row_qos0: %.1f us\n", median(broker_us_qos0));
    if (with_lmdb)
        std::printf("forward.client_cpu_us_per_row_lmdb: %.1f us\n", median(client_us_lmdb));
    if (with_memory)
        std::printf("forward.client_cpu_us_per_row_memory: %.1f us\n", median(client_us_memory));
    std::printf("forward.client_cpu_us_per_row_qos0: %.1f us\n", median(client_us_qos0));
    std::printf("forward.ratio_ceiling: %.2f ratio\n", median(ceiling));
    std::printf("forward.ratio_to_ceiling: %.2f ratio\n", median(to_ceiling));
    if (with_lmdb && with_memory)
        std::printf("forward.store_ratio: %.3f ratio\n", median(store_ratio));
    return 0;
}
