// The payload decoder (adapters/codec/decoder.h) over any message, for a spec the input picks:
// every timestamp format (and ingest time), key and partition parts from topic levels and JSON
// pointers, single and composite, and 0 to 4 numeric fields by pointer.
//
// Invariants, from what decoder.h and timestamp.h promise (not from reading decoder.cpp):
//   - no crash, hang, out-of-bounds read or UB, whatever the bytes;
//   - a refusal has a status other than ok, a name, and a reason;
//   - a decoded event carries the ingest time, order, topic and payload it was given, a key
//     (and partition) of 1 to key_bytes_max bytes, whose composite parts are as many as the
//     spec lists and whose topic-level parts are the topic's levels; one field per pointer,
//     each a finite number or missing (NaN, counted); an event time equal to the ingest time,
//     or inside the range a payload may carry (timestamp_min_ms .. timestamp_max_ms);
//   - where the input builds the payload around its "ts" value (structured mode), that value
//     decodes as timestamp.h's parsers read it: the same ms when ok, and bad_timestamp only
//     when they refuse it or it is out of range;
//   - decoding into a reused DecodedEvent gives what the first decode gave.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "adapters/codec/decoder.h"
#include "adapters/codec/timestamp.h"
#include "adapters/codec/topic.h"
#include "adapters/codec/utf8.h"
#include "core/time_text.h"
#include "fuzz_input.h"

