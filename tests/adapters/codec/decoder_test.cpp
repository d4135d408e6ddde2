// A message becomes exactly the event its pipeline describes, or a reason it could not.
#include "adapters/codec/decoder.h"

#include <catch2/catch.hpp>
#include <cmath>

#include "adapters/codec/timestamp.h"
#include "adapters/codec/topic.h"
#include "core/time_text.h"

using namespace tidemark;
using codec::DecodeStatus;
using codec::KeySource;
using codec::TimeFormat;
using codec::TimeSource;

namespace {

codec::DecoderSpec pipeline(TimeFormat format = TimeFormat::epoch_ms) {
    codec::DecoderSpec p;
    p.topic_filter = "sensors/+/telemetry";
    p.key = {KeySource{KeySource::topic_level, 1, ""}};
    p.timestamp = TimeSource{false, "/ts", format};
    p.field_pointers = {"/temp", "/env/hum"};
    return p;
}

constexpr std::string_view topic = "sensors/dev-7/telemetry";

// Decodes `payload` with a pipeline reading "/ts" in `format`; returns event_ms or -1 with
// the status in `status`.
int64_t time_of(std::string payload, TimeFormat format, DecodeStatus* status = nullptr) {
    codec::Decoder decoder(pipeline(format));
    codec::PayloadParser parser;
    codec::DecodedEvent out;
    DecodeStatus s = decoder.decode(parser, topic, payload, 5, 1, out);
    if (status) *status = s;
    return s == DecodeStatus::ok ? out.event.event_ms : -1;
}

}  // namespace

TEST_CASE("a telemetry message decodes to key, time and fields", "[codec]") {
    codec::Decoder decoder(pipeline());
    codec::PayloadParser parser;
    codec::DecodedEvent out;
    std::string payload = R"({"ts": 1764400000123, "temp": 21.5, "env": {"hum": 40}})";
    REQUIRE(decoder.decode(parser, topic, payload, 1764400000999, 42, out) == DecodeStatus::ok);
    CHECK(out.event.key == "dev-7");
    CHECK(out.event.partition == "dev-7");
    CHECK(out.event.event_ms == 1764400000123);
    CHECK(out.event.ingest_ms == 1764400000999);
    CHECK(out.event.order == 42);
    REQUIRE(out.event.fields.size() == 2);
    CHECK(out.event.fields[0] == 21.5);
    CHECK(out.event.fields[1] == 40.0);
    CHECK(out.fields_missing == 0);
    CHECK(out.event.topic == topic);
    CHECK(out.event.payload == payload);
    CHECK(decoder.matches(topic));
    CHECK_FALSE(decoder.matches("sensors/dev-7/status"));
}

TEST_CASE("missing or non-numeric fields are NaN and counted", "[codec]") {
    codec::Decoder decoder(pipeline());
    codec::PayloadParser parser;
    codec::DecodedEvent out;
    REQUIRE(decoder.decode(parser, topic, R"({"ts": 1, "temp": "hot", "env": {}})", 0, 0, out) ==
            DecodeStatus::ok);
    CHECK(std::isnan(out.event.fields[0]));
    CHECK(std::isnan(out.event.fields[1]));
    CHECK(out.fields_missing == 2);
    REQUIRE(decoder.decode(parser, topic, R"({"ts": 1, "temp": true})", 0, 0, out) ==
            DecodeStatus::ok);
    CHECK(out.fields_missing == 2);
    REQUIRE(decoder.decode(parser, topic, R"({"ts": 1, "temp": -3, "env": {"hum": 1e2}})", 0, 0,
                           out) == DecodeStatus::ok);
    CHECK(out.event.fields[0] == -3.0);
    CHECK(out.event.fields[1] == 100.0);
    CHECK(out.fields_missing == 0);
}

