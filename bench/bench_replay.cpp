// Replay throughput: LogReader -> Processor (simdjson decode) -> Engine (tumbling 1m mean, count,
// max) -> result encoding, on one core, the loop `tidemark replay` runs.
//
// replay.records_per_s: log records per second (median of --runs N runs, default 3, over the
// same log, each with a fresh Processor and reader; the log is in the page cache after
// generation, as a recent log on a gateway mostly is); replay.records_per_cpu_s: the same over
// the process's CPU time (steadier on a shared machine). replay.days_30_at_100_msgs_per_s_s:
// 30 * 86400 * 100 / the wall rate.
// replay.pipelines_5_vs_1 (issue 31): the CPU time of the same log replayed by five pipelines on
// the one topic (that 1m pipeline, 5m and 1h tumbling, a 10m window hopping every 1m, a 5m-gap
// session) over the one pipeline's, medians, the runs of the two configs interleaved so that a
// change in the machine's load falls on both; _wall: the same with wall time.
// replay.parses_per_record: payload parses per message record with five pipelines (1: the
// payload is parsed once, whatever number of pipelines match its topic).
// The log: --records N (default 2M) small JSON telemetry messages ({"ts":...,"temp":...,...},
// about 60 bytes) from --devices D (default 10k) on sensors/dev-N/telemetry, 1 ms of ingest time
// apart with 0-2 s of lag, a tick every 1000 records; written to a temp dir under /var/tmp and
// removed afterwards (--keep DIR writes it there and keeps it, for perf, with the two configs as
// DIR/one.json and DIR/five.json, for `tidemark replay -c DIR/five.json --log-dir DIR/log`).
// --pipelines 1 (or 5): that config's runs only.
// --compare-zstd (issue 30): the same records also written to a compressed log (zstd blocks, a
// seal every 1000 records: one a second of ingest time, as fsync_interval 1s makes them), and
// the one-pipeline runs over both interleaved: replay.zstd_records_per_s and
// replay.zstd_vs_plain (the compressed log's rate over the plain one's, same run).
// Variants of the one-pipeline run (issue 31), alternated with it round by round:
// replay.variant_vs_continuous_cpu, the plain runs' median CPU time over the variant's (1: the
// variant costs nothing), and _pairs, the median of each round's own ratio.
//   --slices READ_MS:PAUSE_MS: the loop reads for READ_MS of steady time, then sleeps
//   PAUSE_MS, as a backfill's slices read between the live steps at max_share
//   READ_MS / (READ_MS + PAUSE_MS), with nothing of the backfill in it (no outbox, no live
//   steps; run a second process beside it to see what other work in the pauses adds).
//   --scatter MB: before the run the heap gets MB of small blocks (16-255 bytes), every other
//   one freed at random, so that the run's allocations (keys, windows) land in scattered holes,
//   as in a process whose heap other work has used.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "adapters/codec/record.h"
#include "adapters/config/config.h"
#include "adapters/log/log_reader.h"
#include "adapters/log/log_writer.h"
#include "firmware/service/processor.h"

namespace {

using namespace tidemark;
using Clock = std::chrono::steady_clock;

constexpr int64_t start_ms = 1764547200000;

const char* config_head = R"({"node_id": "bench", "data_dir": "/var/tmp",
  "source": {"uri": "tcp://127.0.0.1:1883"}, "storage": {"map_size": "4GiB"}, "pipelines": [)";
const char* temp_1m_json = R"({"name": "temp_1m", "topic": "sensors/+/telemetry", "key": "topic:1",
    "timestamp": {"pointer": "/ts", "format": "epoch_ms"}, "fields": {"temp": "/temp"},
    "window": {"type": "tumbling", "size": "1m"},
    "watermark": {"delay": "5s", "idle_timeout": "1m", "scope": "global"},
    "aggregates": {"avg": {"fn": "mean", "field": "temp"}, "n": {"fn": "count"},
                   "max": {"fn": "max", "field": "temp"}},
    "limits": {"max_keys": 100000, "max_open_windows": 1000000}})";

