// One parse per message for every pipeline, and a parser whose memory comes back after a large
// message (issue 25, finding 5: one 4 MiB payload used to leave 52 MiB resident, per pipeline).
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <string>

#include "adapters/codec/decoder.h"

using namespace tidemark;
using codec::DecodeStatus;
using codec::KeySource;

namespace {

constexpr std::string_view topic = "sensors/dev-7/telemetry";

codec::DecoderSpec spec(std::vector<std::string> fields) {
    codec::DecoderSpec s;
    s.topic_filter = "sensors/+/telemetry";
    s.key = {KeySource{KeySource::topic_level, 1, ""}};
    s.timestamp = codec::TimeSource{false, "/ts", codec::TimeFormat::epoch_ms};
    s.field_pointers = std::move(fields);
    return s;
}

// AddressSanitizer keeps freed memory in its quarantine and ignores mallopt: under it only the
// parser's own capacity can be checked (CI's sanitizer build of the fast tests). GCC says so with
// __SANITIZE_ADDRESS__, clang 16 only through __has_feature.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool rss_meaningful = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool rss_meaningful = false;
#else
constexpr bool rss_meaningful = true;
#endif
#else
constexpr bool rss_meaningful = true;
#endif

// Resident memory of this process (/proc/self/statm, second field).
int64_t rss_bytes() {
    std::ifstream statm("/proc/self/statm");
    int64_t size_pages = 0, resident_pages = 0;
    statm >> size_pages >> resident_pages;
    return resident_pages * sysconf(_SC_PAGESIZE);
}

// The worst shape found for simdjson's memory: a long array of one-digit numbers (each byte a
// structural index of 4 bytes and half a tape entry of 16), inside a payload that decodes.
std::string worst_payload(size_t bytes) {
    std::string s = R"({"ts": 1764400000123, "temp": 21.5, "filler": [0)";
    s.reserve(bytes + 16);
    while (s.size() < bytes)
        s += ",0";
    s += "]}";
    return s;
}

}  // namespace

TEST_CASE("every pipeline reads the one parse of a message", "[codec]") {
    const codec::Decoder first(spec({"/temp"}));
    const codec::Decoder second(spec({"/hum", "/temp"}));
    codec::PayloadParser parser;
    codec::DecodedEvent a, b;
    const std::string payload = R"({"ts": 1764400000123, "temp": 21.5, "hum": 40})";
    REQUIRE(parser.parse(payload) == DecodeStatus::ok);
    REQUIRE(first.decode(parser, topic, 7, 1, a) == DecodeStatus::ok);
    REQUIRE(second.decode(parser, topic, 7, 1, b) == DecodeStatus::ok);
    CHECK(parser.parses() == 1);
    CHECK(a.event.key == "dev-7");
    CHECK(b.event.key == "dev-7");
    CHECK(a.event.event_ms == 1764400000123);
    CHECK(b.event.event_ms == 1764400000123);
    CHECK(a.event.fields[0] == 21.5);
    CHECK(b.event.fields[0] == 40.0);
    CHECK(b.event.fields[1] == 21.5);
    CHECK(a.event.payload == payload);

    // A payload that does not parse is refused with the same reason for each pipeline.
    REQUIRE(parser.parse("[1, 2]") == DecodeStatus::not_an_object);
    CHECK(first.decode(parser, topic, 7, 2, a) == DecodeStatus::not_an_object);
    CHECK(second.decode(parser, topic, 7, 2, b) == DecodeStatus::not_an_object);
    CHECK(a.reason == "the payload is an array, not a JSON object");
    CHECK(b.reason == a.reason);
    CHECK(parser.parses() == 2);
}

