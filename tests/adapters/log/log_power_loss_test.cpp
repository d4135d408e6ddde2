// Power loss, simulated: the newest segment is cut at every byte of its last records, or has
// them garbled, or carries junk after them. Reopening keeps every valid record, cuts only a
// torn tail (invalid bytes with nothing valid after them), counts the cut, and appends go on
// from there; a garbled record with valid ones after it is damage in the middle: skipped by
// readers and counted, never cut.
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>

#include "adapters/log/segment_files.h"
#include "log_test_support.h"

using namespace tidemark::log;
using namespace tidemark::log::test;

namespace {

struct Fixture {
    TempDir tmp{true};
    std::vector<Owned> expected;
    uint64_t last_segment_first = 0;
    std::string original() const { return tmp.sub("log"); }

    Fixture() {
        auto writer = open_writer(options_for(original(), 700));
        // At least 14 records, and then until the last three share the newest segment.
        for (size_t i = 0; i < 14 || expected[expected.size() - 3].offset <
                                         list_segments(original()).value().back().first_offset;
             ++i) {
            expected.push_back(append(*writer, i % 5 == 4 ? RecordType::tick : RecordType::message,
                                      static_cast<int64_t>(i) * 10,
                                      i % 5 == 4 ? "" : "dev/" + std::to_string(i),
                                      i % 5 == 4 ? "" : payload_of(i, 30 + 7 * i)));
        }
        last_segment_first = list_segments(original()).value().back().first_offset;
        // The last three records must share the newest segment for the cuts below.
        REQUIRE(expected[expected.size() - 3].offset >= last_segment_first);
        REQUIRE(last_segment_first > 0);
    }

    // Copies the log, lets `damage` edit the newest segment, reopens and checks that exactly
    // the records ending at or before `kept_end` survive, but for `skipped` (a record damaged
    // in the middle: its bytes stay, readers pass over them).
    template <typename Damage>
    void check(Damage damage, uint64_t kept_end, std::optional<size_t> skipped = std::nullopt) {
        TempDir work{true};
        std::string dir = work.sub("log");
        std::filesystem::copy(original(), dir);
        std::string path = segment_path(dir, last_segment_first);
        damage(path);
        uint64_t damaged_bytes = std::filesystem::file_size(path);

        auto writer = open_writer(options_for(dir, 700));
        std::vector<Owned> kept;
        for (size_t i = 0; i < expected.size(); ++i) {
            if (expected[i].next_offset <= kept_end && i != skipped) kept.push_back(expected[i]);
        }
        uint64_t good_end = kept.empty() ? 0 : kept.back().next_offset;
        // The anchor that opens the newest segment (record.h) survives a cut after it.
        const uint64_t anchor_end = last_segment_first + anchor_frame_bytes;
        if (kept_end >= anchor_end) good_end = std::max(good_end, anchor_end);
        REQUIRE(writer->end_offset() == good_end);
        REQUIRE(writer->durable_offset() == good_end);
        auto stats = writer->stats();
        uint64_t cut = last_segment_first + damaged_bytes - good_end;
        REQUIRE(stats.tail_bytes_cut == cut);
        REQUIRE(stats.tail_truncations == (cut > 0 ? 1u : 0u));
        REQUIRE(stats.damaged_regions == (skipped ? 1u : 0u));
        REQUIRE(stats.damaged_bytes ==
                (skipped ? expected[*skipped].next_offset - expected[*skipped].offset : 0u));
        REQUIRE(std::filesystem::file_size(path) == good_end - last_segment_first);
        REQUIRE(read_all(dir) == kept);

        kept.push_back(append(*writer, RecordType::message, 1, "after/restart", "ok"));
        // It goes on in the segment, unless nothing valid was left of it or it has damage: then
        // a new segment starts there, with its anchor.
        const bool goes_on = good_end > last_segment_first && !skipped;
        REQUIRE(kept.back().offset == good_end + (goes_on ? 0 : anchor_frame_bytes));
        // Never back (an anchor left alone by the cut holds its cut record's time, one later).
        REQUIRE(kept.back().ingest_ms >= kept[kept.size() - 2].ingest_ms);
        REQUIRE(kept.back().ingest_ms <= expected.back().ingest_ms);
        REQUIRE(read_all(dir) == kept);
    }
};

}  // namespace

TEST_CASE("power loss: a cut at every byte of the last three records", "[log]") {
    Fixture f;
    uint64_t from = f.expected[f.expected.size() - 3].offset;
    uint64_t to = f.expected.back().next_offset;
    for (uint64_t cut = from; cut <= to; ++cut) {
        INFO("cut at offset " << cut);
        f.check(
            [&](const std::string& path) {
                std::filesystem::resize_file(path, cut - f.last_segment_first);
            },
            cut);
    }
}

TEST_CASE("power loss: a garbled byte anywhere in the last three records", "[log]") {
    Fixture f;
    for (size_t k = f.expected.size() - 3; k < f.expected.size(); ++k) {
        const Owned& victim = f.expected[k];
        const bool last = k + 1 == f.expected.size();
        for (uint64_t at = victim.offset; at < victim.next_offset; ++at) {
            INFO("garbled byte at offset " << at << " in record " << k);
            // The last record is a torn tail and goes; an earlier one has valid records after
            // it: damage in the middle, skipped, and nothing after it is cut.
            f.check(
                [&](const std::string& path) {
                    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
                    auto pos = static_cast<std::streamoff>(at - f.last_segment_first);
                    file.seekg(pos);
                    char c = 0;
                    file.get(c);
                    file.seekp(pos);
                    file.put(static_cast<char>(c ^ 0xA5));
                },
                last ? victim.offset : f.expected.back().next_offset,
                last ? std::nullopt : std::optional<size_t>(k));
        }
    }
}

TEST_CASE("power loss: junk or zeros after the last record", "[log]") {
    Fixture f;
    std::mt19937 rng(42);
    for (size_t junk_bytes : {1, 7, 8, 19, 100, 5000}) {
        for (bool zeros : {true, false}) {
            INFO(junk_bytes << (zeros ? " zero bytes" : " random bytes"));
            std::string junk(junk_bytes, '\0');
            if (!zeros) {
                for (char& c : junk)
                    c = static_cast<char>(rng());
            }
            f.check(
                [&](const std::string& path) {
                    std::ofstream out(path, std::ios::binary | std::ios::app);
                    out << junk;
                },
                f.expected.back().next_offset);
        }
    }
    // A torn write of the very first record of a fresh log.
    TempDir fresh;
    {
        std::filesystem::create_directories(fresh.path());
        std::ofstream out(segment_path(fresh.path(), 0), std::ios::binary);
        out << std::string("\x20\x00\x00\x00\x01", 5);
    }
    auto writer = open_writer(options_for(fresh.path()));
    REQUIRE(writer->end_offset() == 0);
    REQUIRE(writer->stats().tail_bytes_cut == 5);
    REQUIRE(append(*writer, RecordType::tick, 5, "", "").offset == anchor_frame_bytes);
}