// Five pipelines over the same telemetry, as a gateway commonly runs them (issue 31).
const char* four_more_json = R"(,
  {"name": "temp_5m", "topic": "sensors/+/telemetry", "key": "topic:1",
    "timestamp": {"pointer": "/ts", "format": "epoch_ms"}, "fields": {"temp": "/temp"},
    "window": {"type": "tumbling", "size": "5m"},
    "watermark": {"delay": "5s", "idle_timeout": "1m", "scope": "global"},
    "aggregates": {"avg": {"fn": "mean", "field": "temp"}, "n": {"fn": "count"},
                   "max": {"fn": "max", "field": "temp"}},
    "limits": {"max_keys": 100000, "max_open_windows": 1000000}},
  {"name": "temp_1h", "topic": "sensors/+/telemetry", "key": "topic:1",
    "timestamp": {"pointer": "/ts", "format": "epoch_ms"}, "fields": {"temp": "/temp"},
    "window": {"type": "tumbling", "size": "1h"},
    "watermark": {"delay": "5s", "idle_timeout": "1m", "scope": "global"},
    "aggregates": {"avg": {"fn": "mean", "field": "temp"}, "min": {"fn": "min", "field": "temp"},
                   "max": {"fn": "max", "field": "temp"}},
    "limits": {"max_keys": 100000, "max_open_windows": 1000000}},
  {"name": "hum_10m_every_1m", "topic": "sensors/+/telemetry", "key": "topic:1",
    "timestamp": {"pointer": "/ts", "format": "epoch_ms"}, "fields": {"hum": "/hum"},
    "window": {"type": "hopping", "size": "10m", "advance": "1m"},
    "watermark": {"delay": "5s", "idle_timeout": "1m", "scope": "global"},
    "aggregates": {"avg": {"fn": "mean", "field": "hum"}},
    "limits": {"max_keys": 100000, "max_open_windows": 2000000}},
  {"name": "session", "topic": "sensors/+/telemetry", "key": "topic:1",
    "timestamp": {"pointer": "/ts", "format": "epoch_ms"}, "fields": {"temp": "/temp"},
    "window": {"type": "session", "gap": "5m", "max_duration": "1h"},
    "watermark": {"delay": "5s", "idle_timeout": "1m", "scope": "global"},
    "aggregates": {"n": {"fn": "count"}, "max": {"fn": "max", "field": "temp"}},
    "limits": {"max_keys": 100000, "max_open_windows": 1000000}})";

// Encodes each result as replay does, without the file write.
class EncodeSink : public firmware::ProcessorSink {
  public:
    explicit EncodeSink(const config::Config& c) : encoders_(firmware::result_encoders(c)) {}
    void emit(const core::Emission& e) override {
        encoders_[e.pipeline].encode(e, line_);
        ++results;
        bytes += line_.size();
    }
    void side_output(const core::SideOutput&) override { ++side; }
    void malformed(uint32_t, const log::Record&, std::string_view) override { ++malformed_count; }
    uint64_t results = 0, bytes = 0, side = 0, malformed_count = 0;

  private:
    std::vector<codec::ResultEncoder> encoders_;  // by pipeline
    std::string line_;
};

void die(const std::string& message) {
    std::fprintf(stderr, "bench_replay: %s\n", message.c_str());
    std::exit(1);
}

