// The process the crash test kills: the daemon's engine-thread loop (firmware::ServiceParts) over
// the generated stream of crash_stream.h, with the forwarder's PUBACK path simulated by a file.
//
//   crash_child --data-dir D --records N --seed S --delivered FILE
//
// Every run opens the store and the log, recovers, and continues the stream where the log ends,
// so a run killed at any moment and restarted produces what one uninterrupted run produces.
// Exit codes: 0 done, 2 usage or daemon error, 3 the log is not a prefix of the stream. A crash
// point (TIDEMARK_CRASH_AT) exits with 137.
//
// The delivered FILE holds batches: one line "D <id> <payload>" per row, then "C" once the rows
// were deleted from the outbox. A batch without its "C" was cut by a kill between the upstream
// PUBACK and the delete: those rows are sent again (at-least-once upstream, allowed). A row sent
// again after its "C" would be a duplicate made by the appliance.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "adapters/config/config.h"
#include "adapters/lmdb/store.h"
#include "adapters/log/log_reader.h"
#include "adapters/log/log_writer.h"
#include "firmware/clock.h"
#include "firmware/crash_arm.h"
#include "firmware/service/service_parts.h"
#include "tests/crash/crash_stream.h"

namespace {

using namespace tidemark;

// The intervals of the loop, in messages. Chosen so that each crash point is reached many
// times in a 20k-message run: ~300 steps, ~66 deliveries, 20 checkpoints.
constexpr uint64_t step_every = 64;
constexpr uint64_t deliver_every = 300;
constexpr uint64_t checkpoint_every = 1000;
constexpr size_t step_records_max = 4096;
constexpr size_t deliver_rows_max = 50;  // one forwarder batch

[[noreturn]] void die(const std::string& message, int code = 2) {
    std::fprintf(stderr, "crash_child: %s\n", message.c_str());
    std::exit(code);
}

// fsync "never": a killed process loses nothing it wrote (the page cache survives it), and step()
// may then read up to the written end. With "interval" step() reads only the durable end, which
// only a checkpoint or maybe_sync() moves; "always" costs an fdatasync per record. Power loss is
// the power-loss test's subject, not this one's. Compaction is off: with it on, which rows
// survive depends on when the forwarder claimed them, which legitimately differs between runs.
// Compressed segments (not the default yet): the seal's crash points are among the kills, and
// plain segments' kills are the soak's, kill9's and log_test's.
std::string config_json(const std::string& data_dir) {
    const std::string common = R"(
      "topic": "sensors/+/telemetry",
      "key": "topic:1",
      "timestamp": {"pointer": "/ts", "format": "epoch_ms"},
      "fields": {"v": "/v"},
      "aggregates": {"n": {"fn": "count"}, "sum": {"fn": "sum", "field": "v"},
                     "max": {"fn": "max", "field": "v"}},
      "watermark": {"delay": "1s"},
      "limits": {"max_keys": 100, "max_open_windows": 10000},)";
    return R"({
  "node_id": "crash-gw",
  "data_dir": ")" +
           data_dir + R"(",
  "storage": {"map_size": "256MiB", "fsync": "never", "segment_size": "64KiB",
              "log_compression": "zstd",
              "log_retention": {"max_age": "36500d", "max_bytes": "1GiB"}},
  "source": {"uri": "tcp://127.0.0.1:1"},
  "upstream": {"uri": "tcp://127.0.0.1:1", "compact_superseded": false,
               "outbox": {"max_bytes": "64MiB", "when_full": "pause_ingest"}},
  "pipelines": [
    {"name": "tumbling", )" +
           common + R"(
     "window": {"type": "tumbling", "size": "10s"},
     "late": {"allowed_lateness": "5s", "too_late": "drop", "corrections": "retract"}},
    {"name": "hopping", )" +
           common + R"(
     "window": {"type": "hopping", "size": "30s", "advance": "10s"},
     "late": {"allowed_lateness": "5s", "too_late": "side_output", "corrections": "upsert"}},
    {"name": "session", )" +
           common + R"(
     "window": {"type": "session", "gap": "300ms", "max_duration": "20s"},
     "late": {"allowed_lateness": "5s", "too_late": "drop", "corrections": "retract"}}
  ]
})";
}

struct Args {
    std::string data_dir;
    uint64_t records = 0;
    uint64_t seed = 0;
    std::string delivered;
};

Args parse_args(int argc, char** argv) {
    Args a;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string flag = argv[i];
        const char* value = argv[i + 1];
        if (flag == "--data-dir")
            a.data_dir = value;
        else if (flag == "--records")
            a.records = std::strtoull(value, nullptr, 10);
        else if (flag == "--seed")
            a.seed = std::strtoull(value, nullptr, 10);
        else if (flag == "--delivered")
            a.delivered = value;
        else
            die("unknown flag " + flag);
    }
    if (a.data_dir.empty() || a.records == 0 || a.delivered.empty())
        die("usage: crash_child --data-dir D --records N --seed S --delivered FILE");
    return a;
}

