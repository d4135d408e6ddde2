// Pipeline versions in the config (DESIGN.md section 4): what changes a version and what does
// not, the backfill settings, and a stored definition read back.
#include <catch2/catch.hpp>
#include <string>

#include "adapters/config/config.h"
#include "tests/adapters/config/config_support.h"

namespace tidemark {
namespace {

using test::minimal;
using test::only_error;
using test::replace;

config::Config load(const std::string& json) {
    auto loaded = config::parse_config(json, "/");
    INFO((loaded ? std::string() : config::format_errors(loaded.error())));
    REQUIRE(loaded.has_value());
    return *loaded;
}

std::string version_of(const std::string& json) {
    return load(json).pipelines.at(0).spec.version;
}

TEST_CASE("a version changes with what results mean, not with names, limits or backfill",
          "[config]") {
    const std::string base = version_of(minimal);
    CHECK(base.size() == 8);
    CHECK(base.find_first_not_of("0123456789abcdef") == std::string::npos);
    CHECK(load(minimal).pipelines[0].spec.version == base);
    CHECK(version_of(minimal) == base);  // stable
    // The same meaning spelled otherwise.
    CHECK(version_of(replace(minimal, R"("1m")", R"("60s")")) == base);
    // Not part of the meaning: the name, limits, backfill.from.
    CHECK(version_of(replace(minimal, R"("name": "p")", R"("name": "q")")) == base);
    CHECK(version_of(replace(minimal, R"("aggregates")",
                             R"("limits": {"max_keys": 10}, "aggregates")")) == base);
    CHECK(version_of(replace(minimal, R"("aggregates")",
                             R"("backfill": {"from": "1d"}, "aggregates")")) == base);
    // Each part of the meaning.
    for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
             {R"("1m")", R"("5m")"},
             {R"("sensors/+/telemetry")", R"("sensors/+/other")"},
             {R"("topic:1")", R"("/dev")"},
             {R"("/temp")", R"("/t")"},
             {R"({"fn": "count"})", R"({"fn": "max", "field": "temp"})"},
             {R"("aggregates")", R"("watermark": {"delay": "7s"}, "aggregates")"},
             {R"("aggregates")", R"("late": {"allowed_lateness": "1m"}, "aggregates")"},
             {R"("aggregates")",
              R"("timestamp": {"pointer": "/ts", "format": "epoch_s"}, "aggregates")"},
         }) {
        INFO(from << " -> " << to);
        CHECK(version_of(replace(minimal, from, to)) != base);
    }
}

TEST_CASE("backfill.from takes a duration or an RFC 3339 time", "[config]") {
    const auto with_from = [](const std::string& from) {
        return replace(minimal, R"("aggregates")",
                       R"("backfill": {"from": ")" + from + R"("}, "aggregates")");
    };
    const config::PipelineConfig age = load(with_from("7d")).pipelines[0];
    CHECK(age.backfill_from_age_ms == 7 * 86'400'000LL);
    CHECK_FALSE(age.backfill_from_ms);
    const config::PipelineConfig at = load(with_from("2026-11-30T12:00:00.250+01:00")).pipelines[0];
    CHECK(at.backfill_from_ms == 1796036400250LL);
    CHECK(load(with_from("1970-01-01T00:00:00Z")).pipelines[0].backfill_from_ms == 0);
    CHECK_THAT(only_error(with_from("yesterday"), "/pipelines/0/backfill/from"),
               Catch::Contains("neither a duration"));
    CHECK_THAT(only_error(with_from("2026-13-01T00:00:00Z"), "/pipelines/0/backfill/from"),
               Catch::Contains("RFC 3339"));
    // Days the calendar does not have are refused, as the payload codec and replay refuse them
    // (issue 25, finding 7: February 30th loaded as March 2nd).
    for (const char* day : {"2025-02-30T00:00:00Z", "2025-02-29T00:00:00Z", "1900-02-29T00:00:00Z",
                            "2025-04-31T12:00:00+02:00"}) {
        INFO(day);
        CHECK_THAT(only_error(with_from(day), "/pipelines/0/backfill/from"),
                   Catch::Contains("the calendar does not have"));
    }
    CHECK_THAT(only_error(with_from("0000-01-01T00:00:00+01:00"), "/pipelines/0/backfill/from"),
               Catch::Contains("outside the years 0000 to 9999"));
    CHECK(load(with_from("2024-02-29T00:00:00Z")).pipelines[0].backfill_from_ms ==
          1'709'164'800'000);
    CHECK(load(with_from("2016-12-31T23:59:60Z")).pipelines[0].backfill_from_ms ==
          1'483'228'800'000);
    CHECK(load(with_from("2025-11-29 07:06:40.5z")).pipelines[0].backfill_from_ms ==
          1'764'400'000'500);
    const config::PipelineConfig none = load(minimal).pipelines[0];
    CHECK_FALSE(none.backfill_from_age_ms);
    CHECK_FALSE(none.backfill_from_ms);
}

