// The sink reads exactly what the gateway writes (codec::encode_result, the version record,
// side output), and refuses everything else with a reason a person can act on.
#include "adapters/codec/upstream_record.h"

#include <catch2/catch.hpp>

#include "adapters/codec/record.h"
#include "firmware/service/health_report.h"
#include "firmware/service/versions.h"

using namespace tidemark;

namespace {

core::UpstreamRecord parse(std::string_view topic, std::string_view payload) {
    static codec::UpstreamParser parser;
    return parser.parse(topic, payload);
}

std::string refusal(std::string_view payload, std::string_view topic = "tidemark/gw/p") {
    const auto r = parse(topic, payload);
    REQUIRE(std::holds_alternative<core::Refusal>(r));
    return std::get<core::Refusal>(r).reason;
}

const char* const design_result =
    R"({"id":"9f2c61d0a4b7e853","node":"gw-01","pipeline":"room_temp_1m","version":"3f2a9c01",)"
    R"("key":"dev-7","window":{"start":1764400000000,"end":1764400060000},"kind":"final",)"
    R"("revision":0,"closed_by":"watermark","values":{"avg":21.4,"n":60,"p95":22.9},)"
    R"("watermark":1764400065000})";

std::string with(std::string record, const std::string& from, const std::string& to) {
    const size_t at = record.find(from);
    REQUIRE(at != std::string::npos);
    return record.replace(at, from.size(), to);
}

}  // namespace

TEST_CASE("a result the gateway encoded parses back field for field", "[codec][sink]") {
    core::Emission e;
    e.id = 0x9f2c61d0a4b7e853;
    e.kind = core::EmissionKind::retract;
    e.revision = 3;
    e.key = "dev \"7\"\\|x";
    e.start_ms = -60000;  // before 1970
    e.end_ms = 0;
    e.closed_by = core::ClosedBy::merge;
    e.values = {21.4, 60.0, std::nullopt, 1e300};
    e.watermark_ms = 1764400065000;
    const std::vector<std::string> names{"avg", "n", "none", "big"};
    std::string payload;
    codec::encode_result("gw-01", "room-temp.1m", names, e, payload, "3f2a9c01-r2");
    const auto parsed = parse("tidemark/gw-01/room-temp.1m", payload);
    REQUIRE(std::holds_alternative<core::ReceivedResult>(parsed));
    const auto& r = std::get<core::ReceivedResult>(parsed);
    CHECK(r.id == "9f2c61d0a4b7e853");
    CHECK(r.node == "gw-01");
    CHECK(r.pipeline == "room-temp.1m");
    CHECK(r.version == "3f2a9c01-r2");  // opaque: a run suffix is kept as it is
    CHECK(r.key == e.key);
    CHECK(r.window_start_ms == -60000);
    CHECK(r.window_end_ms == 0);
    CHECK(r.kind == core::EmissionKind::retract);
    CHECK(r.revision == 3);
    CHECK(r.closed_by == "merge");
    CHECK(r.values_json == R"({"avg":21.4,"n":60,"none":null,"big":1e+300})");
    CHECK(r.watermark_ms == 1764400065000);
}

TEST_CASE("DESIGN.md's result, and one without a version (a gateway before versions)",
          "[codec][sink]") {
    auto r = parse("t", design_result);
    REQUIRE(std::holds_alternative<core::ReceivedResult>(r));
    CHECK(std::get<core::ReceivedResult>(r).version == "3f2a9c01");
    r = parse("t", with(design_result, R"("version":"3f2a9c01",)", ""));
    REQUIRE(std::holds_alternative<core::ReceivedResult>(r));
    CHECK(std::get<core::ReceivedResult>(r).version.empty());
    // A field the sink does not know (a newer gateway's) is ignored.
    r = parse("t", with(design_result, R"("closed_by")", R"("extra":[1,2],"closed_by")"));
    CHECK(std::holds_alternative<core::ReceivedResult>(r));
}

TEST_CASE("the gateway's version record parses back, removal is an empty retained message",
          "[codec][sink]") {
    firmware::VersionEntry entry;
    entry.name = "room_temp_1m";
    entry.live_version = "3f2a9c01";
    entry.live_definition =
        R"({"name":"room_temp_1m","aggregates":{"avg":{"fn":"mean","field":"t"},"n":{"fn":"count"}}})";
    entry.previous = "0badc0de";
    entry.since_ms = 1764400000000;
    entry.switch_ms = 1764400123456;
    const std::string payload = firmware::version_record_json("gw-01", entry);
    const auto parsed = parse("tidemark/gw-01/room_temp_1m/version", payload);
    REQUIRE(std::holds_alternative<core::ReceivedVersion>(parsed));
    const auto& v = std::get<core::ReceivedVersion>(parsed);
    CHECK(v.topic == "tidemark/gw-01/room_temp_1m/version");
    CHECK(v.node == "gw-01");
    CHECK(v.pipeline == "room_temp_1m");
    CHECK(v.version == "3f2a9c01");
    CHECK(v.since_ms == 1764400000000);
    CHECK(v.previous == "0badc0de");
    CHECK(v.switch_ms == 1764400123456);
    REQUIRE(v.aggregates.size() == 2);
    CHECK(v.aggregates[0] == core::AggregateColumn{"avg", "mean"});
    CHECK(v.aggregates[1] == core::AggregateColumn{"n", "count"});
    CHECK(v.record_json == payload);

    entry.previous.clear();
    const auto first = parse("t/version", firmware::version_record_json("gw-01", entry));
    REQUIRE(std::holds_alternative<core::ReceivedVersion>(first));
    CHECK_FALSE(std::get<core::ReceivedVersion>(first).previous.has_value());

    const auto removed = parse("tidemark/gw-01/room_temp_1m/version", "");
    REQUIRE(std::holds_alternative<core::VersionRemoved>(removed));
    CHECK(std::get<core::VersionRemoved>(removed).topic == "tidemark/gw-01/room_temp_1m/version");
    CHECK(refusal("", "tidemark/gw-01/room_temp_1m").find("empty") != std::string::npos);
}

