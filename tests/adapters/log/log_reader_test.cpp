#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "adapters/log/crc32c.h"
#include "adapters/log/segment_files.h"
#include "log_test_support.h"

using namespace tidemark::log;
using namespace tidemark::log::test;

namespace {

std::vector<Owned> write_records(LogWriter& writer, size_t n) {
    std::vector<Owned> out;
    for (size_t i = 0; i < n; ++i) {
        out.push_back(append(writer, RecordType::message, static_cast<int64_t>(i),
                             "s/" + std::to_string(i), payload_of(i, 20 + i % 50)));
    }
    return out;
}

}  // namespace

TEST_CASE("reading from any record offset", "[log]") {
    TempDir tmp;
    auto writer = open_writer(options_for(tmp.path(), 400));
    auto expected = write_records(*writer, 120);
    auto reader = LogReader::open(tmp.path());
    REQUIRE(reader.has_value());
    for (size_t i = 0; i <= expected.size(); ++i) {
        uint64_t at = i < expected.size() ? expected[i].offset : writer->end_offset();
        REQUIRE((*reader)->seek(at).has_value());
        std::vector<Owned> got;
        Record rec;
        while ((*reader)->next(rec).value())
            got.push_back(own(rec));
        REQUIRE(got == std::vector<Owned>(expected.begin() + static_cast<long>(i), expected.end()));
    }
    // Past the end: refused with both numbers.
    auto past = (*reader)->seek(writer->end_offset() + 1);
    REQUIRE_FALSE(past.has_value());
    REQUIRE_THAT(past.error().message, Catch::Contains(std::to_string(writer->end_offset())));
}

TEST_CASE("a reader tails a writer: false at the end, then the new records", "[log]") {
    TempDir tmp;
    // A reader may be opened before the writer has created anything.
    std::filesystem::create_directories(tmp.path());
    auto reader = LogReader::open(tmp.path());
    REQUIRE(reader.has_value());
    Record rec;
    REQUIRE_FALSE((*reader)->next(rec).value());

    auto writer = open_writer(options_for(tmp.path(), 300));
    std::vector<Owned> expected;
    size_t seen = 0;
    for (size_t round = 0; round < 20; ++round) {
        for (size_t i = 0; i < round % 4; ++i) {
            expected.push_back(append(*writer, RecordType::message, static_cast<int64_t>(round),
                                      "t", payload_of(expected.size(), 90)));
        }
        while ((*reader)->next(rec).value()) {
            REQUIRE(seen < expected.size());
            REQUIRE(own(rec) == expected[seen++]);
        }
        REQUIRE(seen == expected.size());
        REQUIRE((*reader)->position() == writer->end_offset());
    }
    REQUIRE(list_segments(tmp.path())->size() > 5);  // the tail crossed rollovers
}

TEST_CASE("readers tail a writer appending in another thread", "[log]") {
    TempDir tmp;
    auto writer = open_writer(options_for(tmp.path(), 32 << 10));
    constexpr size_t count = 20000;
    std::thread appender([&] {
        for (size_t i = 0; i < count; ++i) {
            (void)writer->append(RecordType::message, static_cast<int64_t>(i), "t",
                                 payload_of(i, 80));
        }
    });
    for (bool bounded : {false, true}) {
        auto reader = LogReader::open(tmp.path());
        REQUIRE(reader.has_value());
        size_t seen = 0;
        Record rec;
        while (seen < count) {
            uint64_t bound = bounded ? writer->end_offset() : UINT64_MAX;
            auto more = (*reader)->next(rec, bound);
            INFO((more ? std::string() : more.error().message));
            REQUIRE(more.has_value());
            if (!*more) {
                std::this_thread::yield();
                continue;
            }
            REQUIRE(rec.ingest_ms == static_cast<int64_t>(seen));
            REQUIRE(rec.payload == payload_of(seen, 80));
            ++seen;
        }
    }
    appender.join();
}

