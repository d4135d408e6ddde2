// A full disk: append returns an error naming the file and the cause, nothing half-written
// stays behind, and appends work again once space is freed. A compressed log whose seal finds no
// room for its blocks keeps its records durable in the stage (sync() succeeds, a restart opens)
// and seals them once there is room.
#include <sys/mount.h>
#include <sys/resource.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <random>
#include <tuple>

#include "adapters/log/segment_files.h"
#include "log_test_support.h"

using namespace tidemark::log;
using namespace tidemark::log::test;

namespace {

uint64_t bytes_on_disk(const std::string& dir) {
    uint64_t total = 0;
    auto segments = list_segments(dir).value();
    for (const auto& seg : segments)
        total += seg.bytes;
    return total;
}

// 1000 bytes that do not compress: a compressed log's blocks then need as many pages as its
// stage, and cannot hide in the .zlog's last partial page.
std::string noise_of(size_t i) {
    std::mt19937_64 random(i);
    std::string p(1000, '\0');
    for (char& c : p)
        c = static_cast<char>(random());
    return p;
}

// Appends 1 KiB records until one fails; returns what was appended and the error.
std::pair<std::vector<Owned>, std::string> append_until_full(LogWriter& writer,
                                                             std::vector<Owned> expected,
                                                             bool noise = false) {
    for (size_t i = 0; i < 10'000; ++i) {
        uint64_t end = writer.end_offset();
        const std::string payload =
            noise ? noise_of(expected.size()) : payload_of(expected.size(), 1000);
        auto offset = writer.append(RecordType::message, static_cast<int64_t>(i), "t", payload);
        if (!offset) {
            REQUIRE(writer.end_offset() == end);  // nothing appended
            return {expected, offset.error().message};
        }
        expected.push_back(Owned{*offset,
                                 writer.end_offset(),
                                 RecordType::message,
                                 static_cast<int64_t>(i),
                                 "t",
                                 payload,
                                 {}});
    }
    FAIL("the disk never filled");
    return {};
}

void check_full_then_freed(const std::string& dir, const char* cause, auto free_space) {
    auto writer = open_writer(options_for(dir, 64 << 10));
    auto [expected, error] = append_until_full(*writer, {});
    REQUIRE(expected.size() > 10);
    INFO(error);
    REQUIRE_THAT(error, Catch::Contains(dir));
    REQUIRE_THAT(error, Catch::Contains(cause));
    REQUIRE(writer->stats().append_errors == 1);
    // The partial frame was rolled back: the files hold exactly the good records.
    REQUIRE(bytes_on_disk(dir) == writer->total_bytes());
    REQUIRE(read_all(dir) == expected);
    // Still full: another error, still consistent (back-pressure retries must be harmless).
    REQUIRE_FALSE(writer->append(RecordType::message, 0, "t", payload_of(0, 1000)).has_value());
    REQUIRE(bytes_on_disk(dir) == writer->total_bytes());
    REQUIRE(writer->sync().has_value());

    free_space();
    for (size_t i = 0; i < 5; ++i) {
        expected.push_back(
            append(*writer, RecordType::message, 1'000'000, "t", payload_of(i, 1000)));
    }
    REQUIRE(read_all(dir) == expected);
    writer.reset();
    auto reopened = open_writer(options_for(dir, 64 << 10));
    REQUIRE(reopened->stats().tail_truncations == 0);
    REQUIRE(reopened->end_offset() == expected.back().next_offset);
}

// A small tmpfs mounted for one test, unmounted when it ends.
struct SmallDisk {
    explicit SmallDisk(TempDir& tmp) : path(tmp.sub("mnt")) {
        std::filesystem::create_directories(path);
        mounted = ::mount("tmpfs", path.c_str(), "tmpfs", 0, "size=512k") == 0;
    }
    ~SmallDisk() {
        if (mounted) ::umount2(path.c_str(), MNT_DETACH);
    }
    std::string fill(size_t bytes) const {
        std::string filler = path + "/filler";
        std::ofstream out(filler, std::ios::binary);
        out << std::string(bytes, 'f');
        return filler;
    }
    std::string path;
    bool mounted = false;
};

}  // namespace

TEST_CASE("a full disk (ENOSPC on a small tmpfs) is an error, then recoverable", "[log]") {
    TempDir tmp;
    SmallDisk disk(tmp);
    if (!disk.mounted) {
        WARN("cannot mount a tmpfs here (not root?): ENOSPC case skipped, EFBIG case still runs");
        return;
    }
    std::string filler = disk.fill(200 << 10);
    check_full_then_freed(disk.path + "/log", "No space left on device",
                          [&] { std::filesystem::remove(filler); });
}

