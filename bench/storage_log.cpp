// Ingest log append rate beside a bare write() loop of the same framed bytes, in one run.
//
// storage.log_appends_per_s: LogWriter::append() of one record (100-byte payload, a typical
// telemetry topic), fsync=interval with sync() every second of steady_clock, as the ingest
// thread runs it. storage.bare_write_per_s: write() of the same frame size from a
// pre-built buffer, with the same fdatasync every second: the floor the log is compared to.
// Each figure is the median of 5 runs of ~2 s, alternating, in a temp dir on a real
// filesystem (the build dir or /var/tmp), removed afterwards.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "adapters/log/log_writer.h"

namespace {

using Clock = std::chrono::steady_clock;
using tidemark::log::FsyncPolicy;
using tidemark::log::LogOptions;
using tidemark::log::LogWriter;
using tidemark::log::RecordType;

constexpr double run_s = 2.0;
constexpr int repetitions = 5;
constexpr size_t payload_bytes = 100;
const std::string topic = "sensors/dev-0042/telemetry";

double seconds_since(Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
}

double run_log(const std::string& dir) {
    std::filesystem::remove_all(dir);
    LogOptions options;
    options.dir = dir;
    options.fsync = FsyncPolicy::interval;
    auto writer = LogWriter::open(options);
    if (!writer) {
        std::fprintf(stderr, "%s\n", writer.error().message.c_str());
        std::exit(1);
    }
    std::string payload(payload_bytes, 'p');
    uint64_t appends = 0;
    auto start = Clock::now();
    auto last_sync = start;
    while (true) {
        for (int i = 0; i < 1024; ++i) {
            payload[appends % payload_bytes] = static_cast<char>('a' + appends % 26);
            auto offset = (*writer)->append(RecordType::message, static_cast<int64_t>(appends),
                                            topic, payload);
            if (!offset) {
                std::fprintf(stderr, "%s\n", offset.error().message.c_str());
                std::exit(1);
            }
            ++appends;
        }
        auto now = Clock::now();
        if (now - last_sync >= std::chrono::seconds(1)) {
            if (!(*writer)->sync()) std::exit(1);
            last_sync = now;
        }
        if (std::chrono::duration<double>(now - start).count() >= run_s) break;
    }
    double elapsed = seconds_since(start);
    writer->reset();
    std::filesystem::remove_all(dir);
    return static_cast<double>(appends) / elapsed;
}

double run_bare(const std::string& dir) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    std::string path = dir + "/bare";
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) std::exit(1);
    std::vector<char> frame(tidemark::log::frame_bytes(topic.size(), payload_bytes), 'f');
    uint64_t writes = 0;
    auto start = Clock::now();
    auto last_sync = start;
    while (true) {
        for (int i = 0; i < 1024; ++i) {
            if (::write(fd, frame.data(), frame.size()) != static_cast<ssize_t>(frame.size())) {
                std::perror("write");
                std::exit(1);
            }
            ++writes;
        }
        auto now = Clock::now();
        if (now - last_sync >= std::chrono::seconds(1)) {
            ::fdatasync(fd);
            last_sync = now;
        }
        if (std::chrono::duration<double>(now - start).count() >= run_s) break;
    }
    double elapsed = seconds_since(start);
    ::close(fd);
    std::filesystem::remove_all(dir);
    return static_cast<double>(writes) / elapsed;
}

double median(std::vector<double> v) {
    std::ranges::sort(v);
    return v[v.size() / 2];
}

}  // namespace

int main() {
    const char* build = std::getenv("TIDEMARK_BUILD_DIR");
    std::string base = build != nullptr ? build : "/var/tmp";
    std::string dir = base + "/bench-storage-log-" + std::to_string(::getpid());
    std::vector<double> log_rates;
    std::vector<double> bare_rates;
    for (int rep = 0; rep < repetitions; ++rep) {
        log_rates.push_back(run_log(dir + "/log"));
        bare_rates.push_back(run_bare(dir + "/bare"));
        std::printf("run %d: log %.0f appends/s, bare %.0f writes/s\n", rep + 1, log_rates.back(),
                    bare_rates.back());
    }
    std::filesystem::remove_all(dir);
    double log_rate = median(log_rates);
    double bare_rate = median(bare_rates);
    std::printf("frame: %zu bytes (100-byte payload, %zu-byte topic)\n",
                static_cast<size_t>(tidemark::log::frame_bytes(topic.size(), payload_bytes)),
                topic.size());
    std::printf("storage.log_appends_per_s: %.0f appends/s\n", log_rate);
    std::printf("storage.bare_write_per_s: %.0f writes/s\n", bare_rate);
    std::printf("storage.log_append_ratio: %.2f ratio\n", log_rate / bare_rate);
    return 0;
}
