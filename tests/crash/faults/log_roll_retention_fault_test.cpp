// I/O errors on the log's segment roll and on retention's unlink (issue 14), injected with
// tests/crash/faults/fault_fs.c on real files: each gives an error naming the file and the errno,
// loses no record that was acknowledged (append returned its offset), never leaves the writer's
// view of the log different from the files on disk, and is over once the fault clears.
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <vector>

#include "fault_fs.h"
#include "tests/adapters/log/log_test_support.h"

using namespace tidemark::log;
using namespace tidemark::log::test;

namespace {

// Disarms the shim when a test ends, also when a REQUIRE fails.
struct Faults {
    Faults() { tm_fs_clear(); }
    ~Faults() { tm_fs_clear(); }
};

constexpr uint64_t segment_bytes = 1024;

// Every payload the same length, so that every frame is: the test knows when the next rolls.
std::string payload_of(int n) {
    std::string digits = std::to_string(n);
    digits.insert(0, 6 - digits.size(), '0');
    return "record " + digits + " " + std::string(150, static_cast<char>('a' + n % 26));
}

// Appends until the next append must roll to a new segment; returns what was appended.
std::vector<Owned> fill_segment(LogWriter& writer, int& n) {
    std::vector<Owned> out;
    const uint64_t segments = writer.stats().segments;
    for (;;) {
        const uint64_t before_end = writer.end_offset();
        out.push_back(append(writer, RecordType::message, n, "t", payload_of(n)));
        ++n;
        REQUIRE(writer.stats().segments == segments);
        const uint64_t frame_bytes = writer.end_offset() - before_end;
        const uint64_t active_bytes = list_segments(writer.options().dir).value().back().bytes;
        if (active_bytes + frame_bytes > segment_bytes) return out;
    }
}

// The files on disk, as (first_offset, bytes).
std::vector<std::pair<uint64_t, uint64_t>> files_of(const std::string& dir) {
    std::vector<std::pair<uint64_t, uint64_t>> out;
    const std::vector<SegmentFile> files = list_segments(dir).value();
    for (const SegmentFile& f : files)
        out.emplace_back(f.first_offset, f.bytes);
    return out;
}

uint64_t bytes_on_disk(const std::string& dir) {
    uint64_t total = 0;
    for (const auto& [first, bytes] : files_of(dir))
        total += bytes;
    return total;
}

}  // namespace

TEST_CASE("a failed segment roll (create or directory sync) is an error; the retry rolls",
          "[faults][log]") {
    struct Case {
        tm_fs_call call;
        int err;
        long times;
        const char* what;
    };
    const Case c = GENERATE(Case{TM_FS_OPEN, EIO, 1, "cannot create log segment"},
                            Case{TM_FS_OPEN, ENOSPC, 3, "cannot create log segment"},
                            Case{TM_FS_OPEN, EMFILE, 1, "cannot create log segment"},
                            Case{TM_FS_FSYNC, EIO, 1, "cannot sync log directory"},
                            Case{TM_FS_FSYNC, ENOSPC, 2, "cannot sync log directory"});
    const bool restart = GENERATE(false, true);
    INFO(c.what << ": " << std::strerror(c.err) << " x" << c.times
                << (restart ? ", then a restart" : ""));
    Faults faults;
    TempDir tmp;
    auto writer = open_writer(options_for(tmp.path(), segment_bytes));
    int n = 0;
    std::vector<Owned> acknowledged = fill_segment(*writer, n);
    const uint64_t end_before = writer->end_offset();
    const std::string next_segment = segment_path(tmp.path(), end_before);

    // The fault hits the roll: the new segment's file, or the directory's fsync after it.
    tm_fs_arm(c.call, c.call == TM_FS_OPEN ? next_segment.c_str() : tmp.path().c_str(), c.err,
              c.times);
    for (long i = 0; i < c.times; ++i) {
        auto failed = writer->append(RecordType::message, n, "t", payload_of(n));
        REQUIRE_FALSE(failed.has_value());
        CHECK_THAT(failed.error().message, Catch::Contains(c.what));
        CHECK_THAT(failed.error().message, Catch::Contains(std::strerror(c.err)));
        CHECK(writer->end_offset() == end_before);
        CHECK_FALSE(writer->poisoned());
    }
    CHECK(tm_fs_failed(c.call) == c.times);
    CHECK(writer->stats().append_errors == static_cast<uint64_t>(c.times));

    if (restart) {
        // Killed here: the directory may hold the new, empty segment (after a failed fsync).
        writer.reset();
        writer = open_writer(options_for(tmp.path(), segment_bytes));
        CHECK(writer->end_offset() == end_before);
    }
    // The fault is over: the same record goes in, at the offset the failed ones did not take
    // (in the new segment, after its anchor).
    Owned rolled = append(*writer, RecordType::message, n, "t", payload_of(n));
    ++n;
    CHECK(rolled.offset == end_before + anchor_frame_bytes);
    acknowledged.push_back(rolled);
    for (int i = 0; i < 20; ++i, ++n)
        acknowledged.push_back(append(*writer, RecordType::message, n, "t", payload_of(n)));
    REQUIRE(writer->sync());

    CHECK(read_all(tmp.path()) == acknowledged);
    writer.reset();
    auto reopened = open_writer(options_for(tmp.path(), segment_bytes));
    CHECK(reopened->stats().damaged_regions == 0);
    CHECK(reopened->stats().tail_truncations == 0);
    CHECK(read_all(tmp.path()) == acknowledged);
}

