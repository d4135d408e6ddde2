// Results leave the process as byte-stable JSON that any JSON reader parses back.
#include "adapters/codec/record.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>

#include "adapters/codec/json_text.h"

using namespace tidemark;

namespace {

core::Emission design_emission() {
    core::Emission e;
    e.id = 0x9f2c61d0a4b7e853;
    e.kind = core::EmissionKind::final_result;
    e.revision = 0;
    e.key = "dev-7";
    e.start_ms = 1764400000000;
    e.end_ms = 1764400060000;
    e.closed_by = core::ClosedBy::watermark;
    e.values = {21.4, 60.0, 22.9};
    e.watermark_ms = 1764400065000;
    return e;
}

const std::vector<std::string> names = {"avg", "n", "p95"};

}  // namespace

TEST_CASE("a result is DESIGN.md's record, byte for byte", "[codec]") {
    std::string out = "stale";
    codec::encode_result("gw-01", "room_temp_1m", names, design_emission(), out);
    CHECK(out ==
          R"({"id":"9f2c61d0a4b7e853","node":"gw-01","pipeline":"room_temp_1m","key":"dev-7",)"
          R"("window":{"start":1764400000000,"end":1764400060000},"kind":"final","revision":0,)"
          R"("closed_by":"watermark","values":{"avg":21.4,"n":60,"p95":22.9},)"
          R"("watermark":1764400065000})");
}

TEST_CASE("values: null for no value and non-finite, integers as integers", "[codec]") {
    core::Emission e = design_emission();
    e.id = 0x1;
    e.kind = core::EmissionKind::retract;
    e.revision = 3;
    e.closed_by = core::ClosedBy::late;
    e.key = "a\"b\\c\n\x01/\xff";
    e.values = {std::nullopt,
                std::numeric_limits<double>::quiet_NaN(),
                std::numeric_limits<double>::infinity(),
                -0.0,
                9007199254740992.0,
                9007199254740994.0,
                0.1,
                -2.5e-7,
                1e300};
    std::vector<std::string> many = {"a", "b", "c", "d", "e", "f", "g", "h", "i"};
    std::string out;
    codec::encode_result("gw", "p", many, e, out);
    CHECK(
        out ==
        R"({"id":"0000000000000001","node":"gw","pipeline":"p","key":"a\"b\\c\u000a\u0001/\ufffd",)"
        R"("window":{"start":1764400000000,"end":1764400060000},"kind":"retract","revision":3,)"
        R"("closed_by":"late","values":{"a":null,"b":null,"c":null,"d":0,"e":9007199254740992,)"
        R"("f":9007199254740994,"g":0.1,"h":-2.5e-07,"i":1e+300},"watermark":1764400065000})");

    auto parsed = nlohmann::json::parse(out);
    CHECK(parsed["key"] == "a\"b\\c\n\x01/\xef\xbf\xbd");
    CHECK(parsed["values"]["a"].is_null());
    CHECK(parsed["values"]["g"].get<double>() == 0.1);
    CHECK(parsed["values"]["h"].get<double>() == -2.5e-7);
    CHECK(parsed["values"]["f"].get<double>() == 9007199254740994.0);
}