TEST_CASE("a damaged record in the middle of the log is skipped, counted and named", "[log]") {
    TempDir tmp;
    auto writer = open_writer(options_for(tmp.path(), 1000));
    auto expected = write_records(*writer, 60);
    writer.reset();
    REQUIRE(list_segments(tmp.path())->size() >= 3);

    // One record in the first segment, one in the middle of the newest (data follows both),
    // read to the end and bounded by the writer's end as the service does.
    for (size_t victim : {size_t{4}, expected.size() - 3}) {
        for (bool bounded : {false, true}) {
            INFO("victim " << victim << (bounded ? ", bounded" : ""));
            TempDir copy;
            std::filesystem::copy(tmp.path(), copy.sub("log"));
            const Owned& bad = expected[victim];
            SegmentFile seg = segment_holding(copy.sub("log"), bad.offset);
            flip_byte(seg.path, bad.offset - seg.first_offset + 20);

            auto reader = LogReader::open(copy.sub("log")).value();
            std::vector<Owned> got;
            Record rec;
            uint64_t bound = bounded ? expected.back().next_offset : UINT64_MAX;
            while (true) {
                auto more = reader->next(rec, bound);
                INFO((more ? std::string() : more.error().message));
                REQUIRE(more.has_value());
                if (!*more) break;
                got.push_back(own(rec));
            }
            // Every other record, at its own offset.
            REQUIRE(got == without(expected, {victim}));
            ReaderStats stats = reader->stats();
            REQUIRE(stats.damaged_regions == 1);
            REQUIRE(stats.damaged_bytes == bad.next_offset - bad.offset);
            REQUIRE_THAT(stats.last_damage, Catch::Contains(seg.path));
            REQUIRE_THAT(stats.last_damage, Catch::Contains(std::to_string(bad.offset)));
        }
    }
}

TEST_CASE("a zero-filled tail reads as the end; an incomplete frame too", "[log]") {
    TempDir tmp;
    auto writer = open_writer(options_for(tmp.path()));
    auto expected = write_records(*writer, 10);
    writer.reset();
    std::string path = segment_path(tmp.path(), 0);
    auto size = std::filesystem::file_size(path);
    {
        std::ofstream out(path, std::ios::binary | std::ios::app);
        out << std::string(4096, '\0');
    }
    REQUIRE(read_all(tmp.path()) == expected);
    std::filesystem::resize_file(path, size);
    {
        std::ofstream out(path, std::ios::binary | std::ios::app);
        out << std::string("\x40\x00\x00\x00\x11\x22", 6);  // header cut short
    }
    REQUIRE(read_all(tmp.path()) == expected);
    // Told by the writer that the log ends further on, the same bytes are damage.
    auto reader = LogReader::open(tmp.path()).value();
    REQUIRE(reader->seek(expected.back().next_offset).has_value());
    Record rec;
    REQUIRE_FALSE(reader->next(rec, size + 100).has_value());
}

namespace {

// Reads the whole log in batches of up to `batch` records, keeping each batch's records only
// once all of them are read (their views must hold together), alternating with single next()
// calls when `mixed`. Counts the batches that ended early while more followed.
std::vector<Owned> read_batched(const std::string& dir, size_t batch, bool mixed,
                                ReaderOptions options, size_t* short_batches = nullptr,
                                size_t* long_batches = nullptr, uint64_t bound = UINT64_MAX) {
    auto reader = LogReader::open(dir, options).value();
    std::vector<Record> records(batch);
    std::vector<Owned> out;
    for (size_t round = 0;; ++round) {
        if (mixed && round % 3 == 2) {
            Record rec;
            auto more = reader->next(rec, bound);
            REQUIRE(more.has_value());
            if (!*more) break;
            out.push_back(own(rec));
            continue;
        }
        auto got = reader->next_batch(std::span(records), bound);
        INFO((got ? std::string() : got.error().message));
        REQUIRE(got.has_value());
        if (*got == 0) break;
        REQUIRE(*got <= batch);
        for (size_t i = 0; i < *got; ++i)
            out.push_back(own(records[i]));
        if (short_batches && *got < batch) ++*short_batches;
        if (long_batches && *got > 1) ++*long_batches;
    }
    return out;
}

}  // namespace