TEST_CASE("side output is kept as it came", "[codec][sink]") {
    core::SideOutput s;
    s.reason = "too_late";
    s.order = 42;
    s.key = "dev-1";
    s.topic = "sensors/dev-1/telemetry";
    s.payload = R"({"ts":1,"v":2})";
    std::string payload;
    codec::encode_side_output("gw-01", "p", s, payload);
    const auto parsed = parse("tidemark/gw-01/p/side", payload);
    REQUIRE(std::holds_alternative<core::ReceivedSide>(parsed));
    CHECK(std::get<core::ReceivedSide>(parsed).node == "gw-01");
    CHECK(std::get<core::ReceivedSide>(parsed).record_json == payload);
    const auto malformed =
        parse("t", R"({"node":"gw-01","pipeline":"p","malformed":"no ts","offset":7})");
    CHECK(std::holds_alternative<core::ReceivedSide>(malformed));
}

TEST_CASE("a gateway's health record (health.upstream) is health, never a result",
          "[codec][sink][health]") {
    // The record as the gateway builds it (firmware::health_record_json), with a pipeline, so
    // that "pipelines" holds an object that names windows and counts of its own.
    firmware::HealthFigures f;
    f.node = "gw-01";
    f.time_ms = 1764400000123;
    f.uptime_s = 60;
    core::PipelineStats stats;
    firmware::DecodeCounters decode;
    firmware::PipelineFigures p;
    p.name = "room_temp_1m";
    p.stats = &stats;
    p.decode = &decode;
    f.pipelines.push_back(p);
    f.alarms = {"too_late: room_temp_1m"};
    const std::string record = firmware::health_record_json(f);
    const auto parsed = parse("tidemark/gw-01/health", record);
    REQUIRE(std::holds_alternative<core::ReceivedHealth>(parsed));
    const auto& h = std::get<core::ReceivedHealth>(parsed);
    CHECK(h.node == "gw-01");
    CHECK(h.time_ms == 1764400000123);
    CHECK(h.topic == "tidemark/gw-01/health");
    CHECK(h.record_json == record);
    SECTION("one without its time or node is refused, naming the field") {
        CHECK(refusal(R"({"node":"gw-01","uptime_s":1,"pipelines":{}})") ==
              "health record: \"time_ms\" is missing");
        CHECK(refusal(R"({"node":"","time_ms":1,"uptime_s":1,"pipelines":{}})") ==
              "health record: \"node\" is empty");
    }
    SECTION("a sink's health (no pipelines) is no gateway's") {
        CHECK(refusal(R"({"client_id":"s","time_ms":1,"uptime_s":1,"rows_written":0})")
                  .starts_with("a JSON object that is no tidemark record"));
    }
}

