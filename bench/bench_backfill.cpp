// Backfill beside live ingest (DESIGN.md section 4, issue 13): a new pipeline backfills the
// history in the log while live records arrive, through the engine host the service runs
// (EngineHost: real log and LMDB store in a temp dir, no broker).
//
// Phases, in one process and one data dir:
// 0. History: --hours H (default 6) at --rate R messages/s (default 100) from --devices D
//    (default 10k) written straight into the log, event time = ingest time, in the past; then
//    pipeline A (tumbling 1m count/mean/max per device) runs over it (recover) and checkpoints.
// 1. Baseline: config A only; a feeder thread appends live records at --live-rate (default
//    1000/s, ingest time = wall now) for --baseline-s seconds (default 20) while an engine loop of
//    runtime.cpp's shape (step 4096, backfill_step 4096, checkpoint every 10 s, sleep 20 ms idle
//    or 2 ms while a backfill waits for its share) processes them. Live delay of a record = steady
//    time from its append to the end of the step() that committed its results.
// 2. Backfill: config A + pipeline B (a new pipeline: tumbling 5m count/mean/p95), so B
//    backfills the whole log while the same live feed runs, until --after-s (default 15) past
//    B's switch. Delays are split at the switch: records appended before it, and after it.
// 3. Replay: `tidemark replay` (replay_command) of pipeline B over the same log, out /dev/null,
//    --replays N runs (default 3), median. busy_vs_replay, cpu_vs_replay and
//    wall_vs_share_replay (issue 31) put the backfill's rates against replay's: over the steady
//    time of its slices (reading and committing), over the engine thread's CPU time in them,
//    and over the wall time to the switch (against max_share x replay's).
// A drain thread deletes outbox rows as the forwarder does on PUBACK, so the outbox stays small.
// fsync `never`: step() then reads up to the written end, so the delays are the engine's, not
// the fsync interval's (with `interval` a live record also waits up to storage.fsync_interval).
// The rates do not depend on the history's length; --hours 720 is the issue's 30 days (not run).
// --history-ratio runs phase 0 alone for 1 h and --hours H, --runs times (default 3), and prints
// history.rate_ratio_<H>h_1h: it was 0.53 at 8 h while the outbox's id index was keyed by the id
// alone (store format 7, issue 31; docs/BENCHMARKS.md "history").
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "adapters/config/config.h"
#include "adapters/log/log_reader.h"
#include "bench/proc_io.h"
#include "firmware/clock.h"
#include "firmware/commands/command_replay.h"
#include "firmware/service/alarms.h"
#include "firmware/service/engine_host.h"

namespace {

using namespace tidemark;
using Steady = std::chrono::steady_clock;

constexpr size_t step_records_max = 4096;       // runtime.cpp's
constexpr size_t backfill_records_max = 65536;  // runtime.cpp's
constexpr auto idle_sleep = std::chrono::milliseconds(20);
constexpr auto backfill_wait_sleep = std::chrono::milliseconds(2);

struct Options {
    double hours = 6;
    uint64_t rate = 100;
    uint64_t devices = 10'000;
    uint64_t live_rate = 1000;
    double baseline_s = 20;
    double after_s = 15;
    double share = 0.5;
    int replays = 3;  // runs of phase 3; the median is replay's rate
};

void die(const std::string& message) {
    std::fprintf(stderr, "bench_backfill: %s\n", message.c_str());
    std::exit(1);
}

const char* pipeline_a = R"({"name": "dev_1m", "topic": "sensors/+/telemetry", "key": "topic:1",
    "timestamp": {"pointer": "/ts", "format": "epoch_ms"}, "fields": {"v": "/v"},
    "window": {"type": "tumbling", "size": "1m"},
    "watermark": {"delay": "5s", "idle_timeout": "1m", "scope": "global"},
    "aggregates": {"n": {"fn": "count"}, "avg": {"fn": "mean", "field": "v"},
                   "max": {"fn": "max", "field": "v"}},
    "limits": {"max_keys": 20000, "max_open_windows": 200000}})";