TEST_CASE("a batch read gives next()'s records, whose views hold together", "[log]") {
    TempDir tmp;
    auto writer = open_writer(options_for(tmp.path(), 64 << 10));
    // Few topics, so that most frames refer to a topic defined before; a new one now and then
    // (a definition ends a batch), ticks and malformed records between.
    std::vector<Owned> expected;
    for (size_t i = 0; i < 3000; ++i) {
        const auto t = static_cast<int64_t>(i);
        if (i % 97 == 5) {
            expected.push_back(append(*writer, RecordType::tick, t, "$tick", ""));
            continue;
        }
        if (i % 211 == 7) {
            auto offset = writer->append_malformed(t, "oversized: test", "s/9", "p");
            REQUIRE(offset.has_value());
            continue;
        }
        const std::string topic = "s/" + std::to_string(i % 400 < 390 ? i % 7 : i);
        expected.push_back(
            append(*writer, RecordType::message, t, topic, payload_of(i, 20 + i % 60)));
    }
    writer.reset();
    REQUIRE(list_segments(tmp.path())->size() >= 2);
    // What next() reads, one by one (the malformed records included).
    const std::vector<Owned> one_by_one = read_all(tmp.path());
    REQUIRE(one_by_one.size() > expected.size());

    for (const uint64_t buffer : {uint64_t{1} << 20, uint64_t{4096}, uint64_t{300}}) {
        for (const size_t batch : {size_t{1}, size_t{16}, size_t{128}}) {
            for (const bool mixed : {false, true}) {
                INFO("buffer " << buffer << ", batch " << batch << (mixed ? ", mixed" : ""));
                ReaderOptions options;
                options.buffer_bytes = buffer;
                size_t short_batches = 0, long_batches = 0;
                REQUIRE(read_batched(tmp.path(), batch, mixed, options, &short_batches,
                                     &long_batches) == one_by_one);
                if (batch > 1 && !mixed) {
                    CHECK(long_batches > 0);
                    // Ended early at the buffer's end, at a definition, at a segment's end.
                    CHECK(short_batches > 1);
                }
            }
        }
    }
    // Bounded below the end: no record at or past the bound.
    const uint64_t bound = one_by_one[one_by_one.size() / 2].offset;
    std::vector<Owned> below;
    for (const Owned& r : one_by_one)
        if (r.offset < bound) below.push_back(r);
    CHECK(read_batched(tmp.path(), 64, false, {}, nullptr, nullptr, bound) == below);
}

TEST_CASE("a batch read skips damage as next() does", "[log]") {
    TempDir tmp;
    auto writer = open_writer(options_for(tmp.path(), 4000));
    std::vector<Owned> expected;
    for (size_t i = 0; i < 400; ++i)
        expected.push_back(append(*writer, RecordType::message, static_cast<int64_t>(i),
                                  "s/" + std::to_string(i % 5), payload_of(i, 30)));
    writer.reset();
    // A topic's definition (record 3: what refers to it up to the next anchor is lost with
    // it), a record referring to one, the newest segment's second-to-last record.
    for (size_t victim : {size_t{3}, size_t{150}, expected.size() - 2}) {
        INFO("victim " << victim);
        TempDir copy;
        std::filesystem::copy(tmp.path(), copy.sub("log"));
        const Owned& bad = expected[victim];
        SegmentFile seg = segment_holding(copy.sub("log"), bad.offset);
        flip_byte(seg.path, bad.offset - seg.first_offset + (bad.next_offset - bad.offset) / 2);
        auto one_by_one = LogReader::open(copy.sub("log")).value();
        std::vector<Owned> want;
        Record rec;
        while (one_by_one->next(rec).value())
            want.push_back(own(rec));
        REQUIRE(want.size() < expected.size());
        if (victim != 3) CHECK(want == without(expected, {victim}));

        std::vector<Owned> got;
        auto reader = LogReader::open(copy.sub("log")).value();
        std::vector<Record> records(32);
        while (true) {
            auto n = reader->next_batch(std::span(records));
            REQUIRE(n.has_value());
            if (*n == 0) break;
            for (size_t i = 0; i < *n; ++i)
                got.push_back(own(records[i]));
        }
        CHECK(got == want);
        CHECK(reader->stats().damaged_regions == one_by_one->stats().damaged_regions);
        CHECK(reader->stats().damaged_bytes == one_by_one->stats().damaged_bytes);
        CHECK(reader->stats().damaged_regions >= 1);
    }
}

namespace {

// Where a read from `from` stopped at an error: the records before it, the error, the position
// and the damage counted there, and how many records the last call that returned any gave.
struct StoppedAt {
    std::vector<Owned> records;
    std::string error;
    uint64_t position = 0;
    ReaderStats stats;
    size_t last_call_records = 0;
};

// Reads with next() one by one (batch 0) or next_batch() until a call fails, checking the
// position after every call, and that the call after the failure fails alike, not moving.
StoppedAt read_to_error(const std::string& dir, uint64_t from, size_t batch) {
    auto reader = LogReader::open(dir).value();
    REQUIRE(reader->seek(from).has_value());
    std::vector<Record> records(std::max<size_t>(batch, 1));
    auto call = [&]() -> tidemark::Result<size_t> {
        if (batch > 0) return reader->next_batch(std::span(records));
        auto more = reader->next(records[0]);
        if (!more) return std::unexpected(more.error());
        return *more ? size_t{1} : size_t{0};
    };
    StoppedAt out;
    while (true) {
        auto got = call();
        if (!got) {
            out.error = got.error().message;
            out.position = reader->position();
            out.stats = reader->stats();
            auto again = call();
            REQUIRE_FALSE(again.has_value());
            CHECK(again.error().message == out.error);
            CHECK(again.error().code == got.error().code);
            CHECK(reader->position() == out.position);
            return out;
        }
        REQUIRE(*got > 0);  // the log must not end before the error
        for (size_t i = 0; i < *got; ++i)
            out.records.push_back(own(records[i]));
        REQUIRE(reader->position() == out.records.back().next_offset);
        out.last_call_records = *got;
    }
}

}  // namespace

