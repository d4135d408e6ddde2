// storage.bytes_written_per_payload_byte: bytes the process writes (log, LMDB state, outbox,
// checkpoints) per payload byte accepted, over a steady run with windows firing, as the
// kernel accounts them in /proc/self/io: write_bytes less cancelled_write_bytes (write_bytes is
// counted when a page is dirtied; a dirty page truncated before writeback never reaches the
// device and is counted back in cancelled_write_bytes: 0 for today's log, which never truncates
// what it wrote, but not for a log that stages records in a file it truncates). No broker: records
// are appended as ingest would. storage.recovery_ms: then the process "crashes" (the service is
// dropped without a last checkpoint, at the end of a checkpoint interval: the most log a restart
// can have to replay) and a new one opens the data directory and recovers: open + replay to the
// log's end.
//
// storage.disk_bytes_per_payload_byte (issue 30): what the log's segments take on disk at the end
// (after the last sync), per payload byte: st_blocks x 512 of each .zlog and .zlog.stage (so the
// stage's punched part, a hole, counts for nothing), st_size of a plain .log (which has no holes).
// storage.days_at_200_msgs_per_s_per_32_gib: 32 GiB / (that x 100 bytes x 200/s x 86400 s).
// --compression none|zstd sets storage.log_compression (default: the config's default);
// --rate N: messages per second of ingest time (default 1000; at 200 a 1-s seal's block is
// ~19 KiB of frames, a gateway's rate of the issue's figure).
//
// The stream: 1000 devices, one ~100-byte JSON message each per second of event time, a 1-minute
// tumbling pipeline (count, mean, max), checkpoints every 60 s of ingest time (the default;
// --checkpoint-ms N for another), delivered outbox rows deleted as a forwarder would.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>

#include "adapters/config/config.h"
#include "adapters/lmdb/store.h"
#include "adapters/log/log_writer.h"
#include "adapters/log/segment_files.h"
#include "bench/proc_io.h"
#include "firmware/clock.h"
#include "firmware/service/service_parts.h"

using namespace tidemark;

namespace {

using tidemark::bench::read_proc_io;

}  // namespace

