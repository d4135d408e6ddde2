// Compressed segments (issue 30): NAME.zlog blocks with a plain stage (segment_files.h,
// zlog_block.h, log_seal.cpp). What a user relies on: every record reads back whatever the
// format, a torn seal loses nothing a kill could not, a damaged block costs its own records
// only (counted), old plain segments stay readable beside new ones, retention counts disk bytes.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <set>

#include "adapters/log/zlog_block.h"
#include "firmware/crash_arm.h"
#include "log_test_support.h"

using namespace tidemark::log;
using namespace tidemark::log::test;

namespace {

LogOptions zstd_options(const std::string& dir, uint64_t segment_bytes = 64 << 20) {
    LogOptions options = options_for(dir, segment_bytes);
    options.compression = Compression::zstd;
    return options;
}

// Telemetry-like: repetitive JSON, as the log's real payloads are.
std::string telemetry(size_t i) {
    return "{\"ts\":" + std::to_string(1'764'400'000'000 + i) + ",\"seq\":" + std::to_string(i) +
           ",\"temp\":" + std::to_string(18 + i % 10) + "." + std::to_string(i % 100) +
           ",\"fw\":\"1.4.2\"}";
}

std::string topic_of(size_t i) {
    return "sensors/dev-" + std::to_string(i % 50) + "/telemetry";
}

// Appends records [from, to), syncing every `sync_every`.
void fill(LogWriter& writer, std::vector<Owned>& expected, size_t from, size_t to,
          size_t sync_every) {
    for (size_t i = from; i < to; ++i) {
        expected.push_back(append(writer, RecordType::message, static_cast<int64_t>(1000 + i),
                                  topic_of(i), telemetry(i)));
        if ((i + 1) % sync_every == 0) REQUIRE(writer.sync().has_value());
    }
}

BlockScan blocks_of(const std::string& zlog, uint64_t first_offset = 0) {
    int fd = ::open(zlog.c_str(), O_RDONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    struct stat st {};
    REQUIRE(::fstat(fd, &st) == 0);
    BlockScan scan(first_offset);
    REQUIRE(scan_blocks(fd, zlog, static_cast<uint64_t>(st.st_size), true, scan).has_value());
    ::close(fd);
    return scan;
}

bool exists(const std::string& path) {
    return ::access(path.c_str(), F_OK) == 0;
}

}  // namespace

TEST_CASE("zstd: records read back across seals, rollovers and reopens", "[log][zstd]") {
    TempDir tmp;
    std::vector<Owned> expected;
    {
        auto writer = open_writer(zstd_options(tmp.path(), 128 << 10));
        fill(*writer, expected, 0, 6000, 500);
        REQUIRE(read_all(tmp.path()) == expected);  // the active segment's stage read too
        REQUIRE(writer->durable_offset() <= writer->end_offset());
        const LogStats stats = writer->stats();
        REQUIRE(stats.rollovers >= 2);
        REQUIRE(stats.seals > 0);
        // Most of it is in blocks: several times smaller than its frames.
        INFO("disk " << stats.disk_bytes << " frames " << stats.total_bytes);
        REQUIRE(stats.disk_bytes * 3 < stats.total_bytes);
    }
    auto segments = list_segments(tmp.path()).value();
    REQUIRE(segments.size() >= 3);
    for (size_t i = 0; i + 1 < segments.size(); ++i) {
        REQUIRE(segments[i].compressed);
        REQUIRE(exists(zlog_path(tmp.path(), segments[i].first_offset)));
        REQUIRE_FALSE(exists(stage_path(tmp.path(), segments[i].first_offset)));  // sealed whole
    }
    // Reopened: the offsets go on where they were, the reader seeks into a compressed segment.
    auto writer = open_writer(zstd_options(tmp.path(), 128 << 10));
    REQUIRE(writer->end_offset() == expected.back().next_offset);
    REQUIRE(writer->stats().tail_bytes_cut == 0);
    fill(*writer, expected, 6000, 6500, 100);
    REQUIRE(read_all(tmp.path()) == expected);
    const size_t middle = expected.size() / 2 + 17;
    REQUIRE(read_all(tmp.path(), expected[middle].offset) ==
            std::vector<Owned>(expected.begin() + static_cast<long>(middle), expected.end()));
}

// A seal deferred for long (a full disk: log_full_disk_test) has megabytes to seal at once: it
// reads and compresses them a few blocks at a time, and the blocks chain as one seal's would.
TEST_CASE("zstd: a range past a seal's piece is sealed in pieces that read back whole",
          "[log][zstd]") {
    TempDir tmp;
    std::vector<Owned> expected;
    {
        auto writer = open_writer(zstd_options(tmp.path()));
        fill(*writer, expected, 0, 150'000, 1'000'000);                // ~10 MiB staged, no sync
        REQUIRE(writer->total_bytes() > 2 * 4 * block_raw_bytes_max);  // three pieces
        REQUIRE(writer->sync().has_value());
        const LogStats stats = writer->stats();
        REQUIRE(stats.seals == 1);
        REQUIRE(stats.sealed_bytes == writer->total_bytes());
        REQUIRE(writer->durable_offset() == writer->end_offset());
        const BlockScan scan = blocks_of(zlog_path(tmp.path(), 0));
        REQUIRE(scan.blocks.size() ==
                (writer->total_bytes() + block_raw_bytes_max - 1) / block_raw_bytes_max);
        REQUIRE(scan.damaged_regions == 0);
        REQUIRE(scan.blocks.back().end_offset() == writer->end_offset());
        REQUIRE(read_all(tmp.path()) == expected);
    }
    auto writer = open_writer(zstd_options(tmp.path()));
    REQUIRE(writer->end_offset() == expected.back().next_offset);
    REQUIRE(writer->stats().tail_bytes_cut == 0);
    REQUIRE(read_all(tmp.path()) == expected);
}

TEST_CASE("zstd: a reader tailing the writer reads only up to the durable end", "[log][zstd]") {
    TempDir tmp;
    LogOptions options = zstd_options(tmp.path(), 128 << 10);
    options.fsync = FsyncPolicy::interval;
    auto writer = open_writer(options);
    auto reader = LogReader::open(tmp.path()).value();
    std::vector<Owned> expected;
    std::vector<Owned> got;
    Record rec;
    for (size_t round = 0; round < 40; ++round) {
        fill(*writer, expected, round * 97, round * 97 + 97, 1'000'000);
        // Read what is durable before and after a seal: the stage, then the blocks.
        for (int pass = 0; pass < 2; ++pass) {
            while (true) {
                auto more = reader->next(rec, writer->durable_offset());
                REQUIRE(more.has_value());
                if (!*more) break;
                got.push_back(own(rec));
            }
            REQUIRE(writer->sync().has_value());
        }
        REQUIRE(got.size() == expected.size());
    }
    REQUIRE(got == expected);
    REQUIRE(reader->stats().damaged_regions == 0);
}

// A process killed in a seal leaves a part of a block at the .zlog's end; the stage still holds
// its frames (it is punched only after the blocks are synced).
TEST_CASE("zstd: a torn block is cut and its records sealed again from the stage", "[log][zstd]") {
    TempDir tmp;
    std::vector<Owned> expected;
    uint64_t zlog_before = 0;
    {
        auto writer = open_writer(zstd_options(tmp.path()));
        fill(*writer, expected, 0, 800, 400);  // two seals
        fill(*writer, expected, 800, 1000, 1'000'000);
        zlog_before = file_bytes(zlog_path(tmp.path(), 0)).size();
        // What the next seal would write, half of it: the kill.
        const std::string stage = file_bytes(stage_path(tmp.path(), 0));
        const uint64_t sealed = expected[799].next_offset;
        std::string block;
        REQUIRE(encode_blocks(std::string_view(stage).substr(sealed, stage.size() - sealed), sealed,
                              block)
                    .has_value());
        std::ofstream out(zlog_path(tmp.path(), 0), std::ios::binary | std::ios::app);
        out << block.substr(0, block.size() / 2);
        writer.release();  // dropped without its seal: the process is gone
    }
    {
        auto writer = open_writer(zstd_options(tmp.path()));
        REQUIRE(writer->stats().tail_truncations == 1);
        REQUIRE(writer->end_offset() == expected.back().next_offset);
        REQUIRE(writer->durable_offset() == expected.back().next_offset);  // sealed again
    }
    REQUIRE(read_all(tmp.path()) == expected);
    const BlockScan scan = blocks_of(zlog_path(tmp.path(), 0));
    REQUIRE(scan.bad_data_blocks == 0);
    REQUIRE(scan.good_file_bytes > zlog_before);
    REQUIRE(scan.blocks.back().end_offset() == expected.back().next_offset);
}

// A power cut: the torn block's frames never reached the stage's disk blocks either.
TEST_CASE("zstd: a torn block with its stage lost costs only the unsealed records", "[log][zstd]") {
    TempDir tmp;
    std::vector<Owned> expected;
    uint64_t sealed = 0;
    {
        auto writer = open_writer(zstd_options(tmp.path()));
        fill(*writer, expected, 0, 600, 600);
        sealed = writer->durable_offset();
        REQUIRE(sealed == expected.back().next_offset);
        fill(*writer, expected, 600, 700, 1'000'000);
        writer.release();
    }
    const std::string stage = stage_path(tmp.path(), 0);
    std::string block;
    const std::string staged = file_bytes(stage);
    REQUIRE(encode_blocks(std::string_view(staged).substr(sealed), sealed, block).has_value());
    {
        std::ofstream out(zlog_path(tmp.path(), 0), std::ios::binary | std::ios::app);
        out << block.substr(0, block.size() - 3);
    }
    std::filesystem::resize_file(stage, sealed);  // the unsealed frames never reached the disk
    std::filesystem::resize_file(stage, staged.size());  // (zeros, as after a power cut)
    auto writer = open_writer(zstd_options(tmp.path()));
    REQUIRE(writer->end_offset() == sealed);
    REQUIRE(read_all(tmp.path()) == std::vector<Owned>(expected.begin(), expected.begin() + 600));
    // Appends go on at the durable end.
    REQUIRE(append(*writer, RecordType::tick, 5000, "", "").offset == sealed);
}

TEST_CASE("zstd: a flipped byte in a block costs that block's records, counted", "[log][zstd]") {
    TempDir tmp;
    std::vector<Owned> expected;
    {
        auto writer = open_writer(zstd_options(tmp.path(), 512 << 10));
        fill(*writer, expected, 0, 3000, 300);  // ten blocks in the first segment
        fill(*writer, expected, 3000, 9000, 3000);
    }
    const std::string zlog = zlog_path(tmp.path(), 0);
    const BlockScan scan = blocks_of(zlog);
    REQUIRE(scan.blocks.size() >= 5);
    for (bool header : {false, true}) {
        INFO((header ? "in a header" : "in the data"));
        const BlockEntry& victim = scan.blocks[header ? 4 : 2];
        const uint64_t at = victim.file_pos + (header ? 12 : block_header_bytes + 9);
        flip_byte(zlog, at);
        auto reader = LogReader::open(tmp.path()).value();
        std::vector<Owned> got;
        Record rec;
        while (true) {
            auto more = reader->next(rec);
            REQUIRE(more.has_value());
            if (!*more) break;
            got.push_back(own(rec));
        }
        const ReaderStats stats = reader->stats();
        REQUIRE(stats.damaged_regions >= 1);
        REQUIRE(stats.damaged_bytes >= victim.header.raw_bytes / 2);
        // What is read is what was written, and only records in or next to the block are lost.
        std::set<uint64_t> read_offsets;
        for (const Owned& r : got)
            read_offsets.insert(r.offset);
        size_t lost = 0;
        for (const Owned& e : expected) {
            if (read_offsets.contains(e.offset)) continue;
            ++lost;
            REQUIRE(e.next_offset > victim.header.first_offset);
            REQUIRE(e.offset < victim.end_offset());
        }
        REQUIRE(lost >= 100);
        REQUIRE(got.size() + lost == expected.size());
        for (const Owned& r : got) {
            auto it = std::ranges::find(expected, r.offset, &Owned::offset);
            REQUIRE(it != expected.end());
            REQUIRE(*it == r);
        }
        flip_byte(zlog, at);  // repaired for the next pass
    }
    REQUIRE(read_all(tmp.path()) == expected);
}

TEST_CASE("zstd: every bit of a block header is under its CRC, first_offset's too", "[log][zstd]") {
    // Seeded with the offset, the header CRC's seed and the field's low word cancelled: a
    // flipped low bit of first_offset kept the CRC (a fuzz input: a block at offset 2^28).
    for (uint64_t first : {uint64_t{0}, uint64_t{4089}, (uint64_t{3} << 32) + 77}) {
        std::string file;
        REQUIRE(encode_blocks(telemetry(1) + telemetry(2), first, file).value() == 1);
        REQUIRE(parse_block_header(file).has_value());
        REQUIRE(parse_block_header(file)->first_offset == first);
        for (size_t byte = 8; byte < block_header_bytes; ++byte) {
            for (int bit = 0; bit < 8; ++bit) {
                INFO("first_offset " << first << ", header byte " << byte << " bit " << bit);
                std::string damaged = file;
                damaged[byte] = static_cast<char>(damaged[byte] ^ (1 << bit));
                CHECK_FALSE(parse_block_header(damaged).has_value());
            }
        }
    }
}

namespace {

// The blocks scan_blocks accepts in `file` (written to a scratch file), segment at `first`.
BlockScan scan_bytes(const TempDir& tmp, const std::string& file, uint64_t first) {
    const std::string path = tmp.path() + "/blocks.zlog";
    {
        std::ofstream out(path, std::ios::binary | std::ios::trunc);
        out << file;
    }
    return blocks_of(path, first);
}

}  // namespace

TEST_CASE("zstd: a valid block that does not fit where it is found is damage", "[log][zstd]") {
    TempDir tmp;
    const std::string raw = telemetry(1) + telemetry(2) + telemetry(3);
    const uint64_t first = 8136;
    std::string a, b, c;
    REQUIRE(encode_blocks(raw, first, a).has_value());
    REQUIRE(encode_blocks(raw, first + raw.size(), b).has_value());

    SECTION("blocks in order are all taken") {
        const BlockScan scan = scan_bytes(tmp, a + b, first);
        REQUIRE(scan.blocks.size() == 2);
        CHECK(scan.good_file_bytes == a.size() + b.size());
        CHECK(scan.damaged_regions == 0);
    }
    SECTION("a first block that is not at the segment's first offset") {
        const BlockScan scan = scan_bytes(tmp, b, first);
        CHECK(scan.blocks.empty());
        CHECK(scan.good_file_bytes == 0);
    }
    SECTION("a block of another place (a misdirected write) right after a good one") {
        REQUIRE(encode_blocks(raw, first + 10 * block_raw_bytes_max, c).has_value());
        const BlockScan scan = scan_bytes(tmp, a + c, first);
        REQUIRE(scan.blocks.size() == 1);
        CHECK(scan.good_file_bytes == a.size());  // the rest: a torn tail to the writer
    }
    SECTION("after a damaged run, a block no further on than the run could have held") {
        std::string run(40, '\x5a');  // what two lost blocks could have taken at most
        const BlockScan near = scan_bytes(tmp, a + run + b, first);
        REQUIRE(near.blocks.size() == 2);
        CHECK(near.damaged_regions == 1);
        CHECK(near.damaged_bytes == run.size());
        REQUIRE(encode_blocks(raw, first + raw.size() + 3 * block_raw_bytes_max, c).has_value());
        const BlockScan far = scan_bytes(tmp, a + run + c, first);
        REQUIRE(far.blocks.size() == 1);
        CHECK(far.good_file_bytes == a.size());
    }
}

TEST_CASE("zstd: plain and compressed segments in one log, either way round", "[log][zstd]") {
    TempDir tmp;
    std::vector<Owned> expected;
    {
        auto writer = open_writer(options_for(tmp.path(), 128 << 10));
        fill(*writer, expected, 0, 2000, 500);
    }
    REQUIRE_FALSE(list_segments(tmp.path()).value().back().compressed);
    {
        auto writer = open_writer(zstd_options(tmp.path(), 128 << 10));
        REQUIRE(writer->end_offset() == expected.back().next_offset);
        fill(*writer, expected, 2000, 4000, 500);
    }
    REQUIRE(list_segments(tmp.path()).value().back().compressed);
    {
        auto writer = open_writer(options_for(tmp.path(), 128 << 10));
        fill(*writer, expected, 4000, 5000, 500);
    }
    auto segments = list_segments(tmp.path()).value();
    std::set<bool> formats;
    for (const SegmentFile& s : segments)
        formats.insert(s.compressed);
    REQUIRE(formats.size() == 2);
    REQUIRE_FALSE(segments.back().compressed);
    REQUIRE(read_all(tmp.path()) == expected);
    for (size_t i : {size_t{100}, size_t{2100}, size_t{3999}, size_t{4500}}) {
        REQUIRE(read_all(tmp.path(), expected[i].offset).front() == expected[i]);
    }
}

TEST_CASE("zstd: retention by bytes counts disk bytes, not frame bytes", "[log][zstd]") {
    TempDir tmp;
    LogOptions options = zstd_options(tmp.path(), 128 << 10);
    options.retention_bytes_max = 256 << 10;
    auto writer = open_writer(options);
    std::vector<Owned> expected;
    fill(*writer, expected, 0, 30000, 1000);
    REQUIRE(writer->sync().has_value());
    auto result = writer->apply_retention(UINT64_MAX, 0).value();
    REQUIRE(result.segments_removed > 0);
    const LogStats stats = writer->stats();
    INFO("disk " << stats.disk_bytes << " frames " << stats.total_bytes);
    REQUIRE(stats.disk_bytes <= options.retention_bytes_max);
    // The same max_bytes keeps several times the frames a plain log would.
    REQUIRE(stats.total_bytes > 3 * options.retention_bytes_max);
    uint64_t on_disk = 0;
    const auto listed = list_segments(tmp.path()).value();
    for (const SegmentFile& s : listed)
        on_disk += s.disk_bytes;
    REQUIRE(on_disk <= options.retention_bytes_max + (64 << 10));  // st_blocks' rounding
    const auto kept = read_all(tmp.path());
    REQUIRE(kept.back() == expected.back());
    REQUIRE(kept.front().offset == writer->first_offset() + anchor_frame_bytes);
}

// Run in a fresh process (crash points read TIDEMARK_CRASH_AT once per process): appends records
// to $TM_LOG_CRASH_DIR with a seal every 100, writing each record's offset to
// $TM_LOG_CRASH_DIR.acked once append() returned (what a PUBACK would follow).
TEST_CASE("zstd crash child", "[.zstd-crash-child]") {
    const char* dir = std::getenv("TM_LOG_CRASH_DIR");
    if (dir == nullptr) return;
    tidemark::firmware::arm_crash_points_from_env();
    auto writer = LogWriter::open(zstd_options(dir, 64 << 10));
    if (!writer) ::_exit(2);
    std::ofstream acked(std::string(dir) + ".acked");
    for (size_t i = 0; i < 2000; ++i) {
        auto offset = (*writer)->append(RecordType::message, static_cast<int64_t>(i), topic_of(i),
                                        telemetry(i));
        if (!offset) ::_exit(4);
        acked << *offset << "\n" << std::flush;
        if ((i + 1) % 100 == 0 && !(*writer)->sync()) ::_exit(5);
    }
    ::_exit(0);  // not reached if the crash point works
}

TEST_CASE("zstd: a kill before or after a seal's write loses no acknowledged record",
          "[log][zstd][crash]") {
#if !defined(TIDEMARK_CRASH_POINTS)
    WARN("built without TIDEMARK_CRASH_POINTS: nothing to test");
#else
    for (const char* point : {"before_log_seal_write:1", "before_log_seal_write:7",
                              "after_log_seal_write:1", "after_log_seal_write:7"}) {
        INFO(point);
        TempDir tmp;
        const std::string dir = tmp.sub("log");
        REQUIRE(run_crash_child("log_zstd_test", "[.zstd-crash-child]", point, dir) == 137);
        std::vector<uint64_t> acked;
        {
            std::ifstream in(dir + ".acked");
            uint64_t offset = 0;
            while (in >> offset)
                acked.push_back(offset);
        }
        REQUIRE(acked.size() >= 100);
        {
            auto writer = open_writer(zstd_options(dir, 64 << 10));  // recovery
            REQUIRE(writer->durable_offset() == writer->end_offset());
        }
        const auto records = read_all(dir);
        REQUIRE(records.size() == acked.size());
        for (size_t i = 0; i < acked.size(); ++i) {
            REQUIRE(records[i].offset == acked[i]);
            REQUIRE(records[i].payload == telemetry(i));
        }
        const auto listed = list_segments(dir).value();
        for (const SegmentFile& s : listed)
            REQUIRE(s.compressed);
    }
#endif
}