TEST_CASE("the backfill's share and live delay", "[config]") {
    const config::Config defaults = load(minimal);
    CHECK(defaults.backfill.max_share == 0.5);
    CHECK(defaults.backfill.max_live_delay_ms == 200);
    const std::string set =
        replace(minimal, R"("pipelines")",
                R"("backfill": {"max_share": 0.25, "max_live_delay": "50ms"}, "pipelines")");
    CHECK(load(set).backfill.max_share == 0.25);
    CHECK(load(set).backfill.max_live_delay_ms == 50);
    only_error(replace(set, "0.25", "0"), "/backfill/max_share");
    only_error(replace(set, "0.25", "1.5"), "/backfill/max_share");
    only_error(replace(set, R"("50ms")", R"("0s")"), "/backfill/max_live_delay");
    only_error(replace(set, R"("max_share")", R"("share")"), "/backfill/share");
}

TEST_CASE("a stored definition reads back as the same version", "[config]") {
    const std::string hopping = replace(minimal, R"({"type": "tumbling", "size": "1m"})",
                                        R"({"type": "hopping", "size": "2m", "advance": "1m"})");
    const config::PipelineConfig p = load(hopping).pipelines[0];
    auto back = config::parse_pipeline_definition(p.definition);
    REQUIRE(back.has_value());
    CHECK(back->spec.version == p.spec.version);
    CHECK(back->spec.window.size_ms == 120'000);
    CHECK(back->definition == p.definition);
    CHECK_FALSE(config::parse_pipeline_definition("{").has_value());
    CHECK_FALSE(config::parse_pipeline_definition(R"({"name": "p"})").has_value());
}

TEST_CASE("the map budget counts a second version of the largest pipeline", "[config]") {
    // 1,000,000 windows of one count (112 MB): half of a 256MiB map holds one version, and
    // three quarters of it not two.
    const std::string json = replace(
        replace(minimal, R"("pipelines")", R"("storage": {"map_size": "MAP"}, "pipelines")"),
        R"("aggregates")", R"("limits": {"max_open_windows": 1000000}, "aggregates")");
    CHECK(load(replace(json, "MAP", "1GiB")).pipelines.size() == 1);
    const config::ConfigError e = [&] {
        auto r = config::parse_config(replace(json, "MAP", "256MiB"), "/");
        REQUIRE_FALSE(r.has_value());
        REQUIRE(r.error().size() == 1);
        return r.error()[0];
    }();
    CHECK(e.pointer == "/storage/map_size");
    CHECK_THAT(e.message, Catch::Contains("while the largest pipeline backfills"));
}

}  // namespace
}  // namespace tidemark

namespace tidemark {

TEST_CASE("late.report: on with drop, off with side_output, its interval not in the version",
          "[config]") {
    const auto with_late = [](const std::string& late) {
        return test::replace(test::minimal, R"("aggregates")",
                             R"("late": )" + late + R"(, "aggregates")");
    };
    const auto spec = [&](const std::string& json) { return load(json).pipelines.at(0).spec.late; };
    CHECK(spec(test::minimal).report);  // no late section: drop, reported
    CHECK(spec(test::minimal).report_every_ms == 60'000);
    CHECK_FALSE(spec(with_late(R"({"too_late": "side_output"})")).report);
    CHECK(spec(with_late(R"({"too_late": "side_output", "report": true})")).report);
    CHECK_FALSE(spec(with_late(R"({"report": false})")).report);
    const auto every = spec(with_late(R"({"report": {"every": "5s"}})"));
    CHECK(every.report);
    CHECK(every.report_every_ms == 5'000);
    CHECK(version_of(with_late(R"({"report": {"every": "5s"}})")) == version_of(test::minimal));
    CHECK(version_of(with_late(R"({"report": false})")) == version_of(test::minimal));
    CHECK(test::only_error(with_late(R"({"report": {"every": "500ms"}})"),
                           "/pipelines/0/late/report/every")
              .find("at least 1s") != std::string::npos);
    test::only_error(with_late(R"({"report": {"evry": "5s"}})"), "/pipelines/0/late/report/evry");
    test::only_error(with_late(R"({"report": "5s"})"), "/pipelines/0/late/report");
}

}  // namespace tidemark