TEST_CASE("keys from topic levels and pointers, single and composite", "[codec]") {
    auto p = pipeline();
    codec::PayloadParser parser;
    codec::DecodedEvent out;
    SECTION("a pointer to a string, a number, a boolean") {
        p.key = {KeySource{KeySource::json_pointer, 0, "/id"}};
        codec::Decoder decoder(p);
        REQUIRE(decoder.decode(parser, topic, R"({"ts":1,"id":"a/b"})", 0, 0, out) ==
                DecodeStatus::ok);
        CHECK(out.event.key == "a/b");
        REQUIRE(decoder.decode(parser, topic, R"({"ts":1,"id":17})", 0, 0, out) ==
                DecodeStatus::ok);
        CHECK(out.event.key == "17");
        REQUIRE(decoder.decode(parser, topic, R"({"ts":1,"id":7.50})", 0, 0, out) ==
                DecodeStatus::ok);
        CHECK(out.event.key == "7.5");
        REQUIRE(decoder.decode(parser, topic, R"({"ts":1,"id":true})", 0, 0, out) ==
                DecodeStatus::ok);
        CHECK(out.event.key == "true");
        CHECK(decoder.decode(parser, topic, R"({"ts":1,"id":null})", 0, 0, out) ==
              DecodeStatus::bad_key);
        CHECK(out.reason == "the key pointer /id is null: use a string, number or boolean");
        CHECK(decoder.decode(parser, topic, R"({"ts":1,"id":{}})", 0, 0, out) ==
              DecodeStatus::bad_key);
        CHECK(decoder.decode(parser, topic, R"({"ts":1})", 0, 0, out) == DecodeStatus::missing_key);
        CHECK(out.reason == "the key pointer /id is not in the payload");
        CHECK(decoder.decode(parser, topic, R"({"ts":1,"id":""})", 0, 0, out) ==
              DecodeStatus::missing_key);
        std::string long_id(codec::key_bytes_max + 1, 'x');
        CHECK(decoder.decode(parser, topic, R"({"ts":1,"id":")" + long_id + "\"}", 0, 0, out) ==
              DecodeStatus::bad_key);
    }
    SECTION("composite keys join with '|' and escape it inside parts") {
        p.key = {KeySource{KeySource::topic_level, 1, ""},
                 KeySource{KeySource::json_pointer, 0, "/room"}};
        codec::Decoder decoder(p);
        REQUIRE(decoder.decode(parser, topic, R"({"ts":1,"room":"kitchen"})", 0, 0, out) ==
                DecodeStatus::ok);
        CHECK(out.event.key == "dev-7|kitchen");
        REQUIRE(decoder.decode(parser, topic, R"({"ts":1,"room":"a|b%"})", 0, 0, out) ==
                DecodeStatus::ok);
        CHECK(out.event.key == "dev-7|a%7Cb%25");
    }
    SECTION("a topic level the topic does not have") {
        p.key = {KeySource{KeySource::topic_level, 5, ""}};
        codec::Decoder decoder(p);
        CHECK(decoder.decode(parser, topic, R"({"ts":1})", 0, 0, out) == DecodeStatus::missing_key);
        CHECK(out.reason ==
              "the key is topic level 5 but topic \"sensors/dev-7/telemetry\" has fewer levels");
    }
    SECTION("a partition of its own") {
        p.partition = {KeySource{KeySource::json_pointer, 0, "/site"}};
        codec::Decoder decoder(p);
        REQUIRE(decoder.decode(parser, topic, R"({"ts":1,"site":"north"})", 0, 0, out) ==
                DecodeStatus::ok);
        CHECK(out.event.key == "dev-7");
        CHECK(out.event.partition == "north");
        CHECK(decoder.decode(parser, topic, R"({"ts":1})", 0, 0, out) ==
              DecodeStatus::missing_partition);
    }
}

