// One report, two renderings: the health record the service publishes and `tidemark inspect
// --json` name the same figures the same way (issue 15: they had drifted to `p999` vs `p99.9`
// and flat vs nested partition counts), so a dashboard built on one reads the other.
#include <set>
#include <string>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "adapters/codec/decoder.h"
#include "adapters/config/config.h"
#include "adapters/log/crc32c.h"
#include "adapters/log/log_writer.h"
#include "core/time_text.h"
#include "firmware/build_info.h"
#include "firmware/commands/command_inspect.h"
#include "firmware/service/health_report.h"
#include "firmware/service/service_parts.h"
#include "tests/firmware/command_test_support.h"
#include "tests/support/broker.h"
#include "tests/support/manual_clock.h"

using namespace tidemark;
using nlohmann::json;

namespace {

const char* pipelines_json = R"([{"name": "p", "topic": "t/+", "key": "topic:1",
    "timestamp": {"pointer": "/ts", "format": "epoch_ms"}, "fields": {"v": "/v"},
    "window": {"type": "tumbling", "size": "10s"},
    "watermark": {"delay": "0s", "idle_timeout": "1h", "scope": "partition"},
    "late": {"allowed_lateness": "5s", "too_late": "side_output"},
    "aggregates": {"n": {"fn": "count"}, "s": {"fn": "sum", "field": "v"}}}])";

// Every leaf's path ("lag_ms/p99"), so that nesting differences show as different names.
void leaf_paths(const json& j, const std::string& prefix, std::set<std::string>& out) {
    if (!j.is_object()) {
        out.insert(prefix);
        return;
    }
    for (auto it = j.begin(); it != j.end(); ++it)
        leaf_paths(it.value(), prefix.empty() ? it.key() : prefix + "/" + it.key(), out);
}

std::set<std::string> leaf_paths(const json& j) {
    std::set<std::string> out;
    leaf_paths(j, "", out);
    return out;
}

std::set<std::string> minus(std::set<std::string> a, const std::set<std::string>& b) {
    for (const auto& s : b)
        a.erase(s);
    return a;
}

}  // namespace