TEST_CASE("a failed unlink in retention is an error; the files stay counted and go on the retry",
          "[faults][log]") {
    const int err = GENERATE(EIO, EBUSY, EACCES);
    // Which of the doomed segments refuses: the oldest, or one after a removed one.
    const size_t refusing = GENERATE(size_t{0}, size_t{2});
    INFO(std::strerror(err) << ", doomed segment " << refusing << " refuses");
    Faults faults;
    TempDir tmp;
    LogOptions options = options_for(tmp.path(), segment_bytes);
    options.retention_bytes_max = 3 * segment_bytes;
    auto writer = open_writer(options);
    std::vector<Owned> acknowledged;
    for (int n = 0; n < 80; ++n)
        acknowledged.push_back(append(*writer, RecordType::message, n, "t", payload_of(n)));
    REQUIRE(writer->sync());
    const auto files = files_of(tmp.path());
    REQUIRE(files.size() >= 10);

    tm_fs_arm(TM_FS_UNLINK, segment_path(tmp.path(), files[refusing].first).c_str(), err, 1);
    auto failed = writer->apply_retention(writer->end_offset(), 0);
    REQUIRE_FALSE(failed.has_value());
    CHECK_THAT(failed.error().message, Catch::Contains("cannot remove log segment"));
    CHECK_THAT(failed.error().message, Catch::Contains(std::strerror(err)));
    CHECK(tm_fs_failed(TM_FS_UNLINK) == 1);
    // What the writer counts is what the disk holds: the refused segment is still retained,
    // and the retained log has no hole (a reader from its first file reads to the end).
    const auto left = files_of(tmp.path());
    CHECK(left.front().first == files[refusing].first);
    CHECK(writer->first_offset() == left.front().first);
    CHECK(writer->stats().segments == left.size());
    CHECK(writer->total_bytes() == bytes_on_disk(tmp.path()));
    const auto retained = read_all(tmp.path());
    REQUIRE_FALSE(retained.empty());
    CHECK(retained.front().offset == left.front().first + anchor_frame_bytes);  // its anchor
    CHECK(retained.back() == acknowledged.back());

    // The fault is over: the next retention removes what the failed one could not.
    auto retried = writer->apply_retention(writer->end_offset(), 0);
    INFO((retried ? std::string() : retried.error().message));
    REQUIRE(retried.has_value());
    CHECK(retried->segments_removed >= 1);
    CHECK(bytes_on_disk(tmp.path()) <= options.retention_bytes_max + segment_bytes);
    CHECK(writer->total_bytes() == bytes_on_disk(tmp.path()));
    CHECK(writer->first_offset() == files_of(tmp.path()).front().first);
    CHECK(writer->stats().segments_removed == files.size() - files_of(tmp.path()).size());
    const auto after = read_all(tmp.path());
    REQUIRE_FALSE(after.empty());
    CHECK(after.back() == acknowledged.back());
    CHECK(after.front().offset == writer->first_offset() + anchor_frame_bytes);
}