int main(int argc, char** argv) {
    uint64_t records = 300'000;
    int64_t checkpoint_ms = 60'000;  // the default checkpoint.interval
    std::string compression;         // the default
    uint64_t rate = 1000;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string a = argv[i];
        if (a == "--records") records = std::strtoull(argv[i + 1], nullptr, 10);
        if (a == "--checkpoint-ms") checkpoint_ms = std::strtoll(argv[i + 1], nullptr, 10);
        if (a == "--compression") compression = argv[i + 1];
        if (a == "--rate") rate = std::max<uint64_t>(1, std::strtoull(argv[i + 1], nullptr, 10));
    }
    const std::string compression_json =
        compression.empty() ? "" : R"(, "log_compression": ")" + compression + "\"";
    const char* base = std::getenv("TIDEMARK_BUILD_DIR");
    const std::string dir =
        std::string(base ? base : "/var/tmp") + "/bench-storage-io-" + std::to_string(::getpid());
    std::filesystem::create_directories(dir);
    const std::string json = R"({
      "node_id": "bench", "data_dir": ")" +
                             dir + R"(",
      "storage": {"map_size": "1GiB", "fsync": "interval", "fsync_interval": "1s",
                  "log_retention": {"max_age": "7d", "max_bytes": "4GiB"})" +
                             compression_json + R"(},
      "checkpoint": {"interval": "60s"},
      "source": {"uri": "tcp://127.0.0.1:1"},
      "upstream": {"uri": "tcp://127.0.0.1:2"},
      "pipelines": [{"name": "t1m", "topic": "sensors/+/telemetry", "key": "topic:1",
        "timestamp": {"pointer": "/ts", "format": "epoch_ms"}, "fields": {"temp": "/temp"},
        "window": {"type": "tumbling", "size": "1m"},
        "watermark": {"delay": "5s", "idle_timeout": "1m"},
        "aggregates": {"n": {"fn": "count"}, "avg": {"fn": "mean", "field": "temp"},
                       "max": {"fn": "max", "field": "temp"}},
        "limits": {"max_keys": 10000, "max_open_windows": 100000}}]})";
    auto cfg = config::parse_config(json, dir);
    if (!cfg) {
        std::fprintf(stderr, "%s", config::format_errors(cfg.error()).c_str());
        return 1;
    }
    static const firmware::SystemClock clock;
    auto parts = firmware::ServiceParts::open(*cfg, clock);
    if (!parts) {
        std::fprintf(stderr, "%s\n", parts.error().message.c_str());
        return 1;
    }
    firmware::ServiceParts& sp = **parts;
    if (!sp.host().recover([] { return false; })) return 1;
    const int64_t start_ms = 1'764'400'000'000;
    const tidemark::bench::ProcIo before = read_proc_io();
    uint64_t payload_bytes = 0;
    int64_t next_checkpoint = start_ms + checkpoint_ms;
    int64_t next_sync = start_ms + 1000;
    char payload[160];
    char topic[64];
    for (uint64_t i = 0; i < records; ++i) {
        const int64_t t = start_ms + static_cast<int64_t>(i * 1000 / rate);  // `rate` a second
        const int dev = static_cast<int>(i % 1000);
        std::snprintf(topic, sizeof topic, "sensors/dev-%04d/telemetry", dev);
        const int n =
            std::snprintf(payload, sizeof payload,
                          "{\"ts\":%lld,\"seq\":%llu,\"temp\":%d.%02d,\"hum\":%d.5,"
                          "\"fw\":\"1.4.2\",\"rssi\":-%d}",
                          static_cast<long long>(t - 200), static_cast<unsigned long long>(i),
                          18 + dev % 10, static_cast<int>(i % 100), 40 + dev % 20, 60 + dev % 30);
        auto ok = sp.host().log().append(log::RecordType::message, t, topic,
                                         std::string_view(payload, n));
        if (!ok) {
            std::fprintf(stderr, "%s\n", ok.error().message.c_str());
            return 1;
        }
        payload_bytes += static_cast<uint64_t>(n);
        if (t >= next_sync) {
            (void)sp.host().log().sync();
            next_sync += 1000;
            while (true) {
                auto step = sp.host().step(4096, false);
                if (!step || *step == 0) break;
            }
            // Deliver what the outbox holds, as the forwarder would on PUBACKs.
            auto rows = sp.host().store().outbox_peek(0, 100'000);
            if (rows && !rows->empty()) {
                std::vector<uint64_t> seqs;
                for (const auto& r : *rows)
                    seqs.push_back(r.seq);
                (void)sp.host().store().outbox_delete(seqs);
            }
        }
        if (t >= next_checkpoint && sp.host().can_checkpoint()) {
            if (auto c = sp.host().checkpoint(); !c) {
                std::fprintf(stderr, "%s\n", c.error().message.c_str());
                return 1;
            }
            next_checkpoint += checkpoint_ms;
        }
    }
    (void)sp.host().log().sync();
    ::sync();
    const tidemark::bench::ProcIo after = read_proc_io();
    uint64_t disk_bytes = 0;
    uint64_t frame_bytes = 0;
    size_t compressed_segments = 0;
    const auto segments = log::list_segments(cfg->data_dir + "/log");
    if (segments) {
        for (const auto& s : *segments) {
            disk_bytes += s.disk_bytes;
            frame_bytes += s.bytes;
            compressed_segments += s.compressed ? 1 : 0;
        }
    }
    const double cancelled =
        static_cast<double>(after.cancelled_write_bytes - before.cancelled_write_bytes);
    const double written = static_cast<double>(after.stored() - before.stored());
    const double passed = static_cast<double>(after.wchar - before.wchar);
    std::printf(
        "# %llu records, checkpoint every %lld ms of ingest time, %.1f MiB of payload; "
        "write_bytes less cancelled_write_bytes %.1f MiB (cancelled %.1f MiB), wchar %.1f MiB\n",
        static_cast<unsigned long long>(records), static_cast<long long>(checkpoint_ms),
        double(payload_bytes) / 1048576.0, written / 1048576.0, cancelled / 1048576.0,
        passed / 1048576.0);
    std::printf("storage.bytes_written_per_payload_byte: %.2f ratio\n",
                written / static_cast<double>(payload_bytes));
    std::printf("storage.wchar_per_payload_byte: %.2f ratio\n",
                passed / static_cast<double>(payload_bytes));
    const double disk_per_payload =
        static_cast<double>(disk_bytes) / static_cast<double>(payload_bytes);
    std::printf(
        "# log: %zu segments (%zu compressed), %.1f MiB of frames, %.1f MiB on disk, "
        "%llu msg/s of ingest time\n",
        segments ? segments->size() : 0, compressed_segments, double(frame_bytes) / 1048576.0,
        double(disk_bytes) / 1048576.0, static_cast<unsigned long long>(rate));
    std::printf("storage.disk_bytes_per_payload_byte: %.3f ratio\n", disk_per_payload);
    std::printf("storage.days_at_200_msgs_per_s_per_32_gib: %.1f days\n",
                32.0 * 1073741824.0 / (disk_per_payload * 100.0 * 200.0 * 86400.0));
    // The run ends one record before a checkpoint is due (records is a multiple of the
    // interval's record count at the defaults), so the replay is a whole interval's log.
    const uint64_t records_since_checkpoint = records % static_cast<uint64_t>(checkpoint_ms) == 0
                                                  ? static_cast<uint64_t>(checkpoint_ms)
                                                  : records % static_cast<uint64_t>(checkpoint_ms);
    parts->reset();
    const auto t0 = std::chrono::steady_clock::now();
    auto reopened = firmware::ServiceParts::open(*cfg, clock);
    if (!reopened || !(*reopened)->host().recover([] { return false; })) {
        std::fprintf(stderr, "recovery failed\n");
        return 1;
    }
    const double recovery_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::printf("# recovery replayed ~%llu records (one checkpoint interval at 1000 msg/s)\n",
                static_cast<unsigned long long>(records_since_checkpoint));
    std::printf("storage.recovery_ms: %.1f ms\n", recovery_ms);
    reopened->reset();
    std::filesystem::remove_all(dir);
    return 0;
}
