// Compact frames and the topic dictionary (record.h, issue 16): a topic is written once per
// segment (and again after each anchor), frames carry its id; what that costs and what it must
// never cost: a record read with another record's topic, a log of the old format unread.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>

#include "adapters/log/crc32c.h"
#include "adapters/log/segment_files.h"
#include "log_test_support.h"

using namespace tidemark::log;
using namespace tidemark::log::test;

namespace {

std::string topic_of(size_t device) {
    char text[40];
    std::snprintf(text, sizeof text, "sensors/dev-%04zu/telemetry", device);
    return text;
}

void write_file(const std::string& path, const std::string& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << bytes;
}

// A frame of the old format (record.h, "Full frame"), encoded here from the text.
std::string full_frame(RecordType type, int64_t ingest_ms, const std::string& topic,
                       const std::string& payload) {
    std::string body(body_prefix_bytes, '\0');
    body[0] = static_cast<char>(type);
    store_le(body.data() + 1, static_cast<uint64_t>(ingest_ms), 8);
    store_le(body.data() + 9, topic.size(), 2);
    body += topic + payload;
    std::string frame(frame_header_bytes, '\0');
    store_le(frame.data(), body.size(), 4);
    store_le(frame.data() + 4, crc32c(0, body), 4);
    return frame + body;
}

}  // namespace

TEST_CASE("a topic is written once per segment; later frames carry its id", "[log]") {
    TempDir tmp;
    auto writer = open_writer(options_for(tmp.path()));
    std::vector<Owned> expected;
    uint64_t payload_bytes = 0;
    for (size_t i = 0; i < 10'000; ++i) {
        const std::string payload = payload_of(i, 81);
        payload_bytes += payload.size();
        expected.push_back(append(*writer, RecordType::message, 1'764'400'000'000 + int64_t(i),
                                  topic_of(i % 100), payload));
    }
    REQUIRE(read_all(tmp.path()) == expected);
    // A frame of a known topic: 1-byte length, CRC, type, 1-2 byte time delta, 1-byte id.
    const Owned& later = expected[5000];
    CHECK(later.next_offset - later.offset <= 81 + 1 + 4 + 1 + 2 + 1);
    // The whole log: under 1.15 bytes per payload byte (the full frames took 1.4 here).
    const double per_payload_byte = double(writer->end_offset()) / double(payload_bytes);
    CHECK(per_payload_byte < 1.15);
    CHECK(double(frame_bytes(26, 81)) / 81.0 > 1.4);
}

TEST_CASE("seek into the middle of a compact segment: the topics before it are known", "[log]") {
    TempDir tmp;
    auto writer = open_writer(options_for(tmp.path()));
    std::vector<Owned> expected;
    for (size_t i = 0; i < 200; ++i) {
        expected.push_back(append(*writer, i % 9 == 4 ? RecordType::tick : RecordType::message,
                                  int64_t(i) * 100, i % 9 == 4 ? "" : topic_of(i % 7),
                                  i % 9 == 4 ? "" : payload_of(i, 20 + i % 30)));
    }
    for (size_t from : {1, 7, 50, 150, 199}) {
        INFO("from record " << from);
        REQUIRE(read_all(tmp.path(), expected[from].offset) ==
                std::vector<Owned>(expected.begin() + long(from), expected.end()));
    }
}

TEST_CASE("a reopened writer goes on in its segment with the segment's dictionary", "[log]") {
    TempDir tmp;
    std::vector<Owned> expected;
    {
        auto writer = open_writer(options_for(tmp.path()));
        expected.push_back(append(*writer, RecordType::message, 10, "a/topic/name", "1"));
        expected.push_back(append(*writer, RecordType::message, 11, "b/topic/name", "2"));
    }
    auto writer = open_writer(options_for(tmp.path()));
    expected.push_back(append(*writer, RecordType::message, 12, "a/topic/name", "3"));
    expected.push_back(append(*writer, RecordType::message, 13, "c/topic/name", "4"));
    expected.push_back(append(*writer, RecordType::message, 14, "b/topic/name", "5"));
    REQUIRE(list_segments(tmp.path())->size() == 1);
    // "a" is known from before the restart: its frame carries the id, not the topic.
    CHECK(expected[2].next_offset - expected[2].offset < 12);
    CHECK(expected[3].next_offset - expected[3].offset > 12);  // "c" is new: defined
    REQUIRE(read_all(tmp.path()) == expected);
    REQUIRE(read_all(tmp.path(), expected[3].offset) ==
            std::vector<Owned>(expected.begin() + 3, expected.end()));
}