TEST_CASE("health and inspect name the same figures the same way") {
    test::TempDir dir("tidemark-health-report");
    const std::string config_path = dir.path() + "/config.json";
    std::string text = test::config_text(dir.path(), pipelines_json);
    text.insert(text.rfind('}'), R"(, "storage": {"fsync": "never"})");
    test::write_file(config_path, text);
    auto config = config::load_config_file(config_path);
    INFO((config ? std::string() : config::format_errors(config.error())));
    REQUIRE(config);

    const test::ManualClock clock(1'000'000 + 700'000);
    json health;
    {
        auto parts = firmware::ServiceParts::open(*config, clock);
        REQUIRE(parts);
        REQUIRE((*parts)->host().recover([] { return false; }));
        // Three devices a second for a minute; every 20th event 30 s late (side output).
        for (int i = 0; i < 180; ++i) {
            const int64_t ingest = 1'000'000 + i * 333;
            const int64_t ts = i % 20 == 19 ? ingest - 30'000 : ingest;
            REQUIRE((*parts)->host().log().append(
                log::RecordType::message, ingest, "t/d" + std::to_string(i % 3),
                R"({"ts": )" + std::to_string(ts) + R"(, "v": )" + std::to_string(i) + "}"));
        }
        for (;;) {
            auto n = (*parts)->host().step(4096, /*drain=*/true);
            REQUIRE(n);
            if (*n == 0) break;
        }
        REQUIRE((*parts)->host().checkpoint());
        (*parts)->refresh_health(nullptr, nullptr);
        health = json::parse((*parts)->health_json());
    }

    firmware::InspectOptions options;
    options.config_path = config_path;
    options.json = true;
    json inspected;
    {
        test::CaptureStdout capture;
        REQUIRE(firmware::inspect_command(options, clock) == 0);
        inspected = json::parse(capture.text());
    }

    REQUIRE(health["pipelines"].contains("p"));
    REQUIRE(inspected["pipelines"]["list"].size() == 1);
    const auto health_pipeline = leaf_paths(health["pipelines"]["p"]);
    const auto inspect_pipeline = leaf_paths(inspected["pipelines"]["list"][0]);
    // The figures README documents for health, inspect's own names for them before issue 15.
    for (const char* name : {"lag_ms/p50", "lag_ms/p99", "lag_ms/p999", "partitions_active",
                             "partitions_idle", "emitted/final", "too_late", "events_in"}) {
        INFO(name);
        CHECK(health_pipeline.count(name) == 1);
        CHECK(inspect_pipeline.count(name) == 1);
    }
    // Inspect shows what health shows, and adds only the pipeline's name and its newest ingest
    // time (health names the pipeline by its key).
    CHECK(minus(health_pipeline, inspect_pipeline).empty());
    CHECK(minus(inspect_pipeline, health_pipeline) == std::set<std::string>{"name", "ingest_ms"});
    // The restored state counts what the live one did.
    CHECK(inspected["pipelines"]["list"][0]["partitions_active"] ==
          health["pipelines"]["p"]["partitions_active"]);
    CHECK(inspected["pipelines"]["list"][0]["keys"] == health["pipelines"]["p"]["keys"]);

    // The windows with the most too-late events: listed (at most five, most first, the earlier
    // window first among equals), with every too-late event of this run counted against its
    // window, and the same after inspect's restore.
    const json& windows = health["pipelines"]["p"]["too_late_windows"];
    REQUIRE(windows.is_array());
    REQUIRE_FALSE(windows.empty());
    CHECK(windows.size() <= 5);
    uint64_t listed = 0;
    for (size_t i = 0; i < windows.size(); ++i) {
        const json& w = windows[i];
        CHECK(w["end_ms"].get<int64_t>() - w["start_ms"].get<int64_t>() == 10'000);
        CHECK(w["start_ms"].get<int64_t>() % 10'000 == 0);
        listed += w["too_late"].get<uint64_t>();
        if (i > 0) {
            const json& v = windows[i - 1];
            CHECK((v["too_late"] > w["too_late"] ||
                   (v["too_late"] == w["too_late"] && v["start_ms"] < w["start_ms"])));
        }
    }
    const uint64_t tracked = health["pipelines"]["p"]["too_late_windows_tracked"].get<uint64_t>();
    CHECK(tracked >= windows.size());
    // Fewer than six windows: the list is the whole table, so it sums to the pipeline's count.
    if (tracked == windows.size()) CHECK(listed == health["pipelines"]["p"]["too_late"]);
    CHECK(health["pipelines"]["p"]["too_late_windows_dropped"] == 0);
    CHECK(inspected["pipelines"]["list"][0]["too_late_windows"] == windows);
    CHECK(health["pipelines"]["p"]["too_late"].get<uint64_t>() > 0);

    // inspect's text says it for a person: one line per window, in the log's time format.
    {
        firmware::InspectOptions human;
        human.config_path = config_path;
        test::CaptureStdout capture;
        REQUIRE(firmware::inspect_command(human, clock) == 0);
        const std::string printed = capture.text();
        INFO(printed);
        const auto& first = windows[0];
        CHECK(printed.find("  windows with the most too-late events:\n    " +
                           core::utc_text(first["start_ms"].get<int64_t>()) + " .. " +
                           core::utc_text(first["end_ms"].get<int64_t>()) + ": " +
                           first["too_late"].dump() + "\n") != std::string::npos);
    }

    // The outbox and the side store: the same names, inspect adding the rows it shows.
    const auto health_outbox = leaf_paths(health["outbox"]);
    CHECK(minus(health_outbox, leaf_paths(inspected["outbox"])).empty());
    CHECK(health["outbox"]["rows"] == inspected["outbox"]["rows"]);
    CHECK(leaf_paths(health["side"]) == minus(leaf_paths(inspected["side"]), {"latest"}));
    CHECK(health["side"]["rows"] == inspected["side"]["rows"]);
}

TEST_CASE("health and --version name the CRC-32C path and the JSON kernel in use") {
    const std::string crc32c(log::crc32c_implementation());
    REQUIRE((crc32c == "sse4.2" || crc32c == "armv8" || crc32c == "software"));
    firmware::HealthFigures figures;
    figures.build = firmware::build_info();
    const json health = json::parse(firmware::health_record_json(figures));
    CHECK(health["build"]["crc32c"] == crc32c);
    CHECK(firmware::version_text("9.8.7").rfind("tidemark 9.8.7\ncrc32c: " + crc32c, 0) == 0);
    // simdjson's kernel: NEON ("arm64") on aarch64, "fallback" on armhf, a SIMD one on x86-64.
    const std::string kernel(codec::json_kernel());
    CHECK_FALSE(kernel.empty());
    CHECK(health["build"]["json_kernel"] == kernel);
    CHECK_THAT(firmware::version_text("9.8.7"), Catch::EndsWith("\njson: " + kernel));
}