const char* pipeline_b = R"({"name": "dev_5m_p95", "topic": "sensors/+/telemetry", "key": "topic:1",
    "timestamp": {"pointer": "/ts", "format": "epoch_ms"}, "fields": {"v": "/v"},
    "window": {"type": "tumbling", "size": "5m"},
    "watermark": {"delay": "5s", "idle_timeout": "1m", "scope": "global"},
    "aggregates": {"n": {"fn": "count"}, "avg": {"fn": "mean", "field": "v"},
                   "p95": {"fn": "quantile", "field": "v", "q": 0.95}},
    "limits": {"max_keys": 20000, "max_open_windows": 200000}})";

std::string config_text(const std::string& dir, bool with_b, double share) {
    char share_text[32];
    std::snprintf(share_text, sizeof share_text, "%g", share);
    return std::string(R"({"node_id": "bench", "data_dir": ")") + dir + R"(",
  "storage": {"map_size": "4GiB", "fsync": "never",
              "log_retention": {"max_age": "400d", "max_bytes": "1TiB"}},
  "checkpoint": {"interval": "10s"},
  "source": {"uri": "tcp://127.0.0.1:1883"},
  "backfill": {"max_share": )" +
           share_text + R"(, "max_live_delay": "200ms"},
  "pipelines": [)" +
           pipeline_a + (with_b ? std::string(", ") + pipeline_b : std::string()) + "]}";
}

config::Config parse(const std::string& text, const std::string& dir) {
    auto c = config::parse_config(text, dir);
    if (!c) die(config::format_errors(c.error()));
    return std::move(*c);
}

void payload_of(std::string& out, int64_t ts_ms, uint64_t i) {
    char buf[96];
    const uint64_t x = (i * 2654435761u) % 1500;  // 15.00 .. 29.99, spread over devices
    const int n = std::snprintf(
        buf, sizeof buf, "{\"ts\":%lld,\"v\":%llu.%02llu}", static_cast<long long>(ts_ms),
        static_cast<unsigned long long>(15 + x / 100), static_cast<unsigned long long>(x % 100));
    out.assign(buf, static_cast<size_t>(n));
}

std::string topic_of(uint64_t device) {
    return "sensors/dev-" + std::to_string(device) + "/telemetry";
}

// Deletes outbox rows as the forwarder does on PUBACK (Store methods are safe from any thread).
class Drain {
  public:
    explicit Drain(lmdb::Store& store) : store_(store), thread_([this] { run(); }) {}
    ~Drain() {
        stop_ = true;
        thread_.join();
    }
    uint64_t rows() const { return rows_.load(); }

  private:
    void run() {
        uint64_t from = 0;
        std::vector<uint64_t> seqs;
        while (!stop_) {
            auto rows = store_.outbox_peek(from, 4096);
            if (!rows) die("outbox_peek: " + rows.error().message);
            if (rows->empty()) {
                std::this_thread::sleep_for(std::chrono::milliseconds(5));
                continue;
            }
            seqs.clear();
            for (const auto& r : *rows)
                seqs.push_back(r.seq);
            from = seqs.back() + 1;
            if (auto ok = store_.outbox_delete(seqs); !ok)
                die("outbox_delete: " + ok.error().message);
            rows_ += seqs.size();
        }
    }
    lmdb::Store& store_;
    std::atomic<bool> stop_{false};
    std::atomic<uint64_t> rows_{0};
    std::thread thread_;
};

// Appends live records at `rate`/s with ingest time = wall now, noting each one's offset and
// steady append time.
class Feeder {
  public:
    Feeder(log::LogWriter& log, const core::Clock& clock, uint64_t rate, uint64_t devices)
        : log_(log), clock_(clock), rate_(rate), devices_(devices), thread_([this] { run(); }) {}
    ~Feeder() { stop(); }
    void stop() {
        stop_ = true;
        if (thread_.joinable()) thread_.join();
    }
    struct Sent {
        uint64_t offset;
        Steady::time_point at;
    };
    // Appended records not yet taken, in offset order.
    void take(std::vector<Sent>& out) {
        std::lock_guard lock(mutex_);
        out.insert(out.end(), sent_.begin(), sent_.end());
        sent_.clear();
    }
    uint64_t appended() const { return appended_.load(); }

  private:
    void run() {
        const auto t0 = Steady::now();
        std::string topic, payload;
        uint64_t i = 0;
        while (!stop_) {
            const double elapsed = std::chrono::duration<double>(Steady::now() - t0).count();
            const auto due = static_cast<uint64_t>(elapsed * static_cast<double>(rate_));
            for (; i < due && !stop_; ++i) {
                const int64_t now_ms = clock_.wall_ms();
                topic = topic_of(i % devices_);
                payload_of(payload, now_ms, i);
                auto offset = log_.append(log::RecordType::message, now_ms, topic, payload);
                if (!offset) die("live append: " + offset.error().message);
                const auto at = Steady::now();
                std::lock_guard lock(mutex_);
                sent_.push_back({*offset, at});
                ++appended_;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
    }
    log::LogWriter& log_;
    const core::Clock& clock_;
    uint64_t rate_, devices_;
    std::mutex mutex_;
    std::vector<Sent> sent_;
    std::atomic<bool> stop_{false};
    std::atomic<uint64_t> appended_{0};
    std::thread thread_;
};

std::unique_ptr<firmware::EngineHost> open_host(const config::Config& c, const core::Clock& clock,
                                                firmware::Alarms& alarms) {
    auto host = firmware::EngineHost::open(c, clock, alarms);
    if (!host) die("open: " + host.error().message);
    auto recovered = (*host)->recover([] {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        return true;
    });
    if (!recovered) die("recover: " + recovered.error().message);
    return std::move(*host);
}

double percentile(std::vector<double> v, double q) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const size_t i = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())));
    return v[i];
}

