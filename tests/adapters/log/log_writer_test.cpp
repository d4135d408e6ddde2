#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include "adapters/log/crc32c.h"
#include "adapters/log/segment_files.h"
#include "log_test_support.h"

using namespace tidemark::log;
using namespace tidemark::log::test;

TEST_CASE("records round-trip across segment rollover, with contiguous offsets", "[log]") {
    TempDir tmp;
    auto writer = open_writer(options_for(tmp.path(), 512));
    std::vector<Owned> expected;
    for (size_t i = 0; i < 200; ++i) {
        RecordType type = i % 10 == 3 ? RecordType::tick : RecordType::message;
        std::string topic = type == RecordType::tick ? "" : "sensors/dev-" + std::to_string(i % 7);
        std::string payload = type == RecordType::tick ? "" : payload_of(i, i % 150);
        expected.push_back(append(*writer, type, 1000 + static_cast<int64_t>(i), topic, payload));
    }
    // A record larger than a segment gets a segment of its own.
    expected.push_back(append(*writer, RecordType::message, 5000, "big", std::string(2000, 'x')));
    expected.push_back(append(*writer, RecordType::message, 5001, "after", "y"));

    auto segments = list_segments(tmp.path());
    REQUIRE(segments.has_value());
    REQUIRE(segments->size() > 10);
    // Records follow each other, but for the anchor that opens each segment (record.h); a
    // compact frame is smaller than the full frame of the same record.
    for (size_t i = 0; i + 1 < expected.size(); ++i) {
        const bool segment_starts = std::ranges::any_of(*segments, [&](const SegmentFile& seg) {
            return seg.first_offset == expected[i].next_offset;
        });
        REQUIRE(expected[i + 1].offset ==
                expected[i].next_offset + (segment_starts ? anchor_frame_bytes : 0));
        REQUIRE(expected[i].next_offset - expected[i].offset <
                frame_bytes(expected[i].topic.size(), expected[i].payload.size()));
    }
    uint64_t chained = 0;
    for (const auto& seg : *segments) {
        REQUIRE(seg.first_offset == chained);  // named by the offset of its first byte
        REQUIRE((seg.bytes <= 512 || seg.bytes < anchor_frame_bytes + frame_bytes(3, 2000)));
        chained += seg.bytes;
    }
    REQUIRE(chained == writer->end_offset());
    REQUIRE(writer->total_bytes() == chained);
    REQUIRE(read_all(tmp.path()) == expected);

    // A reopened writer continues at the end.
    writer.reset();
    writer = open_writer(options_for(tmp.path(), 512));
    REQUIRE(writer->end_offset() == chained);
    REQUIRE(writer->stats().tail_truncations == 0);
    expected.push_back(append(*writer, RecordType::message, 6000, "again", "z"));
    REQUIRE(expected.back().offset == chained);
    REQUIRE(read_all(tmp.path()) == expected);
}