TEST_CASE("a log of the old format is read as it is; appends go on in a new segment", "[log]") {
    TempDir tmp;
    std::filesystem::create_directories(tmp.path());
    const std::string old = full_frame(RecordType::message, 100, "old/a", "{\"v\":1}") +
                            full_frame(RecordType::tick, 150, "", "") +
                            full_frame(RecordType::message, 200, "old/b", "{\"v\":2}");
    write_file(segment_path(tmp.path(), 0), old);
    std::vector<Owned> expected = read_all(tmp.path());
    REQUIRE(expected.size() == 3);
    CHECK(expected[0].topic == "old/a");
    CHECK(expected[2].next_offset == old.size());

    auto writer = open_writer(options_for(tmp.path()));
    REQUIRE(writer->end_offset() == old.size());
    expected.push_back(append(*writer, RecordType::message, 50, "old/a", "{\"v\":3}"));
    expected.push_back(append(*writer, RecordType::message, 300, "new/c", "{\"v\":4}"));
    CHECK(expected[3].ingest_ms == 200);  // never back, across the formats
    CHECK(expected[3].offset == old.size() + anchor_frame_bytes);
    REQUIRE(file_bytes(segment_path(tmp.path(), 0)) == old);  // untouched
    REQUIRE(list_segments(tmp.path())->size() == 2);
    REQUIRE(read_all(tmp.path()) == expected);
    REQUIRE(read_all(tmp.path(), expected[1].offset) ==
            std::vector<Owned>(expected.begin() + 1, expected.end()));
}

TEST_CASE("a lost definition costs its topic's records up to the next anchor, no more", "[log]") {
    TempDir tmp;
    std::vector<Owned> expected;
    {
        auto writer = open_writer(options_for(tmp.path()));
        // Past two anchors (every 4 MiB): ~9 MiB of 100-byte frames on two topics.
        for (size_t i = 0; writer->end_offset() < 2 * anchor_interval_bytes + (1 << 20); ++i) {
            expected.push_back(append(*writer, RecordType::message, int64_t(i),
                                      i % 2 == 0 ? "topic/a" : "topic/b", payload_of(i, 90)));
        }
        REQUIRE(writer->sync().has_value());
    }
    // A bad byte in the first record: topic/a's definition.
    flip_byte(segment_path(tmp.path(), 0), expected[0].offset + 7);
    ReaderStats stats;
    const std::vector<Owned> read =
        read_bounded(tmp.path(), 0, expected.back().next_offset, &stats);
    // Nothing invented, nothing reordered: every record read is one written, in order.
    REQUIRE(std::ranges::includes(
        expected, read, [](const Owned& x, const Owned& y) { return x.offset < y.offset; }));
    for (const Owned& r : read) {
        const auto& written = *std::ranges::find(expected, r.offset, &Owned::offset);
        REQUIRE(r == written);
    }
    // Every topic/b record is there; topic/a's are lost from the start to the next anchor.
    std::set<uint64_t> got;
    for (const Owned& r : read)
        got.insert(r.offset);
    uint64_t first_a_back = UINT64_MAX;
    for (const Owned& r : expected) {
        if (r.topic == "topic/b") REQUIRE(got.contains(r.offset));
        if (r.topic == "topic/a" && got.contains(r.offset))
            first_a_back = std::min(first_a_back, r.offset);
    }
    REQUIRE(first_a_back > anchor_interval_bytes - 200);
    REQUIRE(first_a_back < anchor_interval_bytes + 400);
    for (const Owned& r : expected) {
        if (r.offset >= first_a_back) REQUIRE(got.contains(r.offset));
    }
    CHECK(stats.damaged_regions > 1);
    CHECK_THAT(stats.last_damage, Catch::Contains("topic definition was lost"));
}

TEST_CASE("the topic dictionary is bounded: too many topics start a new segment", "[log]") {
    TempDir tmp;
    auto writer = open_writer(options_for(tmp.path()));
    const size_t topics = topic_ids_max + 100;
    for (size_t i = 0; i < topics; ++i) {
        auto ok = writer->append(RecordType::message, 1, "t/" + std::to_string(i), "p");
        REQUIRE(ok.has_value());
    }
    REQUIRE(list_segments(tmp.path())->size() == 2);
    REQUIRE(read_all(tmp.path()).size() == topics);
}

TEST_CASE("a compact frame of an unknown type is refused as newer, not cut off", "[log]") {
    TempDir tmp;
    {
        auto writer = open_writer(options_for(tmp.path()));
        append(*writer, RecordType::message, 1, "t", "p");
    }
    const std::string path = segment_path(tmp.path(), 0);
    std::string bytes = file_bytes(path);
    // The record's compact frame after the anchor: 1-byte length, CRC, then its body.
    const size_t frame = anchor_frame_bytes;
    const size_t body_bytes = static_cast<unsigned char>(bytes[frame]);
    bytes[frame + 5] = 9;
    store_le(bytes.data() + frame + 1,
             crc32c(frame_crc_seed(frame), std::string_view(bytes).substr(frame + 5, body_bytes)),
             4);
    write_file(path, bytes);
    auto writer = LogWriter::open(options_for(tmp.path()));
    REQUIRE_FALSE(writer.has_value());
    REQUIRE_THAT(writer.error().message, Catch::Contains("newer"));
    REQUIRE(std::filesystem::file_size(path) == bytes.size());
}

