// Replay throughput: LogReader -> Processor (simdjson decode) -> Engine (tumbling 1m mean, count,
// max) -> result encoding, on one core, the loop `tidemark replay` runs.
//
// replay.records_per_s: log records per second (median of 3 runs over the same log, each with a
// fresh Processor and reader; the log is in the page cache after generation, as a recent log on
// a gateway mostly is). replay.days_30_at_100_msgs_per_s_s: 30 * 86400 * 100 / that rate.
// The log: --records N (default 2M) small JSON telemetry messages ({"ts":...,"temp":...,...},
// about 60 bytes) from --devices D (default 10k) on sensors/dev-N/telemetry, 1 ms of ingest time
// apart with 0-2 s of lag, a tick every 1000 records; written to a temp dir under /var/tmp and
// removed afterwards (--keep DIR writes it there and keeps it, for perf).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "adapters/codec/record.h"
#include "adapters/config/config.h"
#include "adapters/log/log_reader.h"
#include "adapters/log/log_writer.h"
#include "firmware/processor.h"

namespace {

using namespace tidemark;
using Clock = std::chrono::steady_clock;

constexpr int repetitions = 3;
constexpr int64_t start_ms = 1764547200000;

const char* config_json = R"({"node_id": "bench", "data_dir": "/var/tmp",
  "source": {"uri": "tcp://127.0.0.1:1883"},
  "pipelines": [{"name": "temp_1m", "topic": "sensors/+/telemetry", "key": "topic:1",
    "timestamp": {"pointer": "/ts", "format": "epoch_ms"}, "fields": {"temp": "/temp"},
    "window": {"type": "tumbling", "size": "1m"},
    "watermark": {"delay": "5s", "idle_timeout": "1m", "scope": "global"},
    "aggregates": {"avg": {"fn": "mean", "field": "temp"}, "n": {"fn": "count"},
                   "max": {"fn": "max", "field": "temp"}},
    "limits": {"max_keys": 100000, "max_open_windows": 1000000}}]})";

// Encodes each result as replay does, without the file write.
class EncodeSink : public firmware::ProcessorSink {
  public:
    explicit EncodeSink(const config::Config& c) : config_(c) {
        for (const auto& a : c.pipelines[0].spec.aggregates)
            names_.push_back(a.name);
    }
    void emit(const core::Emission& e) override {
        codec::encode_result(config_.node_id, config_.pipelines[0].spec.name, names_, e, line_,
                             config_.pipelines[0].spec.version);
        ++results;
        bytes += line_.size();
    }
    void side_output(const core::SideOutput&) override { ++side; }
    void malformed(uint32_t, const log::Record&, std::string_view) override { ++malformed_count; }
    uint64_t results = 0, bytes = 0, side = 0, malformed_count = 0;

  private:
    const config::Config& config_;
    std::vector<std::string> names_;
    std::string line_;
};

void die(const std::string& message) {
    std::fprintf(stderr, "bench_replay: %s\n", message.c_str());
    std::exit(1);
}

uint64_t write_log(const std::string& dir, uint64_t records, uint64_t devices) {
    log::LogOptions options;
    options.dir = dir;
    options.fsync = log::FsyncPolicy::never;
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

struct Run {
    double seconds = 0;
    uint64_t records = 0, results = 0, malformed = 0;
};

Run run_once(const config::Config& config, const std::string& dir) {
    auto processor = firmware::Processor::create(config);
    if (!processor) die(processor.error().message);
    EncodeSink sink(config);
    const auto t0 = Clock::now();
    auto reader = log::LogReader::open(dir);
    if (!reader) die(reader.error().message);
    log::Record rec;
    Run run;
    for (;;) {
        auto next = (*reader)->next(rec);
        if (!next) die(next.error().message);
        if (!*next) break;
        (*processor)->feed(rec, sink);
        ++run.records;
    }
    run.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    run.results = sink.results;
    run.malformed = sink.malformed_count;
    return run;
}

}  // namespace

int main(int argc, char** argv) {
    uint64_t records = 2'000'000, devices = 10'000;
    std::string keep_dir;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--records" && i + 1 < argc)
            records = std::strtoull(argv[++i], nullptr, 10);
        else if (a == "--devices" && i + 1 < argc)
            devices = std::strtoull(argv[++i], nullptr, 10);
        else if (a == "--keep" && i + 1 < argc)
            keep_dir = argv[++i];
        else
            die("usage: bench_replay [--records N] [--devices D] [--keep DIR]");
    }
    if (records == 0 || devices == 0) die("--records and --devices must be positive");
    auto config = config::parse_config(config_json, "/var/tmp");
    if (!config) die(config::format_errors(config.error()));

    std::string dir = keep_dir;
    if (dir.empty()) {
        char tmpl[] = "/var/tmp/tidemark-bench-replay.XXXXXX";
        if (!mkdtemp(tmpl)) die("cannot create a temp dir under /var/tmp");
        dir = tmpl;
    }
    const std::string log_dir = dir + "/log";
    const bool reuse = !keep_dir.empty() && std::filesystem::exists(log_dir);
    if (!reuse) {
        const uint64_t payload_avg = write_log(log_dir, records, devices);
        std::printf("log: %llu records, %llu devices, %llu-byte payloads on average, in %s\n",
                    static_cast<unsigned long long>(records),
                    static_cast<unsigned long long>(devices),
                    static_cast<unsigned long long>(payload_avg), log_dir.c_str());
    }
    std::vector<double> rates;
    for (int r = 0; r < repetitions; ++r) {
        const Run run = run_once(*config, log_dir);
        rates.push_back(static_cast<double>(run.records) / run.seconds);
        std::printf("run %d: %llu records in %.3f s, %llu results, %llu malformed\n", r + 1,
                    static_cast<unsigned long long>(run.records), run.seconds,
                    static_cast<unsigned long long>(run.results),
                    static_cast<unsigned long long>(run.malformed));
    }
    if (keep_dir.empty()) std::filesystem::remove_all(dir);
    std::sort(rates.begin(), rates.end());
    const double rate = rates[rates.size() / 2];
    std::printf("replay.records_per_s: %.0f records/s\n", rate);
    std::printf("replay.days_30_at_100_msgs_per_s_s: %.1f s\n", 30.0 * 86400 * 100 / rate);
    return 0;
}