TEST_CASE("a batch read stops at a record of an unknown type as next() does", "[log]") {
    // A frame with a valid CRC and an unknown type (a newer tidemark wrote it) is an error, not
    // damage. A batch that reaches it returns the records before it; the next call fails as
    // next() does, at the same position, with nothing counted as damage. The frame lies in the
    // middle of a batch, and at the first position of one.
    TempDir tmp;
    auto writer = open_writer(options_for(tmp.path()));
    std::vector<Owned> expected;
    for (size_t i = 0; i < 300; ++i)
        expected.push_back(append(*writer, RecordType::message, static_cast<int64_t>(i),
                                  "s/" + std::to_string(i % 5), payload_of(i, 30)));
    writer.reset();
    REQUIRE(list_segments(tmp.path())->size() == 1);
    // Record 200 (a compact frame referring to its topic: 1-byte length, CRC, body) becomes
    // type 9, its CRC made to match (seeded with the frame's offset, record.h). The segment
    // starts at offset 0: its file positions are log offsets.
    constexpr size_t victim = 200;
    const Owned& bad = expected[victim];
    const std::string path = segment_path(tmp.path(), 0);
    std::string bytes = file_bytes(path);
    const size_t body_bytes = static_cast<unsigned char>(bytes[bad.offset]);
    REQUIRE(1 + 4 + body_bytes == bad.next_offset - bad.offset);
    bytes[bad.offset + 5] = 9;
    store_le(bytes.data() + bad.offset + 1,
             crc32c(frame_crc_seed(bad.offset),
                    std::string_view(bytes).substr(bad.offset + 5, body_bytes)),
             4);
    {
        std::ofstream out(path, std::ios::binary | std::ios::trunc);
        out << bytes;
    }

    for (const size_t batch : {size_t{1}, size_t{3}, size_t{16}, size_t{128}}) {
        for (const bool at_batch_start : {false, true}) {
            INFO("batch " << batch << (at_batch_start ? ", frame first in its batch" : ""));
            // Records 0 to 4 define their topics, and a definition ends a batch; from record 4
            // on every batch is full (the buffer holds the whole segment). From the log's start
            // the frame falls inside a batch (196 records from 4 to it: no multiple of 3, 16 or
            // 128); from record `first` it is the first of one.
            const size_t first = at_batch_start ? 5 + (victim - 5) % batch : 0;
            const uint64_t from = at_batch_start ? expected[first].offset : 0;
            const StoppedAt want = read_to_error(tmp.path(), from, 0);
            REQUIRE(want.records ==
                    std::vector<Owned>(expected.begin() + static_cast<long>(first),
                                       expected.begin() + static_cast<long>(victim)));
            REQUIRE(want.position == bad.offset);
            REQUIRE_THAT(want.error, Catch::Contains("at offset " + std::to_string(bad.offset) +
                                                     " has an unknown type"));
            REQUIRE(want.stats.damaged_regions == 0);

            const StoppedAt got = read_to_error(tmp.path(), from, batch);
            CHECK(got.records == want.records);
            CHECK(got.error == want.error);
            CHECK(got.position == want.position);
            CHECK(got.stats.damaged_regions == want.stats.damaged_regions);
            CHECK(got.stats.damaged_bytes == want.stats.damaged_bytes);
            CHECK(got.stats.last_damage == want.stats.last_damage);
            // The call that reached the frame: a full batch that ends just before it, or one cut
            // short by it.
            if (at_batch_start) {
                CHECK(got.last_call_records == batch);
            } else if (batch > 1) {
                CHECK(got.last_call_records > 0);
                CHECK(got.last_call_records < batch);
            }
        }
    }
}