TEST_CASE("epoch timestamps in every unit, as numbers or numeric strings", "[codec]") {
    using F = TimeFormat;
    CHECK(time_of(R"({"ts": 1764400000})", F::epoch_s) == 1764400000000);
    CHECK(time_of(R"({"ts": 1764400000.123})", F::epoch_s) == 1764400000123);
    CHECK(time_of(R"({"ts": "1764400000.1239"})", F::epoch_s) == 1764400000123);
    CHECK(time_of(R"({"ts": 1764400000123})", F::epoch_ms) == 1764400000123);
    CHECK(time_of(R"({"ts": 1764400000123.9})", F::epoch_ms) == 1764400000123);
    CHECK(time_of(R"({"ts": "1764400000123"})", F::epoch_ms) == 1764400000123);
    CHECK(time_of(R"({"ts": 1764400000123456})", F::epoch_us) == 1764400000123);
    CHECK(time_of(R"({"ts": 1764400000123456789})", F::epoch_ns) == 1764400000123);
    CHECK(time_of(R"({"ts": "1764400000123456789"})", F::epoch_ns) == 1764400000123);
    // Before 1970, truncation is towards the past.
    CHECK(time_of(R"({"ts": -1})", F::epoch_us) == -1);
    CHECK(time_of(R"({"ts": "-0.5"})", F::epoch_s) == -500);
    CHECK(time_of(R"({"ts": "-0.0005"})", F::epoch_s) == -1);

    DecodeStatus status;
    CHECK(time_of(R"({"ts": "soon"})", F::epoch_ms, &status) == -1);
    CHECK(status == DecodeStatus::bad_timestamp);
    CHECK(time_of(R"({"ts": "1e12"})", F::epoch_ms, &status) == -1);
    CHECK(status == DecodeStatus::bad_timestamp);
    CHECK(time_of(R"({"ts": 99999999999999999})", F::epoch_s, &status) == -1);  // overflows
    CHECK(status == DecodeStatus::bad_timestamp);
    CHECK(time_of(R"({"ts": 18446744073709551615})", F::epoch_ns, &status) == -1);
    CHECK(status == DecodeStatus::bad_timestamp);
    CHECK(time_of(R"({"ts": true})", F::epoch_ms, &status) == -1);
    CHECK(status == DecodeStatus::bad_timestamp);
    CHECK(time_of(R"({"ts": null})", F::epoch_ms, &status) == -1);
    CHECK(status == DecodeStatus::missing_timestamp);
    CHECK(time_of(R"({"t": 1})", F::epoch_ms, &status) == -1);
    CHECK(status == DecodeStatus::missing_timestamp);
}

TEST_CASE("RFC 3339 timestamps, strictly", "[codec]") {
    using F = TimeFormat;
    CHECK(time_of(R"({"ts": "1970-01-01T00:00:00Z"})", F::rfc3339) == 0);
    CHECK(time_of(R"({"ts": "2025-11-29T07:06:40Z"})", F::rfc3339) == 1764400000000);
    CHECK(time_of(R"({"ts": "2025-11-29T07:06:40.123Z"})", F::rfc3339) == 1764400000123);
    CHECK(time_of(R"({"ts": "2025-11-29T07:06:40.1239999z"})", F::rfc3339) == 1764400000123);
    CHECK(time_of(R"({"ts": "2025-11-29T07:06:40.5"})", F::rfc3339) == -1);  // no offset
    CHECK(time_of(R"({"ts": "2025-11-29t08:06:40+01:00"})", F::rfc3339) == 1764400000000);
    CHECK(time_of(R"({"ts": "2025-11-29 01:36:40-05:30"})", F::rfc3339) == 1764400000000);
    CHECK(time_of(R"({"ts": "2025-11-28T23:06:40.1-08:00"})", F::rfc3339) == 1764400000100);
    // Leap years: 2024 and 2000 have a 29 February, 2025 and 1900 do not.
    CHECK(time_of(R"({"ts": "2024-02-29T00:00:00Z"})", F::rfc3339) == 1709164800000);
    CHECK(time_of(R"({"ts": "2000-02-29T12:00:00Z"})", F::rfc3339) == 951825600000);
    CHECK(time_of(R"({"ts": "2025-02-29T00:00:00Z"})", F::rfc3339) == -1);
    CHECK(time_of(R"({"ts": "1900-02-29T00:00:00Z"})", F::rfc3339) == -1);
    CHECK(core::parse_rfc3339_ms("1969-12-31T23:59:59.999Z") == -1);
    CHECK(core::parse_rfc3339_ms("2016-12-31T23:59:60Z") == 1483228800000);
    for (const char* garbage :
         {"", "2025-11-29", "2025-11-29T07:06Z", "2025-13-01T00:00:00Z", "2025-11-31T00:00:00Z",
          "2025-11-29T24:00:00Z", "2025-11-29T07:60:00Z", "2025-11-29T07:06:61Z",
          "2025-11-29T07:06:40.Z", "2025-11-29T07:06:40+0100", "2025-11-29T07:06:40+24:00",
          "2025-11-29T07:06:40Zjunk", "2025-11-29X07:06:40Z", " 2025-11-29T07:06:40Z",
          "+2025-11-29T07:06:40Z", "2025-1-29T07:06:40Z"}) {
        INFO(garbage);
        CHECK_FALSE(core::parse_rfc3339_ms(garbage).has_value());
    }
    DecodeStatus status;
    CHECK(time_of(R"({"ts": 1764400000})", F::rfc3339, &status) == -1);
    CHECK(status == DecodeStatus::bad_timestamp);
}