struct LiveRun {
    std::vector<double> delays_ms;        // records appended before the switch (or all)
    std::vector<double> after_delays_ms;  // records appended after the switch
    uint64_t live_records = 0;
    double feed_s = 0;
    // Backfill figures (backfill run only).
    uint64_t backfill_records = 0;
    double backfill_wall_s = 0;
    double busy_records_per_s = 0;  // over its slices' steady time, commits included
    double cpu_records_per_s = 0;   // over the engine thread's CPU time in its slices
    double switch_step_ms = 0;      // the backfill_step() that switched: a checkpoint and a restore
    bool switched = false;
    // Where the engine thread's time went: the longest call of each kind, and checkpoints.
    double step_max_ms = 0, backfill_step_max_ms = 0;
    // Until the switch: in backfill_step() (slices and their outbox commits), and asleep.
    double backfill_step_total_ms = 0, sleep_total_ms = 0;
    std::string checkpoints_ms;  // each in the loop, "B" while a backfill ran
    int backfill_steps_over_200_ms = 0;
};

double ms_between(Steady::time_point a, Steady::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
}

// runtime.cpp's loop. With `until_switch`, feeds until --after-s past the backfill's switch (or
// `limit_s`); else for --baseline-s. Then stops the feeder and steps until every live record is
// processed.
LiveRun run_live(firmware::EngineHost& host, const core::Clock& clock, const Options& o,
                 bool until_switch, double limit_s) {
    LiveRun out;
    Drain drain(host.store());
    Feeder feeder(host.log(), clock, o.live_rate, o.devices);
    const auto t0 = Steady::now();
    auto next_checkpoint = t0 + std::chrono::seconds(10);
    std::vector<Feeder::Sent> pending;
    size_t pending_at = 0;
    bool feeding = true;
    Steady::time_point backfill_t0{};
    Steady::time_point switch_end = Steady::time_point::max();
    for (;;) {
        const auto now = Steady::now();
        const double elapsed = std::chrono::duration<double>(now - t0).count();
        const bool fed_enough =
            until_switch ? (out.switched && ms_between(switch_end, now) >= o.after_s * 1000) ||
                               elapsed >= limit_s
                         : elapsed >= o.baseline_s;
        if (feeding && fed_enough) {
            feeder.stop();
            feeding = false;
            out.feed_s = elapsed;
        }
        auto step = host.step(step_records_max, false);
        if (!step) die("step: " + step.error().message);
        const auto stepped = Steady::now();
        out.step_max_ms = std::max(out.step_max_ms, ms_between(now, stepped));
        feeder.take(pending);
        const uint64_t consumed = host.consumed_offset();
        while (pending_at < pending.size() && pending[pending_at].offset < consumed) {
            const Feeder::Sent& sent = pending[pending_at];
            (sent.at < switch_end ? out.delays_ms : out.after_delays_ms)
                .push_back(ms_between(sent.at, stepped));
            ++pending_at;
        }
        const bool was_backfilling = host.backfilling();
        if (was_backfilling) {
            const auto figures = host.backfill_figures();
            if (!figures.empty()) {
                out.busy_records_per_s = figures.front().busy_records_per_s;
                out.cpu_records_per_s = figures.front().cpu_records_per_s;
            }
            if (backfill_t0 == Steady::time_point{}) backfill_t0 = Steady::now();
        }
        const auto b0 = Steady::now();
        auto backfilled = host.backfill_step(backfill_records_max);
        if (!backfilled) die("backfill_step: " + backfilled.error().message);
        out.backfill_records += *backfilled;
        const auto b1 = Steady::now();
        if (!was_backfilling || host.backfilling()) {
            out.backfill_step_max_ms = std::max(out.backfill_step_max_ms, ms_between(b0, b1));
            if (ms_between(b0, b1) > 200) ++out.backfill_steps_over_200_ms;
            if (was_backfilling) out.backfill_step_total_ms += ms_between(b0, b1);
        }
        if (was_backfilling && !host.backfilling()) {
            out.switched = true;
            out.switch_step_ms = ms_between(b0, b1);
            switch_end = b1;
            out.backfill_wall_s = std::chrono::duration<double>(b1 - backfill_t0).count();
        }
        if (now >= next_checkpoint && host.can_checkpoint()) {
            const auto c0 = Steady::now();
            if (auto ok = host.checkpoint(); !ok) die("checkpoint: " + ok.error().message);
            char text[32];
            std::snprintf(text, sizeof text, " %.0f%s", ms_between(c0, Steady::now()),
                          host.backfilling() ? "B" : "");
            out.checkpoints_ms += text;
            next_checkpoint = now + std::chrono::seconds(10);
        }
        if (!feeding && pending_at == pending.size() && feeder.appended() == pending.size()) break;
        if (*step == 0 && *backfilled == 0) {
            const bool waiting = host.backfilling();
            const auto s0 = Steady::now();
            std::this_thread::sleep_for(waiting ? backfill_wait_sleep : idle_sleep);
            if (waiting) out.sleep_total_ms += ms_between(s0, Steady::now());
        }
    }
    out.live_records = pending.size();
    if (out.checkpoints_ms.empty()) out.checkpoints_ms = " none";
    if (!host.can_checkpoint()) die("results wait for the outbox at the end of a run");
    if (auto ok = host.checkpoint(); !ok) die("checkpoint: " + ok.error().message);
    return out;
}