namespace {

using namespace tidemark;
using codec::DecodeStatus;
using codec::KeySource;
using codec::TimeFormat;

// Valid filters only: the config checks them before a Decoder is built.
constexpr std::string_view filters[] = {"#", "sensors/+/telemetry", "sensors/#", "+/+/+", "a/b"};
// Valid JSON pointers (the config checks '~' escapes); index 0 is the structured "ts".
constexpr std::string_view pointers[] = {
    "/ts",   "/id",   "/site", "/v", "/temp", "/env/hum", "/arr/0",    "/arr/1",
    "/a~1b", "/m~0n", "/",     "/s", "/b",    "/n",       "/deep/x/y", "/time"};
constexpr std::string_view topics[] = {"sensors/dev-7/telemetry",
                                       "sensors/a|b%/telemetry",
                                       "sensors//telemetry",
                                       "a/b",
                                       "a",
                                       "$SYS/x/y",
                                       "sensors/d\xc3\xa9v/telemetry/extra"};
// Members of a structured payload, after its "ts": each bit of a byte adds one.
constexpr std::string_view members[] = {R"(,"id":"dev-1")",
                                        R"(,"site":"a|b%c")",
                                        R"(,"v":21.5,"temp":-3)",
                                        R"(,"env":{"hum":40})",
                                        R"(,"arr":[1,"x",null])",
                                        R"(,"b":true,"s":"str","n":null)",
                                        R"(,"a/b":7,"m~n":-3e5,"":1)",
                                        R"(,"id":17.50,"deep":{"x":{"y":1e308}})"};
constexpr int64_t ingest_choices[] = {
    1'764'400'000'000,       0,         -1,       codec::timestamp_min_ms,
    codec::timestamp_max_ms, INT64_MIN, INT64_MAX};

KeySource key_source(tidemark::fuzz::Input& in) {
    const uint8_t b = in.byte();
    if (b & 0x80)
        return {KeySource::json_pointer, 0, std::string(pointers[b % std::size(pointers)])};
    return {KeySource::topic_level, b == 0x7f ? 1023 : b % 5, ""};
}

codec::EpochUnit unit_of(TimeFormat format) {
    switch (format) {
        case TimeFormat::epoch_s:
            return codec::EpochUnit::s;
        case TimeFormat::epoch_us:
            return codec::EpochUnit::us;
        case TimeFormat::epoch_ns:
            return codec::EpochUnit::ns;
        default:
            return codec::EpochUnit::ms;
    }
}

// What timestamp.h makes of a "ts" value written as `token`, when the token is a plain JSON
// string (no escapes) or a plain integer that fits int64; nullopt otherwise (no oracle).
std::optional<std::optional<int64_t>> expected_time(std::string_view token, TimeFormat format) {
    if (token.size() >= 2 && token.front() == '"' && token.back() == '"') {
        const std::string_view text = token.substr(1, token.size() - 2);
        for (char c : text)
            if (c == '"' || c == '\\' || static_cast<unsigned char>(c) < 0x20) return std::nullopt;
        if (!codec::is_valid_utf8(text)) return std::nullopt;
        if (format == TimeFormat::rfc3339) {
            const auto t = core::parse_rfc3339_ms(text);
            return t ? std::optional<int64_t>(*t) : std::optional<int64_t>();
        }
        return codec::parse_epoch_text_ms(text, unit_of(format));
    }
    std::string_view digits = token;
    const bool negative = digits.starts_with('-');
    if (negative) digits.remove_prefix(1);
    if (digits.empty() || digits.size() > 18 || (digits.size() > 1 && digits[0] == '0'))
        return std::nullopt;
    int64_t value = 0;
    for (char c : digits) {
        if (c < '0' || c > '9') return std::nullopt;
        value = value * 10 + (c - '0');
    }
    if (negative) value = -value;
    if (format == TimeFormat::rfc3339) return std::optional<int64_t>{};  // must be a string
    return codec::epoch_integer_ms(value, unit_of(format));
}

// A composite key's part back as it was: '%7C' -> '|', '%25' -> '%' (decoder.h).
std::string unescape_part(std::string_view part) {
    std::string out;
    for (size_t i = 0; i < part.size(); ++i) {
        if (part.substr(i, 3) == "%7C") {
            out.push_back('|');
            i += 2;
        } else if (part.substr(i, 3) == "%25") {
            out.push_back('%');
            i += 2;
        } else {
            out.push_back(part[i]);
        }
    }
    return out;
}

void check_key(std::string_view key, const std::vector<KeySource>& parts, std::string_view topic) {
    TM_FUZZ_CHECK(!key.empty() && key.size() <= codec::key_bytes_max);
    std::vector<std::string_view> split;
    if (parts.size() == 1) {
        split.push_back(key);
    } else {
        size_t from = 0;
        for (size_t bar = key.find('|'); bar != std::string_view::npos; bar = key.find('|', from)) {
            split.push_back(key.substr(from, bar - from));
            from = bar + 1;
        }
        split.push_back(key.substr(from));
    }
    TM_FUZZ_CHECK(split.size() == parts.size());
    for (size_t i = 0; i < parts.size(); ++i) {
        if (parts[i].kind != KeySource::topic_level) continue;
        const auto level = codec::topic_level_of(topic, parts[i].level);
        TM_FUZZ_CHECK(level.has_value());
        if (parts.size() == 1)
            TM_FUZZ_CHECK(split[i] == *level);
        else
            TM_FUZZ_CHECK(unescape_part(split[i]) == *level);
    }
}

struct Outcome {
    DecodeStatus status;
    std::string reason, key, partition;
    int64_t event_ms;
    std::vector<uint64_t> field_bits;
    uint32_t fields_missing;
    bool operator==(const Outcome&) const = default;
};

Outcome outcome_of(DecodeStatus status, const codec::DecodedEvent& out) {
    Outcome o{status, {}, {}, {}, 0, {}, 0};
    if (status != DecodeStatus::ok) {
        o.reason = out.reason;
        return o;
    }
    o.key = out.event.key;
    o.partition = out.event.partition;
    o.event_ms = out.event.event_ms;
    for (double f : out.event.fields) {
        uint64_t bits;
        std::memcpy(&bits, &f, sizeof bits);
        o.field_bits.push_back(bits);
    }
    o.fields_missing = out.fields_missing;
    return o;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    tidemark::fuzz::Input in(data, size);
    const bool structured = in.flag();
    codec::DecoderSpec spec;
    spec.topic_filter = filters[in.below(std::size(filters))];
    const uint32_t key_parts = 1 + in.below(3);
    for (uint32_t i = 0; i < key_parts; ++i)
        spec.key.push_back(key_source(in));
    const uint32_t partition_parts = in.below(3);
    for (uint32_t i = 0; i < partition_parts; ++i)
        spec.partition.push_back(key_source(in));
    const uint8_t time_byte = in.byte();
    spec.timestamp.ingest = time_byte % 6 == 5;
    if (!spec.timestamp.ingest) {
        spec.timestamp.format = static_cast<TimeFormat>(time_byte % 6);
        spec.timestamp.pointer = pointers[(time_byte / 6) % std::size(pointers)];
    }
    const uint32_t fields = in.below(5);
    for (uint32_t i = 0; i < fields; ++i)
        spec.field_pointers.emplace_back(pointers[in.byte() % std::size(pointers)]);

    const uint32_t topic_choice = in.below(std::size(topics) + 1);
    const std::string topic =
        topic_choice < std::size(topics) ? std::string(topics[topic_choice]) : in.bytes(64);
    const uint32_t ingest_choice = in.below(std::size(ingest_choices) + 1);
    const int64_t ingest_ms = ingest_choice < std::size(ingest_choices)
                                  ? ingest_choices[ingest_choice]
                                  : static_cast<int64_t>(uint64_t{in.u32()} << 16);
    const uint64_t order = in.byte();

    std::string token;
    std::string payload;
    if (structured) {
        token = in.bytes(48);
        const uint8_t mask = in.byte();
        payload = "{\"ts\":" + token;
        for (size_t i = 0; i < std::size(members); ++i)
            if (mask & (1u << i)) payload += members[i];
        payload += "}";
    } else {
        payload.assign(in.rest());
    }
    // Exactly sized heap copies, so that a read past either end is caught by ASan.
    const std::string topic_bytes(topic);
    const std::unique_ptr<char[]> payload_copy(new char[payload.size()]);
    std::memcpy(payload_copy.get(), payload.data(), payload.size());
    const std::string_view payload_view(payload_copy.get(), payload.size());

    codec::Decoder decoder(spec);
    (void)decoder.matches(topic_bytes);
    codec::PayloadParser parser;
    codec::DecodedEvent out;
    const DecodeStatus status =
        decoder.decode(parser, topic_bytes, payload_view, ingest_ms, order, out);
    const std::string_view name = codec::decode_status_name(status);
    TM_FUZZ_CHECK(!name.empty());
    if (status != DecodeStatus::ok) {
        TM_FUZZ_CHECK(name != "ok");
        TM_FUZZ_CHECK(!out.reason.empty());
    } else {
        TM_FUZZ_CHECK(name == "ok");
        TM_FUZZ_CHECK(codec::is_valid_utf8(payload_view));
        const core::Event& e = out.event;
        TM_FUZZ_CHECK(e.ingest_ms == ingest_ms && e.order == order);
        TM_FUZZ_CHECK(e.topic.data() == topic_bytes.data() && e.topic.size() == topic_bytes.size());
        TM_FUZZ_CHECK(e.payload.data() == payload_view.data() &&
                      e.payload.size() == payload_view.size());
        check_key(e.key, spec.key, topic_bytes);
        if (spec.partition.empty())
            TM_FUZZ_CHECK(e.partition == e.key);
        else
            check_key(e.partition, spec.partition, topic_bytes);
        TM_FUZZ_CHECK(e.fields.size() == spec.field_pointers.size());
        uint32_t missing = 0;
        for (double f : e.fields) {
            if (std::isnan(f))
                ++missing;
            else
                TM_FUZZ_CHECK(std::isfinite(f));
        }
        TM_FUZZ_CHECK(missing == out.fields_missing);
        if (spec.timestamp.ingest)
            TM_FUZZ_CHECK(e.event_ms == ingest_ms);
        else
            TM_FUZZ_CHECK(e.event_ms >= codec::timestamp_min_ms &&
                          e.event_ms <= codec::timestamp_max_ms);
    }
    if (structured && !spec.timestamp.ingest && spec.timestamp.pointer == "/ts") {
        if (const auto expected = expected_time(token, spec.timestamp.format)) {
            const bool in_range = *expected && **expected >= codec::timestamp_min_ms &&
                                  **expected <= codec::timestamp_max_ms;
            if (status == DecodeStatus::ok)
                TM_FUZZ_CHECK(in_range && out.event.event_ms == **expected);
            if (status == DecodeStatus::bad_timestamp) TM_FUZZ_CHECK(!in_range);
        }
    }

    // The same message again after another one, into the same DecodedEvent.
    const Outcome first = outcome_of(status, out);
    const std::string other = R"({"ts":"2025-11-29T10:00:00Z","id":"x","v":1,"site":"s"})";
    (void)decoder.decode(parser, "sensors/other/telemetry", other, 5, 6, out);
    const DecodeStatus again =
        decoder.decode(parser, topic_bytes, payload_view, ingest_ms, order, out);
    TM_FUZZ_CHECK(outcome_of(again, out) == first);
    return 0;
}