TEST_CASE("ingest time when the pipeline says so", "[codec]") {
    auto p = pipeline();
    p.timestamp = TimeSource{};
    codec::Decoder decoder(p);
    codec::PayloadParser parser;
    codec::DecodedEvent out;
    REQUIRE(decoder.decode(parser, topic, R"({"temp": 1})", 777, 0, out) == DecodeStatus::ok);
    CHECK(out.event.event_ms == 777);
}

TEST_CASE("every malformed payload has its status and reason", "[codec]") {
    codec::Decoder decoder(pipeline());
    codec::PayloadParser parser;
    codec::DecodedEvent out;
    CHECK(decoder.decode(parser, topic, "{\"ts\": 1, \"temp\": \"\xff\"}", 0, 0, out) ==
          DecodeStatus::not_utf8);
    CHECK(out.reason == "the payload is not valid UTF-8");
    CHECK(decoder.decode(parser, topic, R"({"ts": 1, "temp": 2)", 0, 0, out) ==
          DecodeStatus::malformed_json);
    CHECK_THAT(out.reason, Catch::StartsWith("the payload is not valid JSON: "));
    CHECK(decoder.decode(parser, topic, "", 0, 0, out) == DecodeStatus::malformed_json);
    CHECK(decoder.decode(parser, topic, "hello", 0, 0, out) == DecodeStatus::malformed_json);
    CHECK(decoder.decode(parser, topic, R"({"ts": 1} {"ts": 2})", 0, 0, out) ==
          DecodeStatus::malformed_json);
    CHECK(decoder.decode(parser, topic, R"([1, 2])", 0, 0, out) == DecodeStatus::not_an_object);
    CHECK(out.reason == "the payload is an array, not a JSON object");
    CHECK(decoder.decode(parser, topic, "21.5", 0, 0, out) == DecodeStatus::not_an_object);
    // A good message after bad ones decodes normally: no state leaks between calls.
    REQUIRE(decoder.decode(parser, topic, R"({"ts": 3, "temp": 4})", 0, 0, out) ==
            DecodeStatus::ok);
    CHECK(out.event.event_ms == 3);
    CHECK(out.reason.empty());
    CHECK(codec::decode_status_name(DecodeStatus::not_utf8) == "not_utf8");
}

TEST_CASE("decoding reuses its buffers", "[codec]") {
    codec::Decoder decoder(pipeline());
    codec::PayloadParser parser;
    codec::DecodedEvent out;
    std::string payload = R"({"ts": 1764400000123, "temp": 21.5, "env": {"hum": 40}})";
    REQUIRE(decoder.decode(parser, topic, payload, 0, 0, out) == DecodeStatus::ok);
    const char* key_data = out.key_buffer.data();
    const double* fields_data = out.field_values.data();
    for (int i = 0; i < 100; ++i) {
        REQUIRE(decoder.decode(parser, topic, payload, 0, static_cast<uint64_t>(i), out) ==
                DecodeStatus::ok);
    }
    CHECK(out.key_buffer.data() == key_data);
    CHECK(out.field_values.data() == fields_data);
}