void print_run(const char* name, const LiveRun& r) {
    std::printf("%s: %llu live records in %.1f s, delay p50 %.2f ms, p99 %.2f ms, max %.2f ms",
                name, static_cast<unsigned long long>(r.delays_ms.size()), r.feed_s,
                percentile(r.delays_ms, 0.5), percentile(r.delays_ms, 0.99),
                percentile(r.delays_ms, 1.0));
    if (!r.after_delays_ms.empty())
        std::printf("; after the switch %llu, p50 %.2f ms, p99 %.2f ms, max %.2f ms",
                    static_cast<unsigned long long>(r.after_delays_ms.size()),
                    percentile(r.after_delays_ms, 0.5), percentile(r.after_delays_ms, 0.99),
                    percentile(r.after_delays_ms, 1.0));
    std::printf(
        "\n  longest step %.1f ms, backfill_step %.1f ms (not the switch); checkpoints "
        "(ms):%s\n",
        r.step_max_ms, r.backfill_step_max_ms, r.checkpoints_ms.c_str());
}

uint64_t count_records(const std::string& log_dir) {
    auto reader = log::LogReader::open(log_dir);
    if (!reader) die(reader.error().message);
    log::Record rec;
    uint64_t n = 0;
    for (;;) {
        auto next = (*reader)->next(rec);
        if (!next) die(next.error().message);
        if (!*next) return n;
        ++n;
    }
}

double seconds_since(Steady::time_point t0) {
    return std::chrono::duration<double>(Steady::now() - t0).count();
}

