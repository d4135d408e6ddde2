// Helpers for the log tests: a scratch directory and whole-log reads.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "adapters/log/log_reader.h"
#include "adapters/log/log_writer.h"
#include "adapters/log/segment_files.h"

namespace tidemark::log::test {

/// A directory on a real filesystem (the build dir, else /var/tmp), removed at the end. With
/// in_memory, on /dev/shm when there is one: for loops of thousands of reopens, whose fsyncs
/// would otherwise take minutes and whose outcome does not depend on the filesystem.
class TempDir {
  public:
    explicit TempDir(bool in_memory = false) {
        const char* build = std::getenv("TIDEMARK_BUILD_DIR");
        std::string base = build != nullptr ? std::string(build) : "/var/tmp";
        if (in_memory && std::filesystem::is_directory("/dev/shm")) base = "/dev/shm";
        std::string pattern = base + "/tm-log-test-XXXXXX";
        TM_ASSERT(::mkdtemp(pattern.data()) != nullptr);
        path_ = pattern;
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(path_, ec);
    }
    const std::string& path() const { return path_; }
    std::string sub(const std::string& name) const { return path_ + "/" + name; }

  private:
    std::string path_;
};

struct Owned {
    uint64_t offset = 0;
    uint64_t next_offset = 0;
    RecordType type = RecordType::tick;
    int64_t ingest_ms = 0;
    std::string topic;
    std::string payload;
    std::string reason;  // malformed records only
    bool operator==(const Owned&) const = default;
};

inline Owned own(const Record& r) {
    return Owned{r.offset,
                 r.next_offset,
                 r.type,
                 r.ingest_ms,
                 std::string(r.topic),
                 std::string(r.payload),
                 std::string(r.reason)};
}

/// Every record from `from` to the current end. Fails the test on a read error.
inline std::vector<Owned> read_all(const std::string& dir, uint64_t from = UINT64_MAX) {
    auto reader = LogReader::open(dir);
    REQUIRE(reader.has_value());
    if (from != UINT64_MAX) REQUIRE((*reader)->seek(from).has_value());
    std::vector<Owned> out;
    Record rec;
    while (true) {
        auto more = (*reader)->next(rec);
        INFO((more ? std::string() : more.error().message));
        REQUIRE(more.has_value());
        if (!*more) break;
        out.push_back(own(rec));
    }
    return out;
}

// Every record from `from`, read as the service reads: bounded by the writer's end.
inline std::vector<Owned> read_bounded(const std::string& dir, uint64_t from, uint64_t end,
                                       ReaderStats* stats = nullptr) {
    auto reader = LogReader::open(dir).value();
    REQUIRE(reader->seek(from).has_value());
    std::vector<Owned> out;
    Record rec;
    while (true) {
        auto more = reader->next(rec, end);
        INFO((more ? std::string() : more.error().message));
        REQUIRE(more.has_value());
        if (!*more) break;
        out.push_back(own(rec));
    }
    REQUIRE(reader->position() == end);
    if (stats != nullptr) *stats = reader->stats();
    return out;
}

inline std::string file_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

inline LogOptions options_for(const std::string& dir, uint64_t segment_bytes = 64 << 20) {
    LogOptions options;
    options.dir = dir;
    options.segment_bytes = segment_bytes;
    return options;
}

inline std::unique_ptr<LogWriter> open_writer(const LogOptions& options) {
    auto writer = LogWriter::open(options);
    INFO((writer ? std::string() : writer.error().message));
    REQUIRE(writer.has_value());
    return std::move(*writer);
}

/// Appends and returns what a reader must see.
inline Owned append(LogWriter& writer, RecordType type, int64_t ingest_ms, const std::string& topic,
                    const std::string& payload) {
    auto offset = writer.append(type, ingest_ms, topic, payload);
    INFO((offset ? std::string() : offset.error().message));
    REQUIRE(offset.has_value());
    // The stored ingest time: the writer never lets it go back.
    return Owned{*offset, writer.end_offset(), type, writer.stats().last_ingest_ms, topic, payload,
                 {}};
}

/// XORs the byte at `at` of a file with `mask`: a flipped bit, a bad sector's worth of one.
inline void flip_byte(const std::string& path, uint64_t at, char mask = 0x5A) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    REQUIRE(f.good());
    f.seekg(static_cast<std::streamoff>(at));
    char c = 0;
    f.get(c);
    f.seekp(static_cast<std::streamoff>(at));
    f.put(static_cast<char>(c ^ mask));
}

/// The segment file of `dir` that holds global offset `offset`.
inline SegmentFile segment_holding(const std::string& dir, uint64_t offset) {
    auto segments = list_segments(dir).value();
    auto it = std::ranges::upper_bound(segments, offset, {}, &SegmentFile::first_offset);
    REQUIRE(it != segments.begin());
    return *std::prev(it);
}

/// `records` without the ones at the given indexes.
inline std::vector<Owned> without(std::vector<Owned> records, std::vector<size_t> indexes) {
    std::ranges::sort(indexes, std::greater<>());
    for (size_t i : indexes)
        records.erase(records.begin() + static_cast<long>(i));
    return records;
}

inline std::string payload_of(size_t i, size_t bytes) {
    std::string p = "#" + std::to_string(i) + ":";
    while (p.size() < bytes)
        p.push_back(static_cast<char>('a' + (i + p.size()) % 26));
    p.resize(bytes);
    return p;
}

// Runs this test binary again as a child, with only the test cases tagged `child_tag` (hidden,
// "[.name]"), TIDEMARK_CRASH_AT=`point` and TM_LOG_CRASH_DIR=`dir`; returns its exit status, 137
// when the crash point killed it. `name` is the child's argv[0].
inline int run_crash_child(const char* name, const char* child_tag, const char* point,
                           const std::string& dir) {
    pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        ::setenv("TIDEMARK_CRASH_AT", point, 1);
        ::setenv("TM_LOG_CRASH_DIR", dir.c_str(), 1);
        std::string argv0 = name;
        std::string filter = child_tag;
        char* argv[] = {argv0.data(), filter.data(), nullptr};
        // Under qemu-user without binfmt_misc (CI's arm64 stage) the exec fails with ENOEXEC:
        // say so, not only as status 3 (scripts/cross-test runs these binaries without [crash]).
        ::execv("/proc/self/exe", argv);
        const char* text = ::strerror(errno);
        const char prefix[] = "run_crash_child: execv(/proc/self/exe) failed: ";
        (void)!::write(2, prefix, sizeof prefix - 1);
        (void)!::write(2, text, std::strlen(text));
        (void)!::write(2, "\n", 1);
        ::_exit(3);
    }
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    REQUIRE(WIFEXITED(status));
    return WEXITSTATUS(status);
}

}  // namespace tidemark::log::test
