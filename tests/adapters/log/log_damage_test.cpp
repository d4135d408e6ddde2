// Damage in the middle of the log (a bad sector, a flipped bit) is skipped and counted, never
// taken for a torn tail: opening the log cuts only invalid bytes with nothing valid after them,
// and the records after damage keep their offsets, which a checkpoint may hold (issue 17,
// defect 4).
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include "log_test_support.h"

using namespace tidemark::log;
using namespace tidemark::log::test;

namespace {

void overwrite(const std::string& path, uint64_t at, const std::string& bytes) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(at));
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// The frame the writer makes of one record: to hide a valid frame inside a payload.
std::string frame_of(RecordType type, int64_t ingest_ms, const std::string& topic,
                     const std::string& payload) {
    TempDir scratch(true);
    {
        auto writer = open_writer(options_for(scratch.path()));
        append(*writer, type, ingest_ms, topic, payload);
    }
    return file_bytes(segment_path(scratch.path(), 0));
}

}  // namespace

TEST_CASE("one flipped byte 40% into a 126 KB segment: nothing after it is cut", "[log]") {
    // The user's report: "cut a torn tail of 75746 bytes", then every start refused with
    // "checkpoint past the log's end".
    TempDir tmp;
    std::vector<Owned> expected;
    {
        auto writer = open_writer(options_for(tmp.path(), 128 << 10));
        while (writer->end_offset() < 126'000) {
            expected.push_back(append(*writer, RecordType::message,
                                      static_cast<int64_t>(expected.size()),
                                      "site/dev-" + std::to_string(expected.size() % 17),
                                      payload_of(expected.size(), 200 + expected.size() % 90)));
        }
        REQUIRE(writer->sync().has_value());
    }
    const std::string path = segment_path(tmp.path(), 0);
    const uint64_t size = std::filesystem::file_size(path);
    REQUIRE(list_segments(tmp.path())->size() == 1);
    const uint64_t end = expected.back().next_offset;
    // A checkpoint taken at 70%: durable, and past the damage.
    const Owned& checkpoint =
        *std::ranges::find_if(expected, [&](const Owned& r) { return r.offset >= size * 7 / 10; });

    const uint64_t flipped = size * 4 / 10;
    flip_byte(path, flipped);
    auto victim = static_cast<size_t>(
        std::ranges::find_if(expected, [&](const Owned& r) { return r.next_offset > flipped; }) -
        expected.begin());
    const uint64_t victim_bytes = expected[victim].next_offset - expected[victim].offset;

    for (int start = 0; start < 2; ++start) {  // every start, not just the first
        INFO("start " << start);
        auto writer = open_writer(options_for(tmp.path(), 128 << 10));
        LogStats stats = writer->stats();
        REQUIRE(stats.tail_truncations == 0);
        REQUIRE(stats.tail_bytes_cut == 0);
        REQUIRE(stats.damaged_regions == 1);
        REQUIRE(stats.damaged_bytes == victim_bytes);
        REQUIRE(std::filesystem::file_size(path) == size);
        // What the service checks before it replays from the checkpoint.
        REQUIRE(writer->end_offset() == end);
        REQUIRE(checkpoint.offset <= writer->end_offset());

        // Replay from the checkpoint: every record there and after, at its own offset.
        auto after_checkpoint =
            std::vector<Owned>(std::ranges::find(expected, checkpoint), expected.end());
        REQUIRE(read_bounded(tmp.path(), checkpoint.offset, end) == after_checkpoint);
        // From the start: all but the damaged record, and the reader says so.
        ReaderStats reader_stats;
        REQUIRE(read_bounded(tmp.path(), 0, end, &reader_stats) == without(expected, {victim}));
        REQUIRE(reader_stats.damaged_regions == 1);
        REQUIRE(reader_stats.damaged_bytes == victim_bytes);
        REQUIRE_THAT(reader_stats.last_damage, Catch::Contains(path));
        REQUIRE_THAT(reader_stats.last_damage,
                     Catch::Contains(std::to_string(expected[victim].offset)));
        REQUIRE(read_all(tmp.path()) == without(expected, {victim}));
    }
    // Appends go on at the old end, in a new segment (its anchor first): a segment with damage
    // may have lost topic definitions, so the writer does not add to its dictionary.
    auto writer = open_writer(options_for(tmp.path(), 128 << 10));
    expected.push_back(append(*writer, RecordType::message, 0, "after", "restart"));
    REQUIRE(expected.back().offset == end + anchor_frame_bytes);
    REQUIRE(list_segments(tmp.path())->size() == 2);
    REQUIRE(read_all(tmp.path()) == without(expected, {victim}));
}

TEST_CASE("a bad sector in the middle and a torn tail: only the tail is cut", "[log]") {
    TempDir tmp;
    std::vector<Owned> expected;
    {
        auto writer = open_writer(options_for(tmp.path()));
        for (size_t i = 0; i < 100; ++i) {
            expected.push_back(append(*writer, RecordType::message, static_cast<int64_t>(i), "t",
                                      payload_of(i, 40 + i % 30)));
        }
    }
    const std::string path = segment_path(tmp.path(), 0);
    const uint64_t size = std::filesystem::file_size(path);
    // 512 random bytes from the middle of record 30 on, then a torn write at the end.
    std::mt19937 rng(7);
    std::string junk(512, '\0');
    for (char& c : junk)
        c = static_cast<char>(rng());
    const uint64_t sector_at = expected[30].offset + 10;
    overwrite(path, sector_at, junk);
    {
        std::ofstream out(path, std::ios::binary | std::ios::app);
        out << frame_of(RecordType::message, 500, "torn", payload_of(1, 300)).substr(0, 77);
    }
    std::vector<size_t> lost;
    for (size_t i = 0; i < expected.size(); ++i) {
        if (expected[i].next_offset > sector_at && expected[i].offset < sector_at + junk.size())
            lost.push_back(i);
    }
    REQUIRE(lost.size() > 3);

    auto writer = open_writer(options_for(tmp.path()));
    LogStats stats = writer->stats();
    REQUIRE(stats.tail_bytes_cut == 77);
    REQUIRE(writer->end_offset() == size);  // the end of the last valid record
    REQUIRE(stats.damaged_regions == 1);
    REQUIRE(stats.damaged_bytes ==
            expected[lost.back()].next_offset - expected[lost.front()].offset);
    REQUIRE(read_all(tmp.path()) == without(expected, lost));
    REQUIRE(read_bounded(tmp.path(), 0, writer->end_offset()) == without(expected, lost));
}