// encode_result writes into memory sized by a bound it computes first (JsonText, checked only
// after the writes): its longest text must fit, and be the same whether the string it replaces
// had room for the bound or not.
TEST_CASE("a result at its longest fits its bound, in a string with room or without", "[codec]") {
    core::Emission e = design_emission();
    e.id = UINT64_MAX;
    e.kind = core::EmissionKind::retract;  // the longest name of each
    e.revision = UINT32_MAX;
    e.closed_by = core::ClosedBy::watermark;
    e.start_ms = std::numeric_limits<int64_t>::min();
    e.end_ms = std::numeric_limits<int64_t>::min();
    e.watermark_ms = std::numeric_limits<int64_t>::min();
    e.key = std::string(100, '\x01') + std::string(100, '\xff');  // 6 bytes out for each
    const std::vector<std::string> controls = {std::string(50, '\x1f'), std::string(50, '\x80')};
    e.values = {-2.2250738585072014e-308, -1.7976931348623157e308};
    const std::string node(30, '\x02'), pipeline(30, '\xfe'), version(30, '\x0f');
    // The text piece by piece, as the append_* functions write it.
    std::string expected = R"({"id":"ffffffffffffffff","node":)";
    codec::append_json_string(expected, node);
    expected += R"(,"pipeline":)";
    codec::append_json_string(expected, pipeline);
    expected += R"(,"version":)";
    codec::append_json_string(expected, version);
    expected += R"(,"key":)";
    codec::append_json_string(expected, e.key);
    expected += R"(,"window":{"start":-9223372036854775808,"end":-9223372036854775808},)"
                R"("kind":"retract","revision":4294967295,"closed_by":"watermark","values":{)";
    codec::append_json_string(expected, controls[0]);
    expected += ":-2.2250738585072014e-308,";
    codec::append_json_string(expected, controls[1]);
    expected += R"(:-1.7976931348623157e+308},"watermark":-9223372036854775808})";

    const size_t bound = codec::result_bytes_max(node, pipeline, controls, e, version);
    CHECK(expected.size() <= bound);
    // Every string at its worst and every number at its longest: what is left of the bound is
    // its own slack (256 for 228 fixed bytes, the short names' 6 bytes a byte, a revision of 10
    // digits counted at 20, the first value's comma).
    CHECK(bound - expected.size() == 28 + (2 + 6 * 7 - 9) + (2 + 6 * 9 - 11) + 10 + 1);

    std::string roomy;
    roomy.reserve(bound);
    const char* const at = roomy.data();
    codec::encode_result(node, pipeline, controls, e, roomy, version);
    CHECK(roomy == expected);
    CHECK(roomy.data() == at);  // written where it was, no new buffer
    std::string tight = "x";
    codec::encode_result(node, pipeline, controls, e, tight, version);
    CHECK(tight == expected);
    // A short result after a long one, into the same string.
    codec::encode_result("gw-01", "room_temp_1m", names, design_emission(), tight);
    CHECK(tight.starts_with(R"({"id":"9f2c61d0a4b7e853","node":"gw-01",)"));
    CHECK(tight.ends_with(R"("watermark":1764400065000})"));
}

// A pipeline's encoder writes its node, name, version and aggregate names once, at its
// construction; each result after that must read as if written piece by piece.
TEST_CASE("one encoder, many results: each is the record written piece by piece", "[codec]") {
    const std::string node = "gw \"01\"", pipeline = "p\\1m", version = "v\x01";
    const std::vector<std::string> aggregates = {"n", "a\tb", "\xff"};
    const codec::ResultEncoder encoder(node, pipeline, aggregates, version);
    const codec::ResultEncoder unversioned(node, pipeline, aggregates);
    const core::EmissionKind kinds[] = {core::EmissionKind::final_result,
                                        core::EmissionKind::update, core::EmissionKind::retract};
    const core::ClosedBy closes[] = {core::ClosedBy::watermark, core::ClosedBy::idle,
                                     core::ClosedBy::late, core::ClosedBy::merge};
    std::string out, plain;
    int n = 0;
    for (core::EmissionKind kind : kinds) {
        for (core::ClosedBy closed_by : closes) {
            core::Emission e = design_emission();
            e.id = 0x0123456789abcdefULL * static_cast<uint64_t>(++n);
            e.kind = kind;
            e.closed_by = closed_by;
            e.revision = static_cast<uint32_t>(n);
            e.key = "dev-" + std::to_string(n) + (n % 2 ? "\"" : "");
            e.start_ms = -n;
            e.values = {n % 3 ? std::optional<double>(n * 0.25) : std::nullopt, 7.0, -1e-9 * n};
            for (const bool versioned : {true, false}) {
                char id[17];
                std::snprintf(id, sizeof id, "%016llx", static_cast<unsigned long long>(e.id));
                std::string expected = std::string(R"({"id":")") + id + R"(","node":)";
                codec::append_json_string(expected, node);
                expected += R"(,"pipeline":)";
                codec::append_json_string(expected, pipeline);
                if (versioned) {
                    expected += R"(,"version":)";
                    codec::append_json_string(expected, version);
                }
                expected += R"(,"key":)";
                codec::append_json_string(expected, e.key);
                expected += R"(,"window":{"start":)" + std::to_string(e.start_ms) + R"(,"end":)" +
                            std::to_string(e.end_ms) + R"(},"kind":")" +
                            std::string(core::emission_kind_name(kind)) + R"(","revision":)" +
                            std::to_string(e.revision) + R"(,"closed_by":")" +
                            std::string(core::closed_by_name(closed_by)) + R"(","values":{)";
                for (size_t i = 0; i < aggregates.size(); ++i) {
                    if (i) expected += ',';
                    codec::append_json_string(expected, aggregates[i]);
                    expected += ':';
                    if (e.values[i]) {
                        codec::append_json_number(expected, *e.values[i]);
                    } else {
                        expected += "null";
                    }
                }
                expected += R"(},"watermark":)" + std::to_string(e.watermark_ms) + "}";
                INFO(expected);
                (versioned ? encoder : unversioned).encode(e, out);
                CHECK(out == expected);
                codec::encode_result(node, pipeline, aggregates, e, plain,
                                     versioned ? version : std::string());
                CHECK(plain == expected);
            }
        }
    }
}