TEST_CASE("topic filters match as MQTT says", "[codec]") {
    struct Row {
        const char* filter;
        const char* topic;
        bool matches;
    };
    const Row rows[] = {
        {"sensors/+/telemetry", "sensors/dev-7/telemetry", true},
        {"sensors/+/telemetry", "sensors/dev-7/status", false},
        {"sensors/+/telemetry", "sensors/a/b/telemetry", false},
        {"sensors/+/telemetry", "sensors//telemetry", true},
        {"sensors/+", "sensors", false},
        {"sensors/+", "sensors/", true},
        {"sensors/#", "sensors", true},
        {"sensors/#", "sensors/a/b/c", true},
        {"sensors/#", "sensorsX/a", false},
        {"#", "anything/at/all", true},
        {"#", "$SYS/broker/load", false},
        {"+/monitor", "$SYS/monitor", false},
        {"$SYS/#", "$SYS/broker/load", true},
        {"a/b", "a/b", true},
        {"a/b", "a/b/c", false},
        {"a/b/c", "a/b", false},
        {"a/b", "A/b", false},
        {"+/+", "a/b", true},
        {"+", "a/b", false},
        {"/+", "/a", true},
    };
    for (const auto& row : rows) {
        INFO(row.filter << " vs " << row.topic);
        CHECK(codec::topic_matches(row.filter, row.topic) == row.matches);
        CHECK(codec::TopicFilter(row.filter).matches(row.topic) == row.matches);
    }
    // A record without a topic has an empty view with no data (a null pointer): nothing may
    // read through it (the sanitizers' run would stop here).
    const std::string_view none;
    CHECK(codec::TopicFilter("+").matches(none));
    CHECK(codec::TopicFilter("").matches(none));
    CHECK(codec::TopicFilter("#").matches(none));
    CHECK_FALSE(codec::TopicFilter("+/t").matches(none));
    CHECK_FALSE(codec::TopicFilter("a").matches(none));
}

namespace {

// A level-by-level matcher, written from the MQTT rules: the reference TopicFilter (and so
// topic_matches) must agree with on every pair.
bool reference_topic_matches(std::string_view filter, std::string_view name) {
    if (!name.empty() && name[0] == '$' && !filter.empty() &&
        (filter[0] == '+' || filter[0] == '#')) {
        return false;
    }
    size_t filter_at = 0, topic_at = 0;
    while (true) {
        size_t filter_end = filter.find('/', filter_at);
        if (filter_end == std::string_view::npos) filter_end = filter.size();
        std::string_view f = filter.substr(filter_at, filter_end - filter_at);
        if (f == "#") return true;
        size_t topic_end = name.find('/', topic_at);
        if (topic_end == std::string_view::npos) topic_end = name.size();
        std::string_view t = name.substr(topic_at, topic_end - topic_at);
        if (f != "+" && f != t) return false;
        if (filter_end == filter.size()) return topic_end == name.size();
        if (topic_end == name.size()) return filter.substr(filter_end + 1) == "#";
        filter_at = filter_end + 1;
        topic_at = topic_end + 1;
    }
}

}  // namespace

TEST_CASE("topic matching, and a filter read into levels, agree with the level-by-level reference",
          "[codec]") {
    // Short strings over an alphabet of levels, separators and wildcards: every shape of
    // filter and topic (empty levels, '$', a '+' or '#' inside a level) comes up many times.
    const char alphabet[] = {'a', 'b', '/', '+', '#', '$'};
    uint64_t state = 12345;
    const auto next = [&] {
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        return static_cast<uint32_t>(state >> 33);
    };
    const auto text = [&](bool wildcards) {
        std::string out;
        const uint32_t n = next() % 7;
        for (uint32_t i = 0; i < n; ++i) {
            const char c = alphabet[next() % (wildcards ? 6 : 3)];
            out += c == '$' && !wildcards ? 'a' : c;
        }
        if (!wildcards && next() % 4 == 0) out.insert(0, "$");
        return out;
    };
    uint64_t matched = 0;
    for (int i = 0; i < 50000; ++i) {
        const std::string filter = text(true);
        const codec::TopicFilter read_once(filter);  // one filter, read once, for many topics
        for (int j = 0; j < 4; ++j) {
            const std::string name = text(false);
            const bool expected = reference_topic_matches(filter, name);
            matched += expected;
            if (read_once.matches(name) != expected)
                FAIL("filter \"" << filter << "\" topic \"" << name << "\": " << expected);
        }
    }
    CHECK(matched > 5000);
}

