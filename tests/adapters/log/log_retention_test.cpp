#include <filesystem>

#include "adapters/log/segment_files.h"
#include "log_test_support.h"

using namespace tidemark::log;
using namespace tidemark::log::test;

namespace {

constexpr uint64_t segment_bytes = 1000;

std::vector<Owned> fill(LogWriter& writer, size_t n) {
    std::vector<Owned> out;
    for (size_t i = 0; i < n; ++i) {
        out.push_back(append(writer, RecordType::message, static_cast<int64_t>(i) * 1000, "t",
                             payload_of(i, 100)));
    }
    return out;
}

uint64_t bytes_on_disk(const std::string& dir) {
    uint64_t total = 0;
    auto segments = list_segments(dir).value();
    for (const auto& seg : segments)
        total += seg.bytes;
    return total;
}

}  // namespace

TEST_CASE("retention by bytes: whole segments, never past keep_from, never the active one",
          "[log]") {
    TempDir tmp;
    auto options = options_for(tmp.path(), segment_bytes);
    options.retention_bytes_max = 3000;
    auto writer = open_writer(options);
    auto records = fill(*writer, 60);
    size_t segments_before = list_segments(tmp.path())->size();
    REQUIRE(segments_before >= 8);

    // Nothing is before the checkpoint: nothing goes, however far over the bound.
    auto none = writer->apply_retention(0, 0).value();
    REQUIRE(none.segments_removed == 0);
    REQUIRE(list_segments(tmp.path())->size() == segments_before);

    // A checkpoint at record 30: segments wholly before it go while over 3000 bytes.
    uint64_t keep_from = records[30].offset;
    auto some = writer->apply_retention(keep_from, 0).value();
    REQUIRE(some.segments_removed > 0);
    REQUIRE(some.first_offset <= keep_from);
    REQUIRE(writer->first_offset() == some.first_offset);
    REQUIRE(writer->total_bytes() == bytes_on_disk(tmp.path()));
    REQUIRE(writer->total_bytes() > 3000);  // still over: the checkpoint holds the rest
    auto from_checkpoint = read_all(tmp.path(), keep_from);
    REQUIRE(from_checkpoint.front() == records[30]);
    REQUIRE(from_checkpoint.size() == 30);
    auto retained = read_all(tmp.path());
    REQUIRE(retained.front().offset == some.first_offset + anchor_frame_bytes);
    REQUIRE(retained.back() == records.back());

    // Seeking below the oldest segment names both offsets.
    auto reader = LogReader::open(tmp.path()).value();
    auto below = reader->seek(0);
    REQUIRE_FALSE(below.has_value());
    REQUIRE_THAT(below.error().message, Catch::Contains("offset 0"));
    REQUIRE_THAT(below.error().message, Catch::Contains(std::to_string(some.first_offset)));

    // Checkpoint at the end: down to the bound, and the active segment survives any bound.
    auto rest = writer->apply_retention(writer->end_offset(), 0).value();
    REQUIRE(writer->total_bytes() <= 3000);
    REQUIRE(writer->total_bytes() == bytes_on_disk(tmp.path()));
    auto stats = writer->stats();
    REQUIRE(stats.segments_removed == some.segments_removed + rest.segments_removed);
    REQUIRE(stats.bytes_removed == some.bytes_removed + rest.bytes_removed);
    REQUIRE(stats.oldest_ingest_ms == read_all(tmp.path()).front().ingest_ms);

    writer.reset();
    options.retention_bytes_max = 1;
    writer = open_writer(options);
    writer->apply_retention(UINT64_MAX, 0).value();
    REQUIRE(list_segments(tmp.path())->size() == 1);
    REQUIRE(read_all(tmp.path()).back() == records.back());
    append(*writer, RecordType::tick, 0, "", "");
}

TEST_CASE("retention by age uses each segment's newest record, also after a restart", "[log]") {
    for (bool reopen : {false, true}) {
        TempDir tmp;
        auto options = options_for(tmp.path(), segment_bytes);
        options.retention_age_ms_max = 10'000;
        auto writer = open_writer(options);
        auto records = fill(*writer, 60);  // ingest 0 .. 59000 ms
        if (reopen) {
            writer.reset();
            writer = open_writer(options);
        }
        int64_t now_ms = 59'000;
        auto result = writer->apply_retention(writer->end_offset(), now_ms).value();
        REQUIRE(result.segments_removed > 0);
        auto retained = read_all(tmp.path());
        // Every removed record was older than the bound; the oldest kept segment holds one
        // that is not (or it is the active segment).
        for (const auto& r : records) {
            if (r.offset < result.first_offset) REQUIRE(r.ingest_ms < now_ms - 10'000);
        }
        auto segments = list_segments(tmp.path()).value();
        uint64_t first_segment_end = segments.front().first_offset + segments.front().bytes;
        int64_t newest_in_first = 0;
        for (const auto& r : retained) {
            if (r.next_offset <= first_segment_end) newest_in_first = r.ingest_ms;
        }
        REQUIRE((newest_in_first >= now_ms - 10'000 || segments.size() == 1 ||
                 (reopen && newest_in_first + 1000 >= now_ms - 10'000)));
        REQUIRE(retained.back() == records.back());

        // Younger than the bound: nothing more goes; a checkpoint behind holds everything.
        REQUIRE(writer->apply_retention(writer->end_offset(), now_ms).value().segments_removed ==
                0);
        REQUIRE(writer->apply_retention(0, now_ms + 1'000'000).value().segments_removed == 0);
    }
}