// Phase 0's history: `hours` at o.rate messages/s from o.devices devices, ending now, written
// straight into the log of c's data dir.
void write_history(const config::Config& c, const core::Clock& clock, double hours,
                   const Options& o) {
    const auto history = static_cast<uint64_t>(hours * 3600.0 * static_cast<double>(o.rate));
    firmware::Alarms alarms;
    auto host = firmware::EngineHost::open(c, clock, alarms);
    if (!host) die("open: " + host.error().message);
    const auto t0 = Steady::now();
    const int64_t start_ms = clock.wall_ms() - static_cast<int64_t>(hours * 3600.0 * 1000.0);
    std::string topic, payload;
    for (uint64_t i = 0; i < history; ++i) {
        const int64_t ingest_ms = start_ms + static_cast<int64_t>(i * 1000 / o.rate);
        topic = topic_of(i % o.devices);
        payload_of(payload, ingest_ms, i);
        auto ok = (*host)->log().append(log::RecordType::message, ingest_ms, topic, payload);
        if (!ok) die("append: " + ok.error().message);
    }
    if (!(*host)->log().sync()) die("sync failed");
    std::printf(
        "history: %llu records (%.1f h at %llu/s, %llu devices), %.1f MiB of log, "
        "written in %.1f s\n",
        static_cast<unsigned long long>(history), hours, static_cast<unsigned long long>(o.rate),
        static_cast<unsigned long long>(o.devices),
        static_cast<double>((*host)->log().end_offset()) / (1 << 20), seconds_since(t0));
    std::fflush(stdout);
}

// Bytes this process has sent to storage so far (bench/proc_io.h): flash wear, the log's, the
// store's and the deleter's writes together.
uint64_t written_bytes() {
    return tidemark::bench::read_proc_io().stored();
}

struct HistoryRun {
    double records_per_s = 0;
    uint64_t written_bytes = 0;  // what reached storage meanwhile
};

// Pipeline A recovers over the history (with outbox writes, a Drain as the forwarder) and
// checkpoints.
HistoryRun run_history(const config::Config& c, const core::Clock& clock) {
    firmware::Alarms alarms;
    const auto t0 = Steady::now();
    const uint64_t written0 = written_bytes();
    auto host = firmware::EngineHost::open(c, clock, alarms);
    if (!host) die("open: " + host.error().message);
    Drain drain((*host)->store());
    auto recovered = (*host)->recover([] {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        return true;
    });
    if (!recovered) die("recover: " + recovered.error().message);
    if (auto ok = (*host)->checkpoint(); !ok) die("checkpoint: " + ok.error().message);
    const double s = seconds_since(t0);
    const uint64_t written = written_bytes() - written0;
    std::printf("pipeline A over the history: %llu records in %.1f s (with outbox writes)\n",
                static_cast<unsigned long long>(*recovered), s);
    std::printf(
        "pipeline A over the history: %.1f MiB written to storage, %.0f bytes a record\n",
        static_cast<double>(written) / (1 << 20),
        static_cast<double>(written) / static_cast<double>(std::max<uint64_t>(1, *recovered)));
    std::fflush(stdout);
    return {static_cast<double>(*recovered) / s, written};
}

std::string make_temp_dir() {
    char tmpl[] = "/var/tmp/tidemark-bench-backfill.XXXXXX";
    if (!mkdtemp(tmpl)) die("cannot create a temp dir under /var/tmp");
    return tmpl;
}