TEST_CASE("damage running to the end of a sealed segment is skipped into the next", "[log]") {
    TempDir tmp;
    std::vector<Owned> expected;
    {
        auto writer = open_writer(options_for(tmp.path(), 1000));
        for (size_t i = 0; i < 40; ++i) {
            expected.push_back(append(*writer, RecordType::message, static_cast<int64_t>(i),
                                      "s/" + std::to_string(i), payload_of(i, 60)));
        }
    }
    auto segments = list_segments(tmp.path()).value();
    REQUIRE(segments.size() >= 3);
    // The last record of the first segment loses its length field: nothing valid after it in
    // that file.
    const SegmentFile& first = segments[0];
    auto last_of_first = static_cast<size_t>(
        std::ranges::find_if(expected,
                             [&](const Owned& r) { return r.next_offset == first.bytes; }) -
        expected.begin());
    overwrite(first.path, expected[last_of_first].offset, std::string("\xff\xff\xff\x7f", 4));

    auto writer = open_writer(options_for(tmp.path(), 1000));
    REQUIRE(writer->stats().damaged_regions == 0);  // open() checks the newest segment only
    REQUIRE(writer->stats().tail_bytes_cut == 0);
    for (uint64_t bound : {UINT64_MAX, writer->end_offset()}) {
        INFO("bound " << bound);
        auto reader = LogReader::open(tmp.path()).value();
        std::vector<Owned> got;
        Record rec;
        while (reader->next(rec, bound).value())
            got.push_back(own(rec));
        REQUIRE(got == without(expected, {last_of_first}));
        REQUIRE(reader->stats().damaged_regions == 1);
        REQUIRE(reader->stats().damaged_bytes ==
                expected[last_of_first].next_offset - expected[last_of_first].offset);
    }
}

TEST_CASE("the search past damage is not fooled by frames inside a payload", "[log]") {
    // Record 5's payload carries a whole valid frame. Reading on from the damage must resume at
    // record 6, never at the frame inside record 5.
    auto build = [](const std::string& dir, int64_t hidden_ingest_ms) {
        std::string hidden =
            frame_of(RecordType::message, hidden_ingest_ms, "hidden", "not a record");
        std::vector<Owned> expected;
        auto writer = open_writer(options_for(dir));
        for (size_t i = 0; i < 10; ++i) {
            std::string payload = i == 5 ? "head:" + hidden + ":tail" : payload_of(i, 50);
            expected.push_back(
                append(*writer, RecordType::message, 100 + static_cast<int64_t>(i), "t", payload));
        }
        return expected;
    };
    auto check = [](const std::string& dir, const std::vector<Owned>& expected) {
        auto writer = open_writer(options_for(dir));
        REQUIRE(writer->stats().tail_bytes_cut == 0);
        REQUIRE(writer->stats().damaged_regions == 1);
        REQUIRE(writer->stats().damaged_bytes == expected[5].next_offset - expected[5].offset);
        REQUIRE(read_all(dir) == without(expected, {5}));
        REQUIRE(read_bounded(dir, 0, writer->end_offset()) == without(expected, {5}));
    };
    SECTION("length field damaged: the hidden frame's time runs back") {
        TempDir tmp;
        auto expected = build(tmp.path(), 1);
        flip_byte(segment_path(tmp.path(), 0), expected[5].offset + 3, '\x7f');
        check(tmp.path(), expected);
    }
    SECTION("body damaged: the record's own length says where the next one starts") {
        TempDir tmp;
        auto expected = build(tmp.path(), 105);  // as plausible as record 5's own time
        flip_byte(segment_path(tmp.path(), 0), expected[5].offset + 20);  // its topic
        check(tmp.path(), expected);
    }
}

TEST_CASE("a damaged length that points at a later record does not skip the ones between",
          "[log]") {
    TempDir tmp;
    std::vector<Owned> expected;
    {
        auto writer = open_writer(options_for(tmp.path()));
        for (size_t i = 0; i < 10; ++i) {
            expected.push_back(append(*writer, RecordType::message, static_cast<int64_t>(i), "t",
                                      payload_of(i, 30 + i)));
        }
    }
    // Record 4's length now spans records 4 and 5: its CRC fails, and where it points (record
    // 6) is a valid frame. Record 5 is intact and must be read.
    uint64_t body_bytes = expected[6].offset - expected[4].offset - frame_header_bytes;
    std::string length(4, '\0');
    for (int i = 0; i < 4; ++i)
        length[i] = static_cast<char>(body_bytes >> (8 * i));
    overwrite(segment_path(tmp.path(), 0), expected[4].offset, length);

    auto writer = open_writer(options_for(tmp.path()));
    REQUIRE(writer->stats().damaged_bytes == expected[4].next_offset - expected[4].offset);
    REQUIRE(read_all(tmp.path()) == without(expected, {4}));
}
