// A full disk: append returns an error naming the file and the cause, nothing half-written
// stays behind, and appends work again once space is freed.
#include <sys/mount.h>
#include <sys/resource.h>

#include <csignal>
#include <filesystem>
#include <fstream>

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

// Appends 1 KiB records until one fails; returns what was appended and the error.
std::pair<std::vector<Owned>, std::string> append_until_full(LogWriter& writer,
                                                             std::vector<Owned> expected) {
    for (size_t i = 0; i < 10'000; ++i) {
        uint64_t end = writer.end_offset();
        auto offset = writer.append(RecordType::message, static_cast<int64_t>(i), "t",
                                    payload_of(expected.size(), 1000));
        if (!offset) {
            REQUIRE(writer.end_offset() == end);  // nothing appended
            return {expected, offset.error().message};
        }
        expected.push_back(Owned{*offset,
                                 writer.end_offset(),
                                 RecordType::message,
                                 static_cast<int64_t>(i),
                                 "t",
                                 payload_of(expected.size(), 1000),
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

}  // namespace

TEST_CASE("a full disk (ENOSPC on a small tmpfs) is an error, then recoverable", "[log]") {
    TempDir tmp;
    std::string mnt = tmp.sub("mnt");
    std::filesystem::create_directories(mnt);
    if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=512k") != 0) {
        WARN("cannot mount a tmpfs here (not root?): ENOSPC case skipped, EFBIG case still runs");
        return;
    }
    struct Unmount {
        std::string path;
        ~Unmount() { ::umount2(path.c_str(), MNT_DETACH); }
    } unmount{mnt};
    std::string filler = mnt + "/filler";
    {
        std::ofstream out(filler, std::ios::binary);
        out << std::string(200 << 10, 'f');
    }
    check_full_then_freed(mnt + "/log", "No space left on device",
                          [&] { std::filesystem::remove(filler); });
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