TEST_CASE("a JSON string: plain runs whole, escapes and UTF-8 between them", "[codec]") {
    const auto quoted = [](std::string_view s) {
        std::string out = "x";  // appended to, not replaced
        codec::append_json_string(out, s);
        return out;
    };
    CHECK(quoted("") == R"(x"")");
    CHECK(quoted("plain text / 0-9 ~\x7f") == "x\"plain text / 0-9 ~\x7f\"");
    // A run before, between and after each kind of character that is not copied as it is.
    CHECK(quoted("ab\"cd\\ef\tgh") == R"(x"ab\"cd\\ef\u0009gh")");
    CHECK(quoted("caf\xc3\xa9 \xe2\x82\xac\x31") ==
          "x\"caf\xc3\xa9 \xe2\x82\xac\x31\"");                // \x31: '1'
    CHECK(quoted("a\xff\x62\xc3") == R"(x"a\ufffdb\ufffd")");  // \x62: 'b'
    CHECK(quoted(std::string(300, 'k') + "\n") == "x\"" + std::string(300, 'k') + "\\u000a\"");
    const std::string mixed = "k\"\\\x01\x1f \x7f\xc3\xa9z";
    CHECK(nlohmann::json::parse(quoted(mixed).substr(1)).get<std::string>() == mixed);
}

TEST_CASE("a result survives a round trip through a JSON parser", "[codec]") {
    core::Emission e = design_emission();
    e.kind = core::EmissionKind::update;
    e.closed_by = core::ClosedBy::idle;
    e.values = {1.0 / 3.0, 7.0, std::nullopt};
    std::string out;
    codec::encode_result("gw-01", "room_temp_1m", names, e, out);
    auto j = nlohmann::ordered_json::parse(out);
    std::vector<std::string> keys;
    for (const auto& [k, v] : j.items())
        keys.push_back(k);
    CHECK(keys == std::vector<std::string>{"id", "node", "pipeline", "key", "window", "kind",
                                           "revision", "closed_by", "values", "watermark"});
    CHECK(j["id"] == "9f2c61d0a4b7e853");
    CHECK(j["kind"] == "update");
    CHECK(j["closed_by"] == "idle");
    CHECK(j["window"]["start"].get<int64_t>() == e.start_ms);
    CHECK(j["values"]["avg"].get<double>() == 1.0 / 3.0);
    CHECK(j["values"]["n"].is_number_integer());
    CHECK(j["values"]["p95"].is_null());
    CHECK(j["watermark"].get<int64_t>() == e.watermark_ms);
}

TEST_CASE("side output carries the raw event, base64 when it is not text", "[codec]") {
    core::SideOutput side;
    side.reason = "too_late";
    side.order = 981;
    side.key = "dev-7";
    side.event_ms = 1000;
    side.ingest_ms = 2000;
    side.window_start_ms = 0;
    side.window_end_ms = 60000;
    side.watermark_ms = 700000;
    side.topic = "sensors/dev-7/telemetry";
    side.payload = R"({"ts":1000,"temp":20})";
    std::string out;
    codec::encode_side_output("gw-01", "p", side, out);
    CHECK(out ==
          R"({"node":"gw-01","pipeline":"p","reason":"too_late","key":"dev-7","log_offset":981,)"
          R"("event_ms":1000,"ingest_ms":2000,"window":{"start":0,"end":60000},"watermark":700000,)"
          R"("topic":"sensors/dev-7/telemetry","payload":"{\"ts\":1000,\"temp\":20}"})");
    CHECK(nlohmann::json::parse(out)["payload"] == side.payload);

    side.payload = std::string("\xff\x00\x01", 3);
    codec::encode_side_output("gw-01", "p", side, out);
    CHECK_THAT(out,
               Catch::EndsWith(R"("topic":"sensors/dev-7/telemetry","payload_base64":"/wAB"})"));
    CHECK(nlohmann::json::parse(out)["payload_base64"] == "/wAB");
}

TEST_CASE("base64 pads as RFC 4648 says", "[codec]") {
    auto b64 = [](std::string_view s) {
        std::string out;
        codec::append_base64(out, s);
        return out;
    };
    CHECK(b64("") == "");
    CHECK(b64("f") == "Zg==");
    CHECK(b64("fo") == "Zm8=");
    CHECK(b64("foo") == "Zm9v");
    CHECK(b64("foobar") == "Zm9vYmFy");
}