TEST_CASE(
    "a compressed log on a full disk: the seal is deferred, the stage made durable, the "
    "records sealed once there is room",
    "[log]") {
    TempDir tmp;
    SmallDisk disk(tmp);
    if (!disk.mounted) {
        WARN("cannot mount a tmpfs here (not root?): skipped");
        return;
    }
    const std::string dir = disk.path + "/log";
    const std::string filler = disk.fill(200 << 10);
    LogOptions options = options_for(dir, 64 << 10);
    options.compression = Compression::zstd;
    std::vector<Owned> expected;
    {
        auto writer = open_writer(options);
        // Sealed while there is room: some blocks exist before the disk fills.
        for (size_t i = 0; i < 20; ++i)
            expected.push_back(append(*writer, RecordType::message, 0, "t", noise_of(i)));
        REQUIRE(writer->sync().has_value());
        REQUIRE(writer->stats().seals > 0);
        // The stage takes every page that is left: no room for a block.
        std::string error;
        std::tie(expected, error) = append_until_full(*writer, std::move(expected), true);
        REQUIRE_THAT(error, Catch::Contains("No space left on device"));
        REQUIRE(writer->durable_offset() < writer->end_offset());
        // Before: the seal failed, and with it sync() and every checkpoint, until room was made.
        auto synced = writer->sync();
        INFO((synced ? std::string() : synced.error().message));
        REQUIRE(synced.has_value());
        REQUIRE_FALSE(writer->poisoned());
        REQUIRE(writer->durable_offset() == writer->end_offset());
        LogStats stats = writer->stats();
        REQUIRE(stats.seals_deferred == 1);
        REQUIRE(stats.seal_deferred);
        REQUIRE_THAT(writer->seal_error(), Catch::Contains("No space left on device"));
        REQUIRE_THAT(writer->seal_error(), Catch::Contains(".zlog"));
        REQUIRE(read_all(dir) == expected);
        // A second sync on the still-full disk defers again and stays consistent.
        REQUIRE(writer->sync().has_value());
        REQUIRE(writer->stats().seals_deferred == 2);
        REQUIRE(read_all(dir) == expected);
    }
    {
        // A restart on the full disk opens (it used to fail re-sealing the stage) and reads all.
        auto writer = open_writer(options);
        REQUIRE(writer->end_offset() == expected.back().next_offset);
        REQUIRE(writer->stats().seals_deferred == 1);
        REQUIRE(writer->stats().tail_truncations == 0);
        REQUIRE(read_all(dir) == expected);

        std::filesystem::remove(filler);
        REQUIRE(writer->sync().has_value());
        LogStats stats = writer->stats();
        REQUIRE_FALSE(stats.seal_deferred);
        REQUIRE(writer->seal_error().empty());
        REQUIRE(stats.seals > 0);
        for (size_t i = 0; i < 5; ++i) {
            expected.push_back(
                append(*writer, RecordType::message, 1'000'000, "t", payload_of(i, 1000)));
        }
        REQUIRE(writer->sync().has_value());
        REQUIRE(read_all(dir) == expected);
    }
    auto reopened = open_writer(options);
    REQUIRE(reopened->stats().tail_truncations == 0);
    REQUIRE(reopened->stats().seals_deferred == 0);
    REQUIRE(reopened->end_offset() == expected.back().next_offset);
    REQUIRE(read_all(dir) == expected);
    // Every segment sealed: no stage is left but the active one's.
    size_t stages = 0;
    for (const auto& entry : std::filesystem::directory_iterator(dir))
        stages += entry.path().string().ends_with(".stage") ? 1 : 0;
    REQUIRE(stages <= 1);
}

TEST_CASE("a file size limit (EFBIG) is an error, then recoverable", "[log]") {
    TempDir tmp;
    // With SIGXFSZ ignored, writes past RLIMIT_FSIZE fail with EFBIG, like a full disk would.
    auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
    rlimit old_limit{};
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &old_limit) == 0);
    rlimit limit = old_limit;
    limit.rlim_cur = 40 << 10;  // below segment_bytes: the first segment hits it
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &limit) == 0);
    check_full_then_freed(tmp.sub("log"), "File too large",
                          [&] { REQUIRE(::setrlimit(RLIMIT_FSIZE, &old_limit) == 0); });
    ::setrlimit(RLIMIT_FSIZE, &old_limit);
    std::signal(SIGXFSZ, old_handler);
}