TEST_CASE("a large payload decodes like a small one, by a parser freed after it", "[codec]") {
    const codec::Decoder decoder(spec({"/temp"}));
    codec::PayloadParser parser;
    codec::DecodedEvent out;
    REQUIRE(decoder.decode(parser, topic, R"({"ts": 5, "temp": 1})", 0, 0, out) ==
            DecodeStatus::ok);
    const size_t usual_capacity = parser.capacity_bytes();
    CHECK(usual_capacity <= codec::payload_retained_bytes_max);

    const std::string large = worst_payload(2 * codec::payload_retained_bytes_max);
    REQUIRE(parser.parse(large) == DecodeStatus::ok);
    CHECK(parser.capacity_bytes() >= large.size());  // its own parser, for now
    REQUIRE(decoder.decode(parser, topic, 0, 0, out) == DecodeStatus::ok);
    CHECK(out.event.event_ms == 1764400000123);
    CHECK(out.event.fields[0] == 21.5);
    parser.release();
    CHECK(parser.capacity_bytes() == usual_capacity);

    // Just at and just above the bound: both decode the same.
    for (size_t bytes :
         {codec::payload_retained_bytes_max, codec::payload_retained_bytes_max + 1}) {
        std::string payload = R"({"ts": 9, "temp": 3, "pad": ")";
        payload.append(bytes - payload.size() - 2, 'x').append("\"}");
        REQUIRE(payload.size() == bytes);
        REQUIRE(decoder.decode(parser, topic, payload, 0, 0, out) == DecodeStatus::ok);
        CHECK(out.event.event_ms == 9);
        CHECK(parser.capacity_bytes() <= codec::payload_retained_bytes_max);
    }
    // A large payload that is not JSON frees its parser at once.
    std::string broken = large;
    broken.back() = ',';
    CHECK(parser.parse(broken) == DecodeStatus::malformed_json);
    CHECK(parser.capacity_bytes() <= codec::payload_retained_bytes_max);
}

TEST_CASE("a 4 MiB payload's memory is given back: RSS returns near its baseline", "[codec]") {
    const codec::Decoder decoder(spec({"/temp"}));
    codec::PayloadParser parser;
    codec::DecodedEvent out;
    const std::string small = R"({"ts": 1764400000123, "temp": 21.5})";
    const std::string large = worst_payload(4 << 20);
    for (int i = 0; i < 100; ++i)
        REQUIRE(decoder.decode(parser, topic, small, 0, 0, out) == DecodeStatus::ok);
    const int64_t baseline = rss_bytes();

    // Twice: glibc's dynamic mmap threshold used to keep the second one's buffers in the heap.
    for (int round = 0; round < 2; ++round) {
        REQUIRE(parser.parse(large) == DecodeStatus::ok);
        REQUIRE(decoder.decode(parser, topic, 0, 0, out) == DecodeStatus::ok);
        const int64_t during = rss_bytes() - baseline;
        INFO("round " << round << ": " << during / 1024 << " KiB above the baseline during");
        CHECK(parser.capacity_bytes() >= large.size());
        if (rss_meaningful) {
            // The parser's memory is real (about 13 x the payload resident): what must come back.
            CHECK(during > static_cast<int64_t>(8 * large.size()));
            CHECK(during <=
                  static_cast<int64_t>(codec::parser_bytes_per_payload_byte * large.size()));
        }
        parser.release();
        for (int i = 0; i < 100; ++i)
            REQUIRE(decoder.decode(parser, topic, small, 0, 0, out) == DecodeStatus::ok);
        const int64_t after = rss_bytes() - baseline;
        INFO("after: " << after / 1024 << " KiB above the baseline");
        if (rss_meaningful) CHECK(after < 2 * 1024 * 1024);
        CHECK(parser.capacity_bytes() <= codec::payload_retained_bytes_max);
    }
}

TEST_CASE("a refused giant key leaves no key buffer of its size behind", "[codec]") {
    codec::DecoderSpec s = spec({});
    s.key = {KeySource{KeySource::json_pointer, 0, "/id"}};
    const codec::Decoder decoder(s);
    codec::PayloadParser parser;
    codec::DecodedEvent out;
    const std::string giant = R"({"ts": 1, "id": ")" + std::string(1 << 20, 'k') + "\"}";
    REQUIRE(decoder.decode(parser, topic, giant, 0, 0, out) == DecodeStatus::bad_key);
    CHECK(out.reason == "the key is 1048576 bytes, more than the 256 allowed");
    CHECK(out.key_buffer.capacity() <= codec::key_bytes_max);
    REQUIRE(decoder.decode(parser, topic, R"({"ts": 1, "id": "dev-7"})", 0, 0, out) ==
            DecodeStatus::ok);
    CHECK(out.event.key == "dev-7");
}