// --history-ratio: phase 0 only, 1 h and --hours H each in a fresh data dir, alternated
// --runs times in one process (the machine's load moves both alike); the medians' ratio is
// history.rate_ratio_<H>h_1h (issue 31: the rate must not fall with the history's length).
int history_ratio(const Options& o, int runs) {
    firmware::SystemClock clock;
    std::vector<double> short_rates, long_rates;
    for (int r = 0; r < runs; ++r) {
        for (const double hours : {1.0, o.hours}) {
            const std::string dir = make_temp_dir();
            const config::Config c = parse(config_text(dir, false, o.share), dir);
            write_history(c, clock, hours, o);
            const double rate = run_history(c, clock).records_per_s;
            std::filesystem::remove_all(dir);
            (hours == 1.0 ? short_rates : long_rates).push_back(rate);
            std::printf("run %d, %g h: %.0f records/s\n", r + 1, hours, rate);
            std::fflush(stdout);
        }
    }
    std::sort(short_rates.begin(), short_rates.end());
    std::sort(long_rates.begin(), long_rates.end());
    const double short_rate = short_rates[short_rates.size() / 2];
    const double long_rate = long_rates[long_rates.size() / 2];
    std::printf("history.records_per_s_1h: %.0f records/s (median of %d)\n", short_rate, runs);
    std::printf("history.records_per_s_%gh: %.0f records/s (median of %d)\n", o.hours, long_rate,
                runs);
    std::printf("history.rate_ratio_%gh_1h: %.3f\n", o.hours, long_rate / short_rate);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    Options o;
    bool ratio = false;
    int runs = 3;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        const bool has = i + 1 < argc;
        if (a == "--hours" && has)
            o.hours = std::strtod(argv[++i], nullptr);
        else if (a == "--rate" && has)
            o.rate = std::strtoull(argv[++i], nullptr, 10);
        else if (a == "--devices" && has)
            o.devices = std::strtoull(argv[++i], nullptr, 10);
        else if (a == "--live-rate" && has)
            o.live_rate = std::strtoull(argv[++i], nullptr, 10);
        else if (a == "--baseline-s" && has)
            o.baseline_s = std::strtod(argv[++i], nullptr);
        else if (a == "--after-s" && has)
            o.after_s = std::strtod(argv[++i], nullptr);
        else if (a == "--share" && has)
            o.share = std::strtod(argv[++i], nullptr);
        else if (a == "--history-ratio")
            ratio = true;
        else if (a == "--replays" && has)
            o.replays = std::atoi(argv[++i]);
        else if (a == "--runs" && has)
            runs = std::atoi(argv[++i]);
        else
            die("usage: bench_backfill [--hours H] [--rate MSGS_PER_S] [--devices D] "
                "[--live-rate MSGS_PER_S] [--baseline-s S] [--after-s S] [--share F] "
                "[--replays N] [--history-ratio [--runs N]]");
    }
    if (o.hours <= 0 || o.rate == 0 || o.devices == 0 || o.live_rate == 0 || o.baseline_s <= 0 ||
        o.after_s < 0 || o.share <= 0 || o.share > 1 || o.replays <= 0)
        die("every figure must be positive (--share at most 1)");
    if (ratio) return runs > 0 ? history_ratio(o, runs) : (die("--runs must be positive"), 1);

    const std::string dir = make_temp_dir();
    const config::Config config_a = parse(config_text(dir, false, o.share), dir);
    const config::Config config_ab = parse(config_text(dir, true, o.share), dir);
    firmware::SystemClock clock;

    // 0. History, and pipeline A over it.
    write_history(config_a, clock, o.hours, o);
    const HistoryRun history = run_history(config_a, clock);
    const uint64_t history_records =
        static_cast<uint64_t>(o.hours * 3600.0 * static_cast<double>(o.rate));

    // 1. Baseline: live ingest, no backfill.
    LiveRun baseline;
    {
        firmware::Alarms alarms;
        auto host = open_host(config_a, clock, alarms);
        baseline = run_live(*host, clock, o, false, 0);
    }
    const double base_p99 = percentile(baseline.delays_ms, 0.99);
    print_run("baseline", baseline);
    std::fflush(stdout);

    // 2. Backfill of B beside the same live ingest, until B switches (at most an hour).
    LiveRun during;
    const uint64_t during_written0 = written_bytes();
    {
        firmware::Alarms alarms;
        auto host = open_host(config_ab, clock, alarms);
        if (!host->backfilling()) die("pipeline B does not backfill");
        during = run_live(*host, clock, o, true, 3600);
    }
    const uint64_t during_written = written_bytes() - during_written0;
    const double during_p99 = percentile(during.delays_ms, 0.99);
    print_run("backfill", during);
    std::printf(
        "backfill: %s after %llu records in %.1f s (the switching step %.1f ms); %d "
        "backfill steps over max_live_delay 200 ms; until the switch %.1f s in "
        "backfill_step (%.1f s of it in slices, at the busy rate; %.1f s of CPU in them), %.1f s "
        "asleep waiting for the share\n",
        during.switched ? "switched" : "NOT switched",
        static_cast<unsigned long long>(during.backfill_records), during.backfill_wall_s,
        during.switch_step_ms, during.backfill_steps_over_200_ms,
        during.backfill_step_total_ms / 1000,
        during.busy_records_per_s > 0
            ? static_cast<double>(during.backfill_records) / during.busy_records_per_s
            : 0.0,
        during.cpu_records_per_s > 0
            ? static_cast<double>(during.backfill_records) / during.cpu_records_per_s
            : 0.0,
        during.sleep_total_ms / 1000);
    std::fflush(stdout);
    if (!during.switched) die("the backfill did not switch within the hour");

    // 3. `tidemark replay` of B over the same log.
    const std::string config_path = dir + "/config.json";
    {
        std::ofstream f(config_path);
        f << config_text(dir, true, o.share);
        if (!f) die("cannot write " + config_path);
    }
    const uint64_t log_records = count_records(dir + "/log");
    std::vector<double> replay_rates;
    for (int r = 0; r < o.replays; ++r) {
        firmware::ReplayOptions ro;
        ro.config_path = config_path;
        ro.pipeline = "dev_5m_p95";
        ro.out = "/dev/null";
        const auto t0 = Steady::now();
        if (firmware::replay_command(ro) != 0) die("replay failed");
        const double s = seconds_since(t0);
        replay_rates.push_back(static_cast<double>(log_records) / s);
        std::printf("replay %d: %llu records in %.2f s\n", r + 1,
                    static_cast<unsigned long long>(log_records), s);
    }
    std::filesystem::remove_all(dir);
    std::sort(replay_rates.begin(), replay_rates.end());
    const double replay_rate = replay_rates[replay_rates.size() / 2];
    const double wall_rate = static_cast<double>(during.backfill_records) / during.backfill_wall_s;

    std::printf("backfill.history_records: %llu records\n",
                static_cast<unsigned long long>(history_records));
    // Flash wear (not a target of issue 31): what reaches storage per record of history, while
    // pipeline A recovers over it and while B backfills it (with the live feed's log and
    // outbox, and the deleter's frees, over the phase).
    std::printf("history.bytes_written_per_record: %.0f bytes\n",
                static_cast<double>(history.written_bytes) /
                    static_cast<double>(std::max<uint64_t>(1, history_records)));
    std::printf("backfill.bytes_written_per_record: %.0f bytes\n",
                static_cast<double>(during_written) /
                    static_cast<double>(std::max<uint64_t>(1, during.backfill_records)));
    std::printf("backfill.records_per_s: %.0f records/s\n", wall_rate);
    std::printf("backfill.busy_records_per_s: %.0f records/s\n", during.busy_records_per_s);
    std::printf("backfill.cpu_records_per_s: %.0f records/s\n", during.cpu_records_per_s);
    std::printf("backfill.replay_records_per_s: %.0f records/s\n", replay_rate);
    std::printf("backfill.vs_replay: %.3f\n", wall_rate / replay_rate);
    // Issue 31's restatement: the busy rate (time inside the backfill's slices, their outbox
    // commits included) against replay's, and the wall rate against the share of replay's rate
    // the backfill may take.
    std::printf("backfill.busy_vs_replay: %.3f\n", during.busy_records_per_s / replay_rate);
    // Replay is one thread that seldom blocks (its output is a file): its wall rate is about its
    // CPU rate.
    std::printf("backfill.cpu_vs_replay: %.3f\n", during.cpu_records_per_s / replay_rate);
    std::printf("backfill.wall_vs_share_replay: %.3f\n", wall_rate / (o.share * replay_rate));
    std::printf("backfill.live_p99_delay_ms: %.2f ms\n", during_p99 - base_p99);
    std::printf("backfill.live_p99_delay_baseline_ms: %.2f ms\n", base_p99);
    std::printf("backfill.live_p99_delay_during_ms: %.2f ms\n", during_p99);
    std::printf("backfill.live_max_delay_during_ms: %.2f ms\n", percentile(during.delays_ms, 1.0));
    std::printf("backfill.live_p99_delay_after_switch_ms: %.2f ms\n",
                percentile(during.after_delays_ms, 0.99));
    std::printf("backfill.switch_step_ms: %.1f ms\n", during.switch_step_ms);
    std::printf("backfill.share: %g\n", o.share);
    return 0;
}