TEST_CASE("a key in a topic template stays one level and is never a wildcard", "[codec]") {
    CHECK(codec::expand_topic_template("tidemark/{node_id}/{pipeline}", "gw-01", "t_1m", "k") ==
          "tidemark/gw-01/t_1m");
    CHECK(codec::expand_topic_template("r/{pipeline}/{key}", "gw", "p", "a/b+c#d%e") ==
          "r/p/a%2Fb%2Bc%23d%25e");
    CHECK(codec::expand_topic_template("r/{key}", "gw", "p", std::string("x\0y\n", 4)) ==
          "r/x%00y%0A");
    CHECK(codec::expand_topic_template("r/{key}", "gw", "p", "caf\xc3\xa9\xff") ==
          "r/caf\xc3\xa9%FF");
}

// The template scanned per row, as the forwarder's sources did before they kept a
// codec::TopicTemplate: the reference for it.
namespace {
std::string expand_per_row(std::string_view tmpl, std::string_view node_id,
                           std::string_view pipeline, std::string_view key) {
    std::string out;
    for (size_t i = 0; i < tmpl.size();) {
        std::string_view rest = tmpl.substr(i);
        if (rest.starts_with("{node_id}")) {
            codec::append_topic_level_escaped(out, node_id);
            i += 9;
        } else if (rest.starts_with("{pipeline}")) {
            codec::append_topic_level_escaped(out, pipeline);
            i += 10;
        } else if (rest.starts_with("{key}")) {
            codec::append_topic_level_escaped(out, key);
            i += 5;
        } else {
            out += tmpl[i++];
        }
    }
    return out;
}
}  // namespace

TEST_CASE("a topic template read once expands as the template read per row", "[codec]") {
    // The forwarder's sources read each template once (codec::TopicTemplate) with the node's
    // id in it; per row only the pipeline and the key are filled. Values are never scanned for
    // placeholders again, whichever of them holds one.
    const std::vector<std::string> templates = {"tidemark/{node_id}/{pipeline}/{key}",
                                                "{key}{pipeline}{node_id}",
                                                "r/{key}/{key}",
                                                "plain/topic",
                                                "",
                                                "{node",
                                                "a/{pipeline",
                                                "{node_id}}{",
                                                "x/{KEY}/{key}/y"};
    const std::vector<std::string> values = {
        "", "gw-01", "{key}", "a/b+#%", "{pipeline}", std::string("n\0l", 3), "caf\xc3\xa9\xff"};
    for (const std::string& t : templates)
        for (const std::string& node : values) {
            const codec::TopicTemplate once(t, node);
            for (const std::string& pipeline : values)
                for (const std::string& key : values) {
                    INFO("template '" << t << "' node '" << node << "' pipeline '" << pipeline
                                      << "' key '" << key << "'");
                    CHECK(once.expand(pipeline, key) == expand_per_row(t, node, pipeline, key));
                    CHECK(codec::expand_topic_template(t, node, pipeline, key) ==
                          expand_per_row(t, node, pipeline, key));
                }
        }
    const codec::TopicTemplate t("tidemark/{node_id}/{pipeline}/{key}", "{key}");
    CHECK(t.expand("p/1", "{node_id}") == "tidemark/{key}/p%2F1/{node_id}");
    CHECK(codec::TopicTemplate("{node", "gw").expand("p", "k") == "{node");
}