// A kill while writing a batch can leave a partial line: cut it, so the next batch starts on a
// line of its own. (The rows of a cut batch are still in the outbox and are written again.)
int open_delivered(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) die("cannot open " + path + ": " + std::strerror(errno));
    off_t size = ::lseek(fd, 0, SEEK_END);
    off_t keep = size;
    char c = 0;
    while (keep > 0 && ::pread(fd, &c, 1, keep - 1) == 1 && c != '\n')
        --keep;
    if (keep != size && ::ftruncate(fd, keep) != 0)
        die("cannot truncate " + path + ": " + std::strerror(errno));
    return fd;
}

void write_all(int fd, const std::string& text) {
    size_t done = 0;
    while (done < text.size()) {
        ssize_t n = ::write(fd, text.data() + done, text.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) die(std::string("writing the delivered file: ") + std::strerror(errno));
        done += static_cast<size_t>(n);
    }
}

// The forwarder's PUBACK path: the receiver has the rows (durably) before they leave the outbox.
void deliver(firmware::ServiceParts& parts, int fd) {
    auto rows = parts.host().store().outbox_peek(0, deliver_rows_max);
    if (!rows) die("outbox_peek: " + rows.error().message);
    if (rows->empty()) return;
    std::string text;
    std::vector<uint64_t> seqs;
    for (const auto& r : *rows) {
        text += "D " + std::to_string(r.id) + " " + r.payload + "\n";
        seqs.push_back(r.seq);
    }
    write_all(fd, text);
    if (::fdatasync(fd) != 0) die(std::string("fdatasync delivered: ") + std::strerror(errno));
    if (auto ok = parts.host().store().outbox_delete(seqs); !ok)
        die("outbox_delete: " + ok.error().message);
    write_all(fd, "C\n");
}

void step_to_end(firmware::ServiceParts& parts) {
    for (;;) {
        auto n = parts.host().step(step_records_max, false);
        if (!n) die("step: " + n.error().message);
        if (*n == 0) break;
    }
    if (!parts.host().can_checkpoint())
        die("the outbox refused a batch (is outbox.max_bytes too small?)");
}

void checkpoint(firmware::ServiceParts& parts) {
    step_to_end(parts);
    if (auto ok = parts.host().checkpoint(); !ok) die("checkpoint: " + ok.error().message);
}

// Counts the log's records, checking that they are exactly the first items of the stream: a lost
// or doubled record (a bad tail cut, an append repeated) stops the run here.
uint64_t items_in_log(const Args& args, firmware::ServiceParts& parts) {
    auto reader = log::LogReader::open(args.data_dir + "/log");
    if (!reader) die("opening the log: " + reader.error().message);
    const uint64_t end = parts.host().log().end_offset();
    const uint64_t items = crash_test::stream_items(args.records);
    uint64_t k = 0;
    log::Record rec;
    for (;; ++k) {
        auto next = (*reader)->next(rec, end);
        if (!next) die("reading the log: " + next.error().message);
        if (!*next) break;
        if (k >= items) die("the log holds more records than the stream", 3);
        const crash_test::StreamItem want = crash_test::stream_item(args.seed, args.records, k);
        if (rec.type != want.type || rec.ingest_ms != want.ingest_ms || rec.topic != want.topic ||
            rec.payload != want.payload)
            die("log record " + std::to_string(k) + " at offset " + std::to_string(rec.offset) +
                    " is not stream item " + std::to_string(k) + " (" + std::string(rec.payload) +
                    " vs " + want.payload + ")",
                3);
    }
    return k;
}

}  // namespace

int main(int argc, char** argv) {
    firmware::arm_crash_points_from_env();
    const Args args = parse_args(argc, argv);
    auto config = config::parse_config(config_json(args.data_dir), "/");
    if (!config) die("config: " + config::format_errors(config.error()));
    static const firmware::SystemClock clock;
    auto parts = firmware::ServiceParts::open(*config, clock);
    if (!parts) die("open: " + parts.error().message);
    firmware::ServiceParts& p = **parts;
    if (auto replayed = p.host().recover([] { return false; }); !replayed)
        die("recover: " + replayed.error().message);
    const int delivered_fd = open_delivered(args.delivered);

    const uint64_t items = crash_test::stream_items(args.records);
    for (uint64_t k = items_in_log(args, p); k < items; ++k) {
        const crash_test::StreamItem item = crash_test::stream_item(args.seed, args.records, k);
        auto appended = p.host().log().append(item.type, item.ingest_ms, item.topic, item.payload);
        if (!appended) die("append: " + appended.error().message);
        if (!item.is_message) continue;
        const uint64_t done = item.seq + 1;
        if (done % step_every == 0) step_to_end(p);
        if (done % deliver_every == 0) deliver(p, delivered_fd);
        if (done % checkpoint_every == 0) checkpoint(p);
    }
    checkpoint(p);
    ::close(delivered_fd);
    return 0;
}