uint64_t write_log(const std::string& dir, uint64_t records, uint64_t devices,
                   log::Compression compression = log::Compression::none) {
    log::LogOptions options;
    options.dir = dir;
    options.fsync = log::FsyncPolicy::never;
    options.compression = compression;
    auto writer = log::LogWriter::open(options);
    if (!writer) die(writer.error().message);
    std::mt19937_64 rng(1);
    std::uniform_int_distribution<int64_t> lag(0, 2'000);
    std::uniform_int_distribution<int> temp(1500, 3000);
    std::string topic, payload;
    char buf[128];
    uint64_t payload_bytes = 0;
    for (uint64_t i = 0; i < records; ++i) {
        const int64_t ingest_ms = start_ms + static_cast<int64_t>(i);
        if (i % 1000 == 999) {
            if (!(*writer)->append(log::RecordType::tick, ingest_ms, {}, {})) die("append failed");
            if (compression == log::Compression::zstd && !(*writer)->sync()) die("seal failed");
            continue;
        }
        topic = "sensors/dev-" + std::to_string(i % devices) + "/telemetry";
        const int t = temp(rng);
        const int n = std::snprintf(buf, sizeof buf,
                                    "{\"ts\":%lld,\"temp\":%d.%02d,\"hum\":%d.5,\"seq\":%llu}",
                                    static_cast<long long>(ingest_ms - lag(rng)), t / 100, t % 100,
                                    30 + t % 40, static_cast<unsigned long long>(i));
        payload.assign(buf, static_cast<size_t>(n));
        payload_bytes += payload.size();
        auto appended = (*writer)->append(log::RecordType::message, ingest_ms, topic, payload);
        if (!appended) die(appended.error().message);
    }
    if (!(*writer)->sync()) die("sync failed");
    return payload_bytes / records;
}

// CPU time of this process: on a loaded machine (the 2 cores here are shared) the wall time of a
// run moves 2-4x between runs; the CPU time it took moves far less.
double cpu_seconds() {
    timespec t{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

struct Run {
    double seconds = 0, cpu_seconds = 0;
    uint64_t records = 0, results = 0, malformed = 0;
    uint64_t messages = 0, parses = 0;  // message records; payload parses for all pipelines
};

// slice_ms > 0: read in slices of that many ms of steady time with pause_ms asleep between them,
// as a backfill reads between the live steps (the clock is looked at every 64 records).
Run run_once(const config::Config& config, const std::string& dir, int slice_ms = 0,
             int pause_ms = 0) {
    auto processor = firmware::Processor::create(config);
    if (!processor) die(processor.error().message);
    EncodeSink sink(config);
    const auto t0 = Clock::now();
    const double cpu0 = cpu_seconds();
    auto reader = log::LogReader::open(dir);
    if (!reader) die(reader.error().message);
    log::Record rec;
    Run run;
    auto slice_end = Clock::now() + std::chrono::milliseconds(slice_ms);
    for (;;) {
        if (slice_ms > 0 && run.records % 64 == 0 && Clock::now() >= slice_end) {
            std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
            slice_end = Clock::now() + std::chrono::milliseconds(slice_ms);
        }
        auto next = (*reader)->next(rec);
        if (!next) die(next.error().message);
        if (!*next) break;
        (*processor)->feed(rec, sink);
        ++run.records;
        if (rec.type == log::RecordType::message) ++run.messages;
    }
    run.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    run.cpu_seconds = cpu_seconds() - cpu0;
    run.results = sink.results;
    run.malformed = sink.malformed_count;
    run.parses = (*processor)->payload_parses();
    return run;
}

}  // namespace

int main(int argc, char** argv) {
    uint64_t records = 2'000'000, devices = 10'000;
    std::string keep_dir;
    bool one_pipeline = true, five = true, compare_zstd = false;
    int runs = 3;
    int slice_ms = 0, pause_ms = 0;
    long scatter_mb = 0;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--records" && i + 1 < argc)
            records = std::strtoull(argv[++i], nullptr, 10);
        else if (a == "--devices" && i + 1 < argc)
            devices = std::strtoull(argv[++i], nullptr, 10);
        else if (a == "--keep" && i + 1 < argc)
            keep_dir = argv[++i];
        else if (a == "--slices" && i + 1 < argc) {
            if (std::sscanf(argv[++i], "%d:%d", &slice_ms, &pause_ms) != 2 || slice_ms <= 0 ||
                pause_ms < 0)
                die("--slices takes READ_MS:PAUSE_MS, e.g. 1:2");
        } else if (a == "--scatter" && i + 1 < argc) {
            scatter_mb = std::atol(argv[++i]);
            if (scatter_mb <= 0) die("--scatter takes a positive number of MB");
        } else if (a == "--compare-zstd")
            compare_zstd = true;
        else if (a == "--runs" && i + 1 < argc)
            runs = std::max(1, std::atoi(argv[++i]));
        else if (a == "--pipelines" && i + 1 < argc) {
            const std::string n = argv[++i];
            if (n != "1" && n != "5") die("--pipelines takes 1 or 5");
            one_pipeline = n == "1";
            five = n == "5";
        } else
            die("usage: bench_replay [--records N] [--devices D] [--keep DIR] [--pipelines 1|5] "
                "[--runs N] [--compare-zstd] [--slices READ_MS:PAUSE_MS] [--scatter MB]");
    }
    if (records == 0 || devices == 0) die("--records and --devices must be positive");
    const std::string one = std::string(config_head) + temp_1m_json + "]}";
    const std::string five_json = std::string(config_head) + temp_1m_json + four_more_json + "]}";
    auto config = config::parse_config(one, "/var/tmp");
    if (!config) die(config::format_errors(config.error()));
    auto config_5 = config::parse_config(five_json, "/var/tmp");
    if (!config_5) die(config::format_errors(config_5.error()));

    std::string dir = keep_dir;
    if (dir.empty()) {
        char tmpl[] = "/var/tmp/tidemark-bench-replay.XXXXXX";
        if (!mkdtemp(tmpl)) die("cannot create a temp dir under /var/tmp");
        dir = tmpl;
    }
    const std::string log_dir = dir + "/log";
    const std::string zstd_dir = dir + "/log-zstd";
    const bool reuse = !keep_dir.empty() && std::filesystem::exists(log_dir);
    if (compare_zstd && !(reuse && std::filesystem::exists(zstd_dir))) {
        write_log(zstd_dir, records, devices, log::Compression::zstd);
    }
    if (!keep_dir.empty()) {
        std::filesystem::create_directories(keep_dir);
        for (const auto& [name, text] :
             {std::pair{"/one.json", &one}, {"/five.json", &five_json}}) {
            std::ofstream out(keep_dir + name, std::ios::trunc);
            out << *text << '\n';
            if (!out) die("cannot write " + keep_dir + name);
        }
    }
    if (!reuse) {
        const uint64_t payload_avg = write_log(log_dir, records, devices);
        std::printf("log: %llu records, %llu devices, %llu-byte payloads on average, in %s\n",
                    static_cast<unsigned long long>(records),
                    static_cast<unsigned long long>(devices),
                    static_cast<unsigned long long>(payload_avg), log_dir.c_str());
    }
    const auto median = [](std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
    };
    struct Series {
        std::vector<double> seconds, cpu_seconds;
        Run last;
    };
    const auto run_and_print = [&](const config::Config& c, const char* what, int r, Series& s) {
        s.last = run_once(c, log_dir);
        s.seconds.push_back(s.last.seconds);
        s.cpu_seconds.push_back(s.last.cpu_seconds);
        std::printf(
            "run %d, %s: %llu records in %.3f s (%.3f s CPU), %llu results, %llu malformed\n",
            r + 1, what, static_cast<unsigned long long>(s.last.records), s.last.seconds,
            s.last.cpu_seconds, static_cast<unsigned long long>(s.last.results),
            static_cast<unsigned long long>(s.last.malformed));
    };
    Series one_series, five_series, zstd_series, variant_series;
    const bool variant = slice_ms > 0 || scatter_mb > 0;
    std::string variant_text;  // what the variant does, for its lines: only what was asked
    if (slice_ms > 0)
        variant_text =
            "slices " + std::to_string(slice_ms) + ":" + std::to_string(pause_ms) + " ms";
    if (scatter_mb > 0)
        variant_text += (variant_text.empty() ? "" : ", ") + std::string("scatter ") +
                        std::to_string(scatter_mb) + " MB";
    const auto run_variant = [&](int r) {
        // --scatter MB: the heap holds MB of small blocks, every other one freed, as a
        // process's heap does after other work: the run's allocations fill the holes.
        std::vector<void*> kept, freed;
        std::mt19937_64 rng(r);
        for (long bytes = 0; bytes < scatter_mb * 1'000'000;) {
            const size_t n = 16 + rng() % 240;
            (rng() % 2 ? kept : freed).push_back(std::malloc(n));
            bytes += static_cast<long>(n);
        }
        for (void* p : freed)
            std::free(p);
        variant_series.last = run_once(*config, log_dir, slice_ms, pause_ms);
        for (void* p : kept)
            std::free(p);
        variant_series.seconds.push_back(variant_series.last.seconds);
        variant_series.cpu_seconds.push_back(variant_series.last.cpu_seconds);
        std::printf("run %d, 1 pipeline, %s: %llu records in %.3f s (%.3f s CPU)\n", r + 1,
                    variant_text.c_str(),
                    static_cast<unsigned long long>(variant_series.last.records),
                    variant_series.last.seconds, variant_series.last.cpu_seconds);
    };
    for (int r = 0; r < runs; ++r) {
        // The variant's runs alternate with the plain ones, first every other round.
        if (one_pipeline && variant && r % 2 == 1) run_variant(r);
        if (one_pipeline) run_and_print(*config, "1 pipeline", r, one_series);
        if (one_pipeline && variant && r % 2 == 0) run_variant(r);
        if (one_pipeline && compare_zstd) {
            zstd_series.last = run_once(*config, zstd_dir);
            zstd_series.seconds.push_back(zstd_series.last.seconds);
            zstd_series.cpu_seconds.push_back(zstd_series.last.cpu_seconds);
            std::printf("run %d, 1 pipeline, zstd log: %llu records in %.3f s (%.3f s CPU)\n",
                        r + 1, static_cast<unsigned long long>(zstd_series.last.records),
                        zstd_series.last.seconds, zstd_series.last.cpu_seconds);
        }
        if (five) run_and_print(*config_5, "5 pipelines", r, five_series);
    }
    if (keep_dir.empty()) std::filesystem::remove_all(dir);
    if (one_pipeline) {
        const double n = static_cast<double>(one_series.last.records);
        const double rate = n / median(one_series.seconds);
        std::printf("replay.records_per_s: %.0f records/s\n", rate);
        std::printf("replay.records_per_cpu_s: %.0f records/s\n",
                    n / median(one_series.cpu_seconds));
        std::printf("replay.days_30_at_100_msgs_per_s_s: %.1f s\n", 30.0 * 86400 * 100 / rate);
        if (variant) {
            const double variant_cpu = median(variant_series.cpu_seconds);
            std::printf("replay.variant_records_per_cpu_s: %.0f records/s (%s)\n", n / variant_cpu,
                        variant_text.c_str());
            std::printf("replay.variant_vs_continuous_cpu: %.3f ratio\n",
                        median(one_series.cpu_seconds) / variant_cpu);
            std::vector<double> own;
            for (size_t i = 0; i < variant_series.cpu_seconds.size(); ++i)
                own.push_back(one_series.cpu_seconds[i] / variant_series.cpu_seconds[i]);
            std::printf(
                "replay.variant_vs_continuous_cpu_pairs: %.3f ratio (median of the "
                "rounds' own)\n",
                median(own));
        }
        if (compare_zstd) {
            if (zstd_series.last.records != one_series.last.records) die("the logs differ");
            const double zstd_rate = n / median(zstd_series.seconds);
            std::printf("replay.zstd_records_per_s: %.0f records/s\n", zstd_rate);
            std::printf("replay.zstd_vs_plain: %.2f ratio\n", zstd_rate / rate);
            std::printf("replay.zstd_vs_plain_cpu: %.2f ratio\n",
                        median(one_series.cpu_seconds) / median(zstd_series.cpu_seconds));
        }
    }
    if (five) {
        const double n = static_cast<double>(five_series.last.records);
        std::printf("replay.pipelines_5_records_per_s: %.0f records/s\n",
                    n / median(five_series.seconds));
        std::printf("replay.pipelines_5_records_per_cpu_s: %.0f records/s\n",
                    n / median(five_series.cpu_seconds));
        std::printf("replay.parses_per_record: %.2f\n",
                    static_cast<double>(five_series.last.parses) /
                        static_cast<double>(five_series.last.messages));
    }
    if (one_pipeline && five) {
        std::printf("replay.pipelines_5_vs_1_wall: %.2f\n",
                    median(five_series.seconds) / median(one_series.seconds));
        std::printf("replay.pipelines_5_vs_1: %.2f\n",
                    median(five_series.cpu_seconds) / median(one_series.cpu_seconds));
    }
    return 0;
}
