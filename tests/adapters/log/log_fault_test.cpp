// I/O errors injected on the real segment files (tests/support/fault_io.c): a failed write is
// rolled back and the writer goes on; a failed fdatasync poisons it and cuts what the disk may
// not hold; a reader never stitches the bytes of a rolled-back frame to the ones written in
// its place (issue 17, defects 3 and 14).
#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>

#include "fault_io.h"
#include "log_test_support.h"

using namespace tidemark::log;
using namespace tidemark::log::test;

namespace {

// Disarms the shim when a test ends, also when a REQUIRE fails.
struct Faults {
    explicit Faults(const std::string& path_part) { tm_fault_watch(path_part.c_str()); }
    ~Faults() { tm_fault_clear(); }
};

// Runs between the short write of a frame and the error that ends it.
void run_between(void* arg) {
    (*static_cast<std::function<void()>*>(arg))();
}

}  // namespace

// The shim itself: every other test here trusts it to pass offsets through. On armhf the log
// writer calls pwritev64 and ftruncate64 (64-bit offsets on a 32-bit target); a shim that
// forwarded them to libc's 32-bit pwritev and ftruncate wrote at garbage offsets.
TEST_CASE("the fault shim passes 64-bit file offsets through, watched or not", "[log]") {
    TempDir tmp;
    const std::string path = tmp.sub("sparse");
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    REQUIRE(fd >= 0);
    for (bool watched : {false, true}) {
        INFO((watched ? "watched" : "not watched"));
        Faults faults(watched ? tmp.path() : std::string("/no/such/dir"));
        // Past 4 GiB, so that neither a 32-bit offset nor the high word alone can hold it.
        const uint64_t length = (uint64_t{5} << 30) + (watched ? 7 : 3);
        REQUIRE(::ftruncate(fd, static_cast<off_t>(length)) == 0);
        REQUIRE(std::filesystem::file_size(path) == length);
        const uint64_t at = (uint64_t{4} << 30) + 4099;
        char text[] = "abc";
        iovec iov{text, 3};
        REQUIRE(::pwritev(fd, &iov, 1, static_cast<off_t>(at)) == 3);
        char back[3] = {};
        REQUIRE(::pread(fd, back, 3, static_cast<off_t>(at)) == 3);
        REQUIRE(std::string(back, 3) == "abc");
        REQUIRE(std::filesystem::file_size(path) == length);
        REQUIRE(tm_fault_calls(TM_FAULT_PWRITEV) == (watched ? 1 : 0));
        REQUIRE(tm_fault_calls(TM_FAULT_FTRUNCATE) == (watched ? 1 : 0));
    }
    ::close(fd);
}

TEST_CASE("a reader that buffered part of a rolled-back frame reads the record written there",
          "[log]") {
    // The replacement is shorter than the failed frame (stale bytes would leave it looking
    // incomplete) or longer (stale bytes would make a frame with a wrong CRC).
    for (size_t replacement_bytes : {size_t{10}, size_t{400}}) {
        for (bool bounded : {false, true}) {
            INFO("replacement payload " << replacement_bytes << (bounded ? ", bounded" : ""));
            TempDir tmp;
            auto writer = open_writer(options_for(tmp.path()));
            Owned first = append(*writer, RecordType::message, 1, "a", payload_of(1, 60));
            auto reader = LogReader::open(tmp.path()).value();
            auto bound = [&] { return bounded ? writer->end_offset() : UINT64_MAX; };

            Faults faults(tmp.path());
            Record rec;
            tidemark::Result<bool> during = false;
            std::function<void()> read_partial = [&] {
                // One read takes the first record and the start of the failing frame.
                during = reader->next(rec, bound());
                if (during && *during) REQUIRE(own(rec) == first);
            };
            tm_fault_arm_write(ENOSPC, 30, run_between, &read_partial);
            auto failed = writer->append(RecordType::message, 2, "b", payload_of(2, 100));
            REQUIRE_FALSE(failed.has_value());
            REQUIRE(during.has_value());
            REQUIRE(*during);
            REQUIRE(std::filesystem::file_size(segment_path(tmp.path(), 0)) == first.next_offset);
            // Bounded, the reader may be asked again before anything new is published (it
            // returns early, the stale bytes still buffered); unbounded, it is next asked
            // after the new record is written.
            if (bounded) REQUIRE_FALSE(reader->next(rec, bound()).value());

            Owned second =
                append(*writer, RecordType::message, 3, "c", payload_of(3, replacement_bytes));
            REQUIRE(second.offset == first.next_offset);
            auto more = reader->next(rec, bound());
            INFO((more ? std::string() : more.error().message));
            REQUIRE(more.has_value());
            REQUIRE(*more);
            REQUIRE(own(rec) == second);
            REQUIRE(reader->stats().damaged_regions == 0);
        }
    }
}

TEST_CASE("EIO or ENOSPC on a write: an error naming the file, rolled back, the writer goes on",
          "[log]") {
    for (int err : {EIO, ENOSPC}) {
        for (long partial_bytes : {0L, 25L}) {
            INFO(std::strerror(err) << ", " << partial_bytes << " bytes written first");
            TempDir tmp;
            auto writer = open_writer(options_for(tmp.path()));
            std::vector<Owned> expected;
            for (int i = 0; i < 3; ++i)
                expected.push_back(append(*writer, RecordType::message, i, "t", "p"));
            const uint64_t end = writer->end_offset();
            const std::string path = segment_path(tmp.path(), 0);

            Faults faults(tmp.path());
            tm_fault_arm_write(err, partial_bytes, nullptr, nullptr);
            auto failed = writer->append(RecordType::message, 9, "t", payload_of(9, 100));
            REQUIRE_FALSE(failed.has_value());
            REQUIRE_THAT(failed.error().message, Catch::Contains(path));
            REQUIRE_THAT(failed.error().message, Catch::Contains(std::strerror(err)));
            REQUIRE(writer->end_offset() == end);
            REQUIRE(std::filesystem::file_size(path) == end);
            REQUIRE_FALSE(writer->poisoned());
            REQUIRE(writer->stats().append_errors == 1);

            for (int i = 0; i < 2; ++i)
                expected.push_back(append(*writer, RecordType::message, 10 + i, "t", "q"));
            REQUIRE(writer->sync().has_value());
            REQUIRE(read_all(tmp.path()) == expected);
            writer.reset();
            auto reopened = open_writer(options_for(tmp.path()));
            REQUIRE(reopened->stats().tail_truncations == 0);
            REQUIRE(reopened->end_offset() == expected.back().next_offset);
        }
    }
}