TEST_CASE("a malformed record's reason and topic read back as written, in the old layout",
          "[log]") {
    TempDir tmp;
    auto writer = open_writer(options_for(tmp.path()));
    const std::string reason = "oversized: 70000 bytes > max_payload 65536";
    const std::string topic = "sensors/odd\tname";  // a tab in the topic itself is kept
    auto written = writer->append_malformed(7, reason, topic, std::string(70000, 'q'));
    REQUIRE(written.has_value());
    // What firmware wrote before Record::reason existed: the same bytes on disk.
    auto old_layout =
        writer->append(RecordType::malformed, 7, reason + "\t" + topic, std::string(70000, 'q'));
    REQUIRE(old_layout.has_value());
    auto message = writer->append(RecordType::message, 8, "sensors/a", "{}");
    REQUIRE(message.has_value());
    REQUIRE(writer->sync().has_value());

    auto reader = LogReader::open(tmp.path());
    REQUIRE(reader.has_value());
    std::vector<std::string> frames;
    for (int i = 0; i < 2; ++i) {
        Record rec;
        auto next = (*reader)->next(rec);
        REQUIRE(next.has_value());
        REQUIRE(*next);
        CHECK(rec.type == RecordType::malformed);
        CHECK(rec.reason == reason);
        CHECK(rec.topic == topic);
        CHECK(rec.payload == std::string(malformed_payload_bytes_max, 'q'));
        CHECK(rec.next_offset - rec.offset ==
              *old_layout - *written);  // the same frame twice (compared below)
    }
    Record rec;
    auto next = (*reader)->next(rec);
    REQUIRE(next.has_value());
    REQUIRE(*next);
    CHECK(rec.topic == "sensors/a");
    CHECK(rec.reason.empty());

    // Byte for byte the old layout: the two frames differ in nothing but their CRC, which
    // starts from each frame's own offset (record.h): their bodies, after the 2-byte length
    // and the CRC, are the same.
    std::ifstream in(segment_path(tmp.path(), 0), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto frame = static_cast<size_t>(*old_layout - *written);
    CHECK(bytes.substr(static_cast<size_t>(*written) + 6, frame - 6) ==
          bytes.substr(static_cast<size_t>(*old_layout) + 6, frame - 6));
}

TEST_CASE("malformed records keep the reason and a bounded prefix of the payload", "[log]") {
    TempDir tmp;
    auto writer = open_writer(options_for(tmp.path()));
    std::string reason = "oversized: 70000 bytes > max_payload 65536";
    auto offset = writer->append_malformed(7, reason, "t", std::string(70000, 'q'));
    REQUIRE(offset.has_value());
    auto records = read_all(tmp.path());
    REQUIRE(records.size() == 1);
    REQUIRE(records[0].type == RecordType::malformed);
    REQUIRE(records[0].reason == reason);
    REQUIRE(records[0].payload == std::string(malformed_payload_bytes_max, 'q'));

    // Beyond the frame bounds: refused with a message, nothing appended.
    uint64_t end = writer->end_offset();
    auto huge =
        writer->append(RecordType::message, 8, "t", std::string(record_body_bytes_max, 'h'));
    REQUIRE_FALSE(huge.has_value());
    REQUIRE_THAT(huge.error().message, Catch::Contains("too large"));
    REQUIRE(writer->end_offset() == end);
    REQUIRE(read_all(tmp.path()).size() == 1);
}

TEST_CASE("ingest time never decreases, also across a restart", "[log]") {
    TempDir tmp;
    auto writer = open_writer(options_for(tmp.path(), 256));
    append(*writer, RecordType::message, 100, "a", "1");
    append(*writer, RecordType::message, 50, "a", "2");  // clock stepped back
    append(*writer, RecordType::tick, 200, "", "");
    append(*writer, RecordType::tick, 199, "", "");
    writer.reset();
    writer = open_writer(options_for(tmp.path(), 256));
    append(*writer, RecordType::message, 150, "a", "3");  // still behind after restart
    append(*writer, RecordType::message, 300, "a", "4");
    std::vector<int64_t> times;
    for (const auto& r : read_all(tmp.path()))
        times.push_back(r.ingest_ms);
    REQUIRE(times == std::vector<int64_t>{100, 100, 200, 200, 200, 300});
    REQUIRE(writer->stats().last_ingest_ms == 300);
    REQUIRE(writer->oldest_ingest_ms() == 100);
}

TEST_CASE("fsync policies move the durable offset", "[log]") {
    TempDir tmp;
    SECTION("always: durable on return") {
        auto options = options_for(tmp.path());
        options.fsync = FsyncPolicy::always;
        auto writer = open_writer(options);
        for (int i = 0; i < 5; ++i) {
            append(*writer, RecordType::message, i, "t", "p");
            REQUIRE(writer->durable_offset() == writer->end_offset());
        }
    }
    SECTION("interval: maybe_sync follows the caller's clock") {
        auto options = options_for(tmp.path());
        options.fsync_interval_ms = 1000;
        auto writer = open_writer(options);
        append(*writer, RecordType::message, 1, "t", "p");
        REQUIRE(writer->durable_offset() == 0);
        REQUIRE(writer->maybe_sync(10'000).value());  // first call: due
        REQUIRE(writer->durable_offset() == writer->end_offset());
        append(*writer, RecordType::message, 2, "t", "p");
        REQUIRE_FALSE(writer->maybe_sync(10'500).value());
        REQUIRE(writer->durable_offset() < writer->end_offset());
        REQUIRE(writer->maybe_sync(11'000).value());
        REQUIRE(writer->durable_offset() == writer->end_offset());
    }
    SECTION("never: only sync() and rollover") {
        auto options = options_for(tmp.path(), 200);
        options.fsync = FsyncPolicy::never;
        auto writer = open_writer(options);
        append(*writer, RecordType::message, 1, "t", payload_of(1, 100));
        REQUIRE_FALSE(writer->maybe_sync(1'000'000).value());
        REQUIRE(writer->durable_offset() == 0);
        auto second = append(*writer, RecordType::message, 2, "t", payload_of(2, 100));
        // The closed segment was synced (the new one starts with an anchor, then the record).
        REQUIRE(writer->durable_offset() == second.offset - anchor_frame_bytes);
        REQUIRE(writer->sync().has_value());
        REQUIRE(writer->durable_offset() == writer->end_offset());
    }
}

TEST_CASE("sync from another thread while appending", "[log]") {
    TempDir tmp;
    auto writer = open_writer(options_for(tmp.path(), 64 << 10));
    std::atomic<bool> done{false};
    std::atomic<int> failures{0};  // Catch's REQUIRE is not thread-safe
    std::thread syncer([&] {
        while (!done.load()) {
            uint64_t before = writer->end_offset();
            if (!writer->sync().has_value() || writer->durable_offset() < before) ++failures;
        }
    });
    std::vector<Owned> expected;
    for (size_t i = 0; i < 5000; ++i) {
        expected.push_back(
            append(*writer, RecordType::message, static_cast<int64_t>(i), "t", payload_of(i, 60)));
    }
    done = true;
    syncer.join();
    REQUIRE(failures == 0);
    REQUIRE(read_all(tmp.path()) == expected);
}

TEST_CASE("a record of an unknown type is refused, not cut off", "[log]") {
    TempDir tmp;
    {
        auto writer = open_writer(options_for(tmp.path()));
        append(*writer, RecordType::message, 1, "t", "p");
    }
    // Rewrite the type byte of the segment's first frame (its anchor) and fix the CRC, as a
    // newer version could have written it.
    std::string path = segment_path(tmp.path(), 0);
    std::string bytes;
    {
        std::ifstream in(path, std::ios::binary);
        bytes.assign(std::istreambuf_iterator<char>(in), {});
    }
    bytes[8] = 9;
    uint32_t crc = crc32c(0, std::string_view(bytes).substr(8, anchor_body_bytes));
    for (int i = 0; i < 4; ++i)
        bytes[4 + i] = static_cast<char>(crc >> (8 * i));
    {
        std::ofstream out(path, std::ios::binary | std::ios::trunc);
        out << bytes;
    }
    auto writer = LogWriter::open(options_for(tmp.path()));
    REQUIRE_FALSE(writer.has_value());
    REQUIRE_THAT(writer.error().message, Catch::Contains("newer"));
    REQUIRE(std::filesystem::file_size(path) == bytes.size());  // left untouched
    auto reader = LogReader::open(tmp.path());
    REQUIRE(reader.has_value());
    Record rec;
    REQUIRE_FALSE((*reader)->next(rec).has_value());
}
