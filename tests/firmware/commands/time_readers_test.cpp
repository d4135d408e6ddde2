// One date, three readers (issue 25 finding 7, issue 26): the config's backfill.from, the payload
// codec's rfc3339 timestamps and `tidemark replay --from/--to` accept the same texts and read
// them as the same millisecond, because all three use core/time_text.h.
#include <catch2/catch.hpp>
#include <optional>
#include <string>

#include "adapters/codec/decoder.h"
#include "adapters/config/config.h"
#include "core/time_text.h"
#include "firmware/commands/command_replay.h"

using namespace tidemark;

namespace {

// What the config makes of backfill.from = text (an RFC 3339 text: never a duration here).
std::optional<int64_t> config_reads(const std::string& text) {
    const std::string json = R"({"node_id": "gw", "data_dir": "/tmp",
      "source": {"uri": "tcp://127.0.0.1:1883"},
      "pipelines": [{"name": "p", "topic": "s/+", "key": "topic:1",
        "window": {"type": "tumbling", "size": "1m"}, "aggregates": {"n": {"fn": "count"}},
        "backfill": {"from": ")" +
                             text + R"("}}]})";
    auto loaded = config::parse_config(json, "/tmp");
    if (!loaded) {
        // Refused, and for this field alone.
        REQUIRE(loaded.error().size() == 1);
        CHECK(loaded.error()[0].pointer == "/pipelines/0/backfill/from");
        return std::nullopt;
    }
    REQUIRE(loaded->pipelines[0].backfill_from_ms);
    return loaded->pipelines[0].backfill_from_ms;
}

// What the payload codec makes of {"ts": text} with format rfc3339.
std::optional<int64_t> codec_reads(const std::string& text) {
    codec::DecoderSpec spec;
    spec.topic_filter = "s/+";
    spec.key = {codec::KeySource{codec::KeySource::topic_level, 1, ""}};
    spec.timestamp = codec::TimeSource{false, "/ts", codec::TimeFormat::rfc3339};
    const codec::Decoder decoder(spec);
    codec::PayloadParser parser;
    codec::DecodedEvent out;
    const std::string payload = R"({"ts": ")" + text + R"("})";
    const codec::DecodeStatus status = decoder.decode(parser, "s/a", payload, 0, 0, out);
    if (status == codec::DecodeStatus::ok) return out.event.event_ms;
    CHECK(status == codec::DecodeStatus::bad_timestamp);
    return std::nullopt;
}

}  // namespace

TEST_CASE("config, codec and replay read every time text alike", "[time_text]") {
    for (const char* text : {
             "2025-02-30T00:00:00Z",  // backfill.from used to load this as 2025-03-02
             "2025-02-29T00:00:00Z",          "1900-02-29T12:00:00Z",
             "2100-02-29T00:00:00Z",          "2025-04-31T00:00:00Z",
             "2024-02-29T00:00:00Z",          "2000-02-29T23:59:59.999Z",
             "2016-12-31T23:59:60Z",          "2016-12-31T23:59:60.250+00:00",
             "2016-12-31T23:59:61Z",          "2025-11-29T08:06:40.1239+01:00",
             "2025-11-29 01:36:40-05:30",     "2025-11-29t07:06:40z",
             "2025-11-29T07:06:40+24:00",     "2025-11-29T07:06:40.Z",
             "2025-11-29T07:06:40",           "0000-01-01T00:00:00Z",
             "0000-01-01T00:00:00+00:01",     "9999-12-31T23:59:59.999Z",
             "9999-12-31T23:59:59.999-00:01", "9999-12-31T23:59:60Z",
             "2040-01-01T00:00:00Z",          "2026-11-30T00:00:00Z",
         }) {
        INFO(text);
        const auto core = core::parse_rfc3339_ms(text);
        const std::optional<int64_t> expected =
            core ? std::optional<int64_t>(*core) : std::optional<int64_t>();
        CHECK(config_reads(text) == expected);
        CHECK(codec_reads(text) == expected);
        CHECK(firmware::parse_time_ms(text) == expected);
    }
    // And the answers are the calendar's.
    CHECK_FALSE(firmware::parse_time_ms("2025-02-30T00:00:00Z"));
    CHECK(firmware::parse_time_ms("2016-12-31T23:59:60Z") == 1'483'228'800'000);
    CHECK(firmware::parse_time_ms("1764400000000") == 1'764'400'000'000);  // replay: ms too
}