TEST_CASE("EIO or ENOSPC on fdatasync poisons the writer and cuts what the disk may not hold",
          "[log]") {
    // Each way a sync happens: sync() (a checkpoint), maybe_sync() (fsync=interval), append()
    // with fsync=always, and the sync of a full segment before the next one is created.
    enum class Via { sync, maybe_sync, always, rollover };
    for (Via via : {Via::sync, Via::maybe_sync, Via::always, Via::rollover}) {
        for (int err : {EIO, ENOSPC}) {
            INFO("via " << static_cast<int>(via) << ", " << std::strerror(err));
            TempDir tmp;
            LogOptions options = options_for(tmp.path(), via == Via::rollover ? 700 : 64 << 20);
            if (via == Via::always) options.fsync = FsyncPolicy::always;
            if (via == Via::rollover) options.fsync = FsyncPolicy::never;
            auto writer = open_writer(options);
            std::vector<Owned> durable;
            for (int i = 0; i < 5; ++i) {
                durable.push_back(append(*writer, RecordType::message, i, "t", payload_of(i, 80)));
            }
            REQUIRE(writer->sync().has_value());
            const uint64_t durable_end = writer->durable_offset();
            REQUIRE(durable_end == durable.back().next_offset);
            // Written, in the page cache, not yet synced (with fsync=always there is none).
            if (via != Via::always) append(*writer, RecordType::message, 5, "t", payload_of(5, 80));
            const std::string path = segment_path(tmp.path(), 0);

            Faults faults(tmp.path());
            tm_fault_arm(TM_FAULT_FDATASYNC, err);
            std::string message;
            switch (via) {
                case Via::sync:
                    message = writer->sync().error().message;
                    break;
                case Via::maybe_sync:
                    message = writer->maybe_sync(1'000'000).error().message;
                    break;
                case Via::always:
                case Via::rollover:  // the 7th 88-byte frame does not fit in 700 bytes
                    message = writer->append(RecordType::message, 6, "t", payload_of(6, 80))
                                  .error()
                                  .message;
                    break;
            }
            REQUIRE_THAT(message, Catch::Contains(path));
            REQUIRE_THAT(message, Catch::Contains(std::strerror(err)));
            REQUIRE(writer->poisoned());
            REQUIRE(writer->stats().poisoned);
            REQUIRE(writer->poison_error().starts_with(message));
            // Only what was durable stays in the file: a restart cannot read the rest from the
            // page cache as if the disk held it.
            REQUIRE(std::filesystem::file_size(path) == durable_end);
            REQUIRE(writer->end_offset() == durable_end);
            REQUIRE(writer->durable_offset() == durable_end);
            REQUIRE(list_segments(tmp.path())->size() == 1);

            // Every later call says so, and fdatasync is never tried again: not by sync(), not
            // by the destructor.
            auto again = writer->append(RecordType::message, 7, "t", "x");
            REQUIRE_FALSE(again.has_value());
            REQUIRE(again.error().message == writer->poison_error());
            REQUIRE_FALSE(writer->sync().has_value());
            REQUIRE_FALSE(writer->maybe_sync(2'000'000).has_value());
            writer.reset();
            REQUIRE(tm_fault_calls(TM_FAULT_FDATASYNC) == 1);
            tm_fault_clear();

            auto reopened = open_writer(options);
            REQUIRE(reopened->end_offset() == durable_end);
            REQUIRE(reopened->stats().tail_bytes_cut == 0);
            REQUIRE_FALSE(reopened->poisoned());
            REQUIRE(read_all(tmp.path()) == durable);
        }
    }
}

TEST_CASE("a failed rollback poisons the writer; the restart cuts the partial frame", "[log]") {
    TempDir tmp;
    auto writer = open_writer(options_for(tmp.path()));
    std::vector<Owned> expected;
    for (int i = 0; i < 3; ++i)
        expected.push_back(append(*writer, RecordType::message, i, "t", "p"));
    const uint64_t end = writer->end_offset();
    {
        Faults faults(tmp.path());
        tm_fault_arm_write(EIO, 25, nullptr, nullptr);
        tm_fault_arm(TM_FAULT_FTRUNCATE, EIO);
        auto failed = writer->append(RecordType::message, 9, "t", payload_of(9, 100));
        REQUIRE_FALSE(failed.has_value());
        REQUIRE_THAT(failed.error().message, Catch::Contains("roll back"));
        REQUIRE(writer->poisoned());
        REQUIRE(std::filesystem::file_size(segment_path(tmp.path(), 0)) == end + 25);
        REQUIRE_FALSE(writer->append(RecordType::message, 10, "t", "p").has_value());
        writer.reset();
    }
    auto reopened = open_writer(options_for(tmp.path()));
    REQUIRE(reopened->stats().tail_bytes_cut == 25);
    REQUIRE(reopened->end_offset() == end);
    REQUIRE(read_all(tmp.path()) == expected);
}