TEST_CASE("what is refused, and why", "[codec][sink]") {
    CHECK(refusal("garbage").starts_with("not JSON"));
    CHECK(refusal("\xff\xfe").find("UTF-8") != std::string::npos);
    CHECK(refusal("[1,2]").find("not a JSON object") != std::string::npos);
    CHECK(refusal(R"({"hello":"world"})").find("no tidemark record") != std::string::npos);
    CHECK(refusal(with(design_result, R"("revision":0)", R"("revision":"0")")) ==
          "result record: \"revision\" must be an integer from 0 to 2147483647, found a string");
    CHECK(refusal(with(design_result, R"("revision":0)", R"("revision":2147483648)"))
              .find("\"revision\"") != std::string::npos);
    CHECK(
        refusal(with(design_result, R"("revision":0)", R"("revision":-1)")).find("\"revision\"") !=
        std::string::npos);
    CHECK(refusal(with(design_result, R"("kind":"final")", R"("kind":"partial")")) ==
          "result record: \"kind\" must be final, update or retract, found 'partial'");
    CHECK(refusal(with(design_result, R"("n":60)", R"("n":"60")")) ==
          "result record: the value \"n\" must be a number or null, found a string");
    CHECK(refusal(with(design_result, R"("n":60)", R"("n":[60])")).find("an array") !=
          std::string::npos);
    CHECK(refusal(with(design_result, R"("end":1764400060000)", R"("end":1764400000000)"))
              .find("end must be after its start") != std::string::npos);
    CHECK(refusal(with(design_result, R"("start":1764400000000)", R"("start":1.5)"))
              .find("\"window\": \"start\" must be an integer") != std::string::npos);
    CHECK(refusal(with(design_result, R"("watermark":1764400065000)",
                       R"("watermark":9000000000000000000)"))
              .find("\"watermark\"") != std::string::npos);
    CHECK(refusal(with(design_result, R"("id":"9f2c61d0a4b7e853",)", "")) ==
          "result record: \"id\" is missing");
    CHECK(refusal(with(design_result, R"("key":"dev-7")", R"("key":"dev\u0000-7")")).find("NUL") !=
          std::string::npos);
    CHECK(refusal(with(design_result, R"("pipeline":"room_temp_1m")",
                       R"("pipeline":"x\"; DROP TABLE results; --")"))
              .find("cannot name the view") != std::string::npos);
    CHECK(refusal(with(design_result, R"("pipeline":"room_temp_1m")",
                       R"("pipeline":")" + std::string(56, 'p') + "\""))
              .find("at most 55") != std::string::npos);
    const std::string version =
        R"({"node":"gw","pipeline":"p","version":"v","since_ms":0,"previous":null,)"
        R"("switch_ms":5,"aggregates":{"avg":"mean"}})";
    CHECK(std::holds_alternative<core::ReceivedVersion>(parse("t/version", version)));
    CHECK(refusal(with(version, R"("avg":"mean")", R"("key":"mean")"), "t/version")
              .find("share its name with a column") != std::string::npos);
    CHECK(refusal(with(version, R"("avg":"mean")", R"("avg":3)"), "t/version")
              .find("must name its function") != std::string::npos);
    CHECK(refusal(with(version, R"("avg":"mean")", R"("avg":"mean","avg":"sum")"), "t/version")
              .find("appears twice") != std::string::npos);
    CHECK(refusal(with(version, R"("node":"gw",)", ""), "t/version") ==
          "version record: \"node\" is missing");
    CHECK(refusal(design_result, "tidemark/\xff/p").find("topic") != std::string::npos);
    CHECK(refusal(R"({"node":"gw","pipeline":"p","reason":"x\u0000"})").find("NUL") !=
          std::string::npos);
}

TEST_CASE("a too-late tally the gateway encoded is the README's record and parses back",
          "[codec][sink]") {
    core::LateReport l;
    l.id = 0x5d1e0c9a7b3f2468;
    l.start_ms = 1764400000000;
    l.end_ms = 1764400060000;
    l.since_ms = 1764400712000;
    l.too_late = 17;
    l.as_of_ms = 1764400740000;
    std::string payload;
    codec::encode_late_report("gw-01", "room_temp_1m", "6b033ab2", l, payload);
    CHECK(payload == R"({"id":"5d1e0c9a7b3f2468","node":"gw-01","pipeline":"room_temp_1m",)"
                     R"("version":"6b033ab2","window":{"start":1764400000000,"end":1764400060000},)"
                     R"("too_late":17,"since_ms":1764400712000,"as_of_ms":1764400740000})");
    const auto parsed = parse("tidemark/gw-01/room_temp_1m/late", payload);
    REQUIRE(std::holds_alternative<core::ReceivedLate>(parsed));
    const auto& r = std::get<core::ReceivedLate>(parsed);
    CHECK(r.id == "5d1e0c9a7b3f2468");
    CHECK(r.node == "gw-01");
    CHECK(r.pipeline == "room_temp_1m");
    CHECK(r.version == "6b033ab2");
    CHECK(r.window_start_ms == l.start_ms);
    CHECK(r.window_end_ms == l.end_ms);
    CHECK(r.since_ms == l.since_ms);
    CHECK(r.too_late == 17);
    CHECK(r.as_of_ms == l.as_of_ms);
    // Classified by its fields, whatever the topic.
    CHECK(std::holds_alternative<core::ReceivedLate>(parse("elsewhere", payload)));
}

TEST_CASE("a too-late tally with a bad field is refused, naming it", "[codec][sink]") {
    const std::string good =
        R"({"id":"5d1e0c9a7b3f2468","node":"gw","pipeline":"p","window":{"start":0,"end":60000},)"
        R"("too_late":3,"since_ms":70000,"as_of_ms":80000})";
    CHECK(std::holds_alternative<core::ReceivedLate>(parse("t/late", good)));
    CHECK(refusal(with(good, R"("too_late":3)", R"("too_late":0)")).find("\"too_late\"") !=
          std::string::npos);
    CHECK(refusal(with(good, R"("too_late":3)", R"("too_late":"3")")).find("\"too_late\"") !=
          std::string::npos);
    CHECK(refusal(with(good, R"("since_ms":70000,)", "")).find("\"since_ms\" is missing") !=
          std::string::npos);
    CHECK(refusal(with(good, R"("end":60000)", R"("end":0)")).find("window") != std::string::npos);
    CHECK(refusal(with(good, R"("pipeline":"p")", R"("pipeline":"a b")")).find("pipeline") !=
          std::string::npos);
}