// Issue 25, finding 4: a QoS0 message is never redelivered, and its record says so, so that
// the redelivery filter seeded from the log after a restart leaves it out of the run it would
// otherwise break. Types 6, 7 and 8 (record.h) carry the same fields as 1, 5 and 3.
TEST_CASE("a record of a message never redelivered reads back as one, with its topic", "[log]") {
    TempDir tmp;
    struct Want {
        RecordType type;
        std::string topic;
        bool redeliverable;
    };
    const std::vector<Want> want{
        {RecordType::message, "t/once", false},  // defines t/once
        {RecordType::message, "t/once", true},   // refers to it
        {RecordType::message, "t/once", false},  // refers to it, never redelivered
        {RecordType::message, "t/again", true},  // defines t/again
        {RecordType::malformed, "t/big", false},
        {RecordType::malformed, "t/big", true},
        {RecordType::tick, "", true},
        {RecordType::message, "t/again", false},  // after the reopen: defined again
    };
    {
        auto writer = open_writer(options_for(tmp.path()));
        for (size_t i = 0; i + 1 < want.size(); ++i) {
            const Want& w = want[i];
            const std::string payload = "p" + std::to_string(i);
            auto ok = w.type == RecordType::malformed
                          ? writer->append_malformed(100 + static_cast<int64_t>(i), "oversized",
                                                     w.topic, payload, w.redeliverable)
                          : writer->append(w.type, 100 + static_cast<int64_t>(i), w.topic, payload,
                                           w.redeliverable);
            REQUIRE(ok);
        }
    }
    {
        auto writer = open_writer(options_for(tmp.path()));
        REQUIRE(writer->append(RecordType::message, 200, "t/again", "p7", false));
    }
    auto reader = LogReader::open(tmp.path());
    REQUIRE(reader);
    Record rec;
    size_t i = 0;
    for (;;) {
        auto more = (*reader)->next(rec);
        REQUIRE(more);
        if (!*more) break;
        REQUIRE(i < want.size());
        INFO("record " << i);
        CHECK(rec.type == want[i].type);
        CHECK(rec.topic == want[i].topic);
        CHECK(rec.payload == "p" + std::to_string(i));
        CHECK(rec.redeliverable == want[i].redeliverable);
        if (rec.type == RecordType::malformed) CHECK(rec.reason == "oversized");
        ++i;
    }
    CHECK(i == want.size());
}

TEST_CASE("a reader's topic table: one block, ids to their topics, bounded", "[log]") {
    TopicTable table;
    REQUIRE(table.define(1, "sensors/a/telemetry"));
    REQUIRE(table.define(3, ""));
    CHECK(table.find(1) == std::optional<std::string_view>("sensors/a/telemetry"));
    CHECK(!table.find(2));
    CHECK(table.find(3) == std::optional<std::string_view>(""));
    CHECK(!table.find(0));
    CHECK(!table.find(4));
    CHECK(table.ids() == 3);
    CHECK(table.bytes() == 19);
    // The topics lie side by side in one block, not each in its own allocation.
    REQUIRE(table.define(2, "sensors/b/telemetry"));
    CHECK(table.find(2)->data() == table.find(1)->data() + 19);

    // The same topic again changes nothing; another topic for an id replaces it.
    REQUIRE(table.define(1, "sensors/a/telemetry"));
    CHECK(table.bytes() == 38);
    REQUIRE(table.define(1, "x"));
    CHECK(table.find(1) == std::optional<std::string_view>("x"));
    CHECK(table.bytes() == 20);

    std::vector<std::pair<uint32_t, std::string>> seen;
    table.for_each([&](uint32_t id, std::string_view topic) { seen.emplace_back(id, topic); });
    CHECK(seen == std::vector<std::pair<uint32_t, std::string>>{
                      {1, "x"}, {2, "sensors/b/telemetry"}, {3, ""}});

    // Ids and bytes are bounded as the writer's dictionary is: past either, refused, unchanged.
    CHECK(!table.define(0, "zero"));
    CHECK(!table.define(topic_ids_max + 1, "too far"));
    const std::string big(topic_bytes_max, 'b');
    uint64_t id = 10;
    while (table.bytes() + big.size() <= topic_dictionary_bytes_max)
        REQUIRE(table.define(id++, big));
    const uint64_t full = table.bytes();
    CHECK(!table.define(id, big));
    CHECK(table.bytes() == full);
    CHECK(!table.find(id));

    // An id given other bytes again and again (damage or a forged segment, never the writer)
    // leaves old bytes behind: the block is rebuilt of the named ones, which read the same.
    for (int round = 0; round < 200; ++round) {
        REQUIRE(
            table.define(10, std::string(topic_bytes_max, static_cast<char>('c' + round % 20))));
    }
    CHECK(table.bytes() == full);
    CHECK(table.memory_bytes() <=
          2 * topic_dictionary_bytes_max + topic_bytes_max + topic_ids_max * 8);
    CHECK(table.find(10) ==
          std::optional<std::string_view>(std::string(topic_bytes_max, 'c' + 199 % 20)));
    CHECK(table.find(11) == std::optional<std::string_view>(big));
    CHECK(table.find(2) == std::optional<std::string_view>("sensors/b/telemetry"));

    table.clear();
    CHECK(table.ids() == 0);
    CHECK(table.bytes() == 0);
    CHECK(!table.find(1));
}
