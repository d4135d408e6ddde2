// The config an operator writes either loads to exactly what it says, or is refused with every
// mistake named by its JSON pointer and a sentence saying what to do.
#include "adapters/config/config.h"

#include <stdlib.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "core/aggregate.h"
#include "tests/adapters/config/config_support.h"

using namespace tidemark;
using config::ConfigError;
using config::parse_config;
using test::errors_of;
using test::minimal;
using test::only_error;
using test::replace;

namespace {

namespace fs = std::filesystem;

struct TempDir {
    fs::path path;
    TempDir() {
        std::string pattern = (fs::temp_directory_path() / "tm-config-XXXXXX").string();
        TM_ASSERT(mkdtemp(pattern.data()) != nullptr);
        path = pattern;
    }
    ~TempDir() { fs::remove_all(path); }
    std::string write(const std::string& name, const std::string& contents) const {
        std::ofstream(path / name) << contents;
        return (path / name).string();
    }
};

// DESIGN.md section 6, verbatim.
const std::string design_example = R"({
  "node_id": "gw-01",
  "data_dir": "/var/lib/tidemark",
  "storage": {"map_size": "1GiB", "fsync": "interval", "fsync_interval": "1s",
              "log_retention": {"max_age": "7d", "max_bytes": "512MiB"}},
  "checkpoint": {"interval": "5s"},
  "source": {"uri": "tcp://127.0.0.1:1883", "client_id": "tidemark-gw-01",
             "username": "tm", "password_file": "/etc/tidemark/source.pass",
             "tls": {"ca_file": "...", "cert_file": "...", "key_file": "..."},
             "max_payload": "64KiB"},
  "upstream": {"uri": "ssl://cloud.example:8883", "client_id": "gw-01",
               "topic": "tidemark/{node_id}/{pipeline}", "qos": 1, "max_inflight": 64,
               "outbox": {"max_bytes": "256MiB", "when_full": "drop_oldest"},
               "compact_superseded": true},
  "health": {"topic": "tidemark/{node_id}/health", "interval": "10s"},
  "pipelines": [{
    "name": "room_temp_1m",
    "topic": "sensors/+/telemetry",
    "key": "topic:1",
    "timestamp": {"pointer": "/ts", "format": "epoch_ms"},
    "fields": {"temp": "/temp"},
    "window": {"type": "tumbling", "size": "1m"},
    "watermark": {"delay": "5s", "idle_timeout": "1m", "max_future": "10m", "scope": "global"},
    "late": {"allowed_lateness": "10m", "too_late": "drop", "corrections": "upsert"},
    "aggregates": {"avg": {"fn": "mean", "field": "temp"}, "n": {"fn": "count"},
                   "p95": {"fn": "quantile", "field": "temp", "q": 0.95}},
    "limits": {"max_keys": 100000, "max_open_windows": 1000000}
  }]
})";

}  // namespace

TEST_CASE("DESIGN.md's example, with real files and its budget fixed, loads to what it says",
          "[config]") {
    TempDir dir;
    dir.write("source.pass", "s3cret\n");
    dir.write("ca.pem", "ca");
    dir.write("cert.pem", "cert");
    dir.write("key.pem", "key");
    std::string json = design_example;
    json = replace(json, "/etc/tidemark/source.pass", "source.pass");  // relative to the file
    json = replace(json, R"("ca_file": "...", "cert_file": "...", "key_file": "...")",
                   R"("ca_file": "ca.pem", "cert_file": "cert.pem", "key_file": "key.pem")");
    json = replace(json, "tcp://127.0.0.1:1883", "ssl://127.0.0.1:8883");
    // 23 windows per key: 12 slices (the minute, the delay, the lateness) and 11 fired records.
    json = replace(json, R"("max_keys": 100000, "max_open_windows": 1000000)",
                   R"("max_keys": 50000, "max_open_windows": 1200000)");
    // State 1200000 x 248 bytes, twice while it backfills (568MiB), beside an outbox of 256MiB
    // (twice that in LMDB) is more than the 1GiB map: half the outbox fits (860MiB in all).
    json = replace(json, R"("max_bytes": "256MiB", "when_full")",
                   R"("max_bytes": "128MiB", "when_full")");
    std::string path = dir.write("tidemark.json", json);

    auto loaded = config::load_config_file(path);
    INFO((loaded ? std::string() : config::format_errors(loaded.error())));
    REQUIRE(loaded.has_value());
    const config::Config& c = *loaded;
    CHECK(c.node_id == "gw-01");
    CHECK(c.data_dir == "/var/lib/tidemark");
    CHECK(c.storage.map_size_bytes == (1ULL << 30));
    CHECK(c.storage.fsync == config::FsyncPolicy::interval);
    CHECK(c.storage.fsync_interval_ms == 1000);
    CHECK(c.storage.log_retention.max_age_ms == 7 * 86'400'000LL);
    CHECK(c.storage.log_retention.max_bytes == (512ULL << 20));
    CHECK(c.storage.segment_bytes == (64ULL << 20));
    CHECK(c.storage.log_compression == config::LogCompression::zstd);
    CHECK(c.checkpoint.interval_ms == 5000);
    CHECK(c.source.uri == "ssl://127.0.0.1:8883");
    CHECK(c.source.client_id == "tidemark-gw-01");
    CHECK(c.source.username == "tm");
    CHECK(c.source.password == "s3cret");
    REQUIRE(c.source.tls.has_value());
    CHECK(c.source.tls->ca_file == (dir.path / "ca.pem").string());
    CHECK(c.source.tls->key_file == (dir.path / "key.pem").string());
    CHECK(c.source.max_payload_bytes == 65536);
    REQUIRE(c.upstream.has_value());
    CHECK(c.upstream->uri == "ssl://cloud.example:8883");
    CHECK(c.upstream->client_id == "gw-01");
    CHECK(c.upstream->topic == "tidemark/{node_id}/{pipeline}");
    CHECK(c.upstream->qos == 1);
    CHECK(c.upstream->max_inflight == 64);
    CHECK(c.upstream->outbox.max_bytes == (128ULL << 20));
    CHECK(c.upstream->outbox.when_full == config::WhenFull::drop_oldest);
    CHECK(c.upstream->compact_superseded);
    CHECK(c.health.topic == "tidemark/{node_id}/health");
    CHECK(c.health.interval_ms == 10'000);
    CHECK(c.log_level == "info");

    REQUIRE(c.pipelines.size() == 1);
    const config::PipelineConfig& p = c.pipelines[0];
    CHECK(p.spec.name == "room_temp_1m");
    CHECK(p.topic_filter == "sensors/+/telemetry");
    REQUIRE(p.key.size() == 1);
    CHECK(p.key[0].kind == config::Extractor::topic_level);
    CHECK(p.key[0].level == 1);
    CHECK(p.partition.empty());
    CHECK_FALSE(p.timestamp.ingest);
    CHECK(p.timestamp.pointer == "/ts");
    CHECK(p.timestamp.format == config::TimestampSpec::epoch_ms);
    CHECK(p.spec.fields == std::vector<std::string>{"temp"});
    CHECK(p.field_pointers == std::vector<std::string>{"/temp"});
    CHECK(p.spec.window.type == core::WindowType::tumbling);
    CHECK(p.spec.window.size_ms == 60'000);
    CHECK(p.spec.window.offset_ms == 0);
    CHECK(p.spec.watermark.delay_ms == 5000);
    CHECK(p.spec.watermark.idle_timeout_ms == 60'000);
    CHECK(p.spec.watermark.max_future_ms == 600'000);
    CHECK(p.spec.watermark.scope == core::WatermarkScope::global);
    CHECK(p.spec.late.allowed_lateness_ms == 600'000);
    CHECK(p.spec.late.too_late == core::TooLate::drop);
    CHECK(p.spec.late.corrections == core::Corrections::upsert);
    // Aggregates keep the document's order: it is the order of "values" in every result.
    REQUIRE(p.spec.aggregates.size() == 3);
    CHECK(p.spec.aggregates[0].name == "avg");
    CHECK(p.spec.aggregates[0].fn == core::AggregateFn::mean);
    CHECK(p.spec.aggregates[0].field == 0);
    CHECK(p.spec.aggregates[1].name == "n");
    CHECK(p.spec.aggregates[1].fn == core::AggregateFn::count);
    CHECK(p.spec.aggregates[1].field == -1);
    CHECK(p.spec.aggregates[2].name == "p95");
    CHECK(p.spec.aggregates[2].fn == core::AggregateFn::quantile);
    CHECK(p.spec.aggregates[2].q == 0.95);
    CHECK(p.spec.quantile.relative_error == 0.01);
    CHECK(p.spec.quantile.buckets_max == 1024);
    CHECK(p.spec.limits.keys_max == 50'000);
    CHECK(p.spec.limits.open_windows_max == 1'200'000);
}

TEST_CASE("DESIGN.md's example as printed is refused for three real reasons", "[config]") {
    auto errors = errors_of(design_example);
    INFO(config::format_errors(errors));
    std::vector<std::string> pointers;
    for (const auto& e : errors)
        pointers.push_back(e.pointer);
    CHECK(pointers == std::vector<std::string>{"/source/password_file", "/source/tls/ca_file",
                                               "/source/tls/cert_file", "/source/tls/key_file",
                                               "/source/tls", "/pipelines/0/limits"});
    CHECK(errors[4].message ==
          "tls is set but \"tcp://127.0.0.1:1883\" is not an encrypted transport: use ssl://");
    CHECK(errors[5].message ==
          "100000 keys x 23 windows per key (1m tumbling, plus 5s delay and 10m allowed "
          "lateness) = 2300000 > max_open_windows 1000000: raise max_open_windows or lower "
          "max_keys");
}

TEST_CASE("defaults fill everything optional", "[config]") {
    auto loaded = parse_config(minimal, "/etc/tidemark");
    INFO((loaded ? std::string() : config::format_errors(loaded.error())));
    REQUIRE(loaded.has_value());
    CHECK(loaded->data_dir == "/var/lib/tidemark");
    CHECK(loaded->source.client_id == "tidemark-gw-01");
    CHECK(loaded->source.password.empty());
    CHECK_FALSE(loaded->source.tls.has_value());
    CHECK_FALSE(loaded->upstream.has_value());
    CHECK(loaded->log_level == "info");
    // Chosen from measured flash writes and recovery time: docs/OPERATIONS.md.
    CHECK(loaded->checkpoint.interval_ms == 60'000);
    const auto& p = loaded->pipelines[0];
    CHECK(p.timestamp.ingest);
    CHECK(p.spec.limits.keys_max == 100'000);
    CHECK(p.spec.watermark.delay_ms == 0);

    auto relative = parse_config(
        replace(minimal, R"("node_id")", R"("data_dir": "data", "node_id")"), "/etc/tidemark");
    REQUIRE(relative.has_value());
    CHECK(relative->data_dir == "/etc/tidemark/data");
}

TEST_CASE("keys, partitions and timestamps in every spelling", "[config]") {
    std::string json = replace(minimal, R"("key": "topic:1")",
                               R"("key": ["topic:1", "/meta/room"], "partition": "/site",
                                  "timestamp": {"pointer": "/t", "format": "rfc3339"})");
    auto loaded = parse_config(json, "/");
    INFO((loaded ? std::string() : config::format_errors(loaded.error())));
    REQUIRE(loaded.has_value());
    const auto& p = loaded->pipelines[0];
    REQUIRE(p.key.size() == 2);
    CHECK(p.key[1] == config::Extractor{config::Extractor::json_pointer, 0, "/meta/room"});
    REQUIRE(p.partition.size() == 1);
    CHECK(p.partition[0].pointer == "/site");
    CHECK(p.timestamp.format == config::TimestampSpec::rfc3339);

    auto ingest =
        parse_config(replace(minimal, R"("key")", R"("timestamp": "ingest", "key")"), "/");
    REQUIRE(ingest.has_value());
    CHECK(ingest->pipelines[0].timestamp.ingest);
}

TEST_CASE("every class of mistake is named by pointer and sentence", "[config]") {
    SECTION("invalid JSON says where") {
        auto message = only_error("{\n  \"node_id\": \"gw\",\n  oops\n}", "");
        CHECK_THAT(message, Catch::StartsWith("the config is not valid JSON"));
        CHECK_THAT(message, Catch::Contains("line 3, column"));
    }
    SECTION("a number no double holds is refused, not thrown (found by fuzz_config)") {
        auto message = only_error(R"({"a":1e400})", "");
        CHECK_THAT(message, Catch::StartsWith("the config is not valid JSON"));
    }
    SECTION("the root must be an object") {
        CHECK(only_error("[]", "") == "the config must be a JSON object, not an array");
    }
    SECTION("unknown keys list the allowed ones and a near miss") {
        auto message =
            only_error(replace(minimal, R"("uri")", R"("urii": "x", "uri")"), "/source/urii");
        CHECK(message ==
              "unknown key \"urii\": allowed keys are uri, client_id, username, password_file, "
              "allow_plaintext_password, tls, max_payload, retained, clock (did you mean "
              "\"uri\"?)");
    }
    SECTION("window keys depend on the window type") {
        auto message =
            only_error(replace(minimal, R"("size": "1m")", R"("size": "1m", "advance": "10s")"),
                       "/pipelines/0/window/advance");
        CHECK_THAT(message, Catch::StartsWith("unknown key \"advance\" for a tumbling window: "
                                              "allowed keys are type, size, offset"));
    }
    SECTION("a key given twice in one object") {
        auto message =
            only_error(replace(minimal, R"("aggregates": {)",
                               R"("aggregates": {"n": {"fn": "sum", "field": "temp"}, )"),
                       "/pipelines/0/aggregates/n");
        CHECK(message == "the key \"n\" appears twice in this object: keep one");
    }
    SECTION("wrong types") {
        CHECK(only_error(replace(minimal, R"("node_id": "gw-01")", R"("node_id": 7)"),
                         "/node_id") == "expected a string, found the number 7");
        CHECK(only_error(replace(minimal, R"("aggregates": {"n": {"fn": "count"}})",
                                 R"("aggregates": [])"),
                         "/pipelines/0/aggregates")
                  .starts_with("expected an object such as"));
    }
    SECTION("a bad duration") {
        CHECK(only_error(replace(minimal, R"("size": "1m")", R"("size": "5x")"),
                         "/pipelines/0/window/size") ==
              "\"5x\" is not a duration: use a number followed by ms, s, m, h or d");
    }
    SECTION("a bad size") {
        CHECK(only_error(replace(minimal, R"("node_id")",
                                 R"("storage": {"map_size": "1 gig"}, "node_id")"),
                         "/storage/map_size") ==
              "\"1 gig\" is not a size: use a number followed by B, KiB, MiB, GiB or TiB");
    }
    SECTION("storage.log_compression is none or zstd") {
        auto message = only_error(
            replace(minimal, R"("node_id")", R"("storage": {"log_compression": "lz4"}, "node_id")"),
            "/storage/log_compression");
        CHECK_THAT(message, Catch::Contains("none"));
        CHECK_THAT(message, Catch::Contains("zstd"));
        auto none = parse_config(replace(minimal, R"("node_id")",
                                         R"("storage": {"log_compression": "none"}, "node_id")"),
                                 "/etc/tidemark");
        REQUIRE(none.has_value());
        CHECK(none->storage.log_compression == config::LogCompression::none);
    }
    SECTION("required settings") {
        auto message = only_error(
            replace(minimal, R"("source": {"uri": "tcp://127.0.0.1:1883"},)", ""), "/source");
        CHECK_THAT(message, Catch::StartsWith("is required: the gateway broker"));
    }
    SECTION("duplicate pipeline names") {
        std::string pipeline = minimal.substr(minimal.find("{\n    \"name\""));
        pipeline = pipeline.substr(0, pipeline.rfind(']'));
        std::string json = replace(minimal, "}]\n}", "}, " + pipeline + "]\n}");
        CHECK(only_error(json, "/pipelines/1/name") ==
              "duplicate pipeline name \"p\": /pipelines/0 has it too; names must be unique");
    }
    SECTION("an empty pipeline list") {
        std::string json = minimal.substr(0, minimal.find("\"pipelines\"")) + "\"pipelines\": []}";
        CHECK(only_error(json, "/pipelines") ==
              "expected a list of 1 to 64 pipelines, found an empty list");
    }
    SECTION("MQTT topic filter syntax") {
        CHECK(only_error(replace(minimal, "sensors/+/telemetry", "sensors/#/telemetry"),
                         "/pipelines/0/topic") ==
              "\"sensors/#/telemetry\" is not a valid MQTT topic filter: '#' must be the whole "
              "last level, as in \"sensors/#\"");
        CHECK(only_error(replace(minimal, "sensors/+/telemetry", "sensors/dev+/telemetry"),
                         "/pipelines/0/topic")
                  .ends_with("'+' must be a whole level, as in \"sensors/+/telemetry\""));
    }
    SECTION("a key level past the end of the filter") {
        CHECK(only_error(replace(minimal, "topic:1", "topic:3"), "/pipelines/0/key") ==
              "\"topic:3\" is past the last level of the topic filter, which has 3 levels "
              "(numbered from 0)");
        CHECK(only_error(replace(minimal, "topic:1", "device"), "/pipelines/0/key") ==
              "\"device\" is neither \"topic:N\" nor a JSON pointer starting with \"/\"");
    }
    SECTION("an aggregate over a field that is not declared") {
        CHECK(
            only_error(replace(minimal, R"({"fn": "count"})", R"({"fn": "mean", "field": "hum"})"),
                       "/pipelines/0/aggregates/n/field") ==
            "\"hum\" is not in this pipeline's fields (temp): add it to \"fields\" with its "
            "JSON pointer");
    }
    SECTION("an unknown aggregate function") {
        CHECK(only_error(replace(minimal, R"("fn": "count")", R"("fn": "avg")"),
                         "/pipelines/0/aggregates/n/fn") ==
              "\"avg\" is not an aggregate: use count, sum, min, max, mean, first, last, "
              "variance, stddev or quantile");
    }
    SECTION("a quantile without q, or q outside (0, 1)") {
        CHECK(only_error(
                  replace(minimal, R"({"fn": "count"})", R"({"fn": "quantile", "field": "temp"})"),
                  "/pipelines/0/aggregates/n/q")
                  .starts_with("is required: the quantile between 0 and 1"));
        CHECK(only_error(replace(minimal, R"({"fn": "count"})",
                                 R"({"fn": "quantile", "field": "temp", "q": 1})"),
                         "/pipelines/0/aggregates/n/q") ==
              "must be more than 0 and less than 1, not 1");
    }
    SECTION("an impossible window, in core::validate's words") {
        auto message = only_error(replace(minimal, R"("type": "tumbling", "size": "1m")",
                                          R"("type": "hopping", "size": "1m", "advance": "5m")"),
                                  "/pipelines/0/window");
        CHECK_THAT(message, Catch::Contains("advance"));
    }
    SECTION("a broker URI Paho cannot use") {
        CHECK(only_error(replace(minimal, "tcp://127.0.0.1:1883", "http://127.0.0.1:1883"),
                         "/source/uri") ==
              "\"http://127.0.0.1:1883\" is not a broker URI: use tcp:// or ssl:// followed by "
              "host:port, as in \"tcp://127.0.0.1:1883\"");
        // Paho alone would take these; the forwarder's libmosquitto would not.
        CHECK_THAT(only_error(replace(minimal, "tcp://127.0.0.1:1883", "ws://127.0.0.1:1883"),
                              "/source/uri"),
                   Catch::Contains("use tcp:// or ssl://"));
        CHECK_THAT(
            only_error(replace(minimal, "tcp://127.0.0.1:1883", "tcp://127.0.0.1"), "/source/uri"),
            Catch::Contains("has no port"));
        CHECK(only_error(replace(minimal, "tcp://127.0.0.1:1883", "tcp://127.0.0.1:99999"),
                         "/source/uri") ==
              "\"tcp://127.0.0.1:99999\" has an invalid port: use 1 to 65535");
    }
    SECTION("an inline password is refused") {
        CHECK(only_error(replace(minimal, R"("uri")", R"("username": "u", "password": "x", "uri")"),
                         "/source/password") ==
              "passwords are not accepted in the config: write it to a file only the tidemark "
              "user can read and name that file in \"password_file\"");
    }
    SECTION("an unreadable password or TLS file") {
        CHECK(only_error(replace(minimal, R"("uri")",
                                 R"("username": "u", "password_file": "/nonexistent/pass", "uri")"),
                         "/source/password_file") ==
              "cannot read the password file \"/nonexistent/pass\": No such file or directory");
        CHECK(only_error(replace(replace(minimal, "tcp://", "ssl://"), R"("uri")",
                                 R"("tls": {"ca_file": "/nonexistent/ca.pem"}, "uri")"),
                         "/source/tls/ca_file") ==
              "cannot read the TLS file \"/nonexistent/ca.pem\": No such file or directory");
    }
    SECTION("a topic template with an unknown placeholder") {
        CHECK(only_error(replace(minimal, R"("node_id")",
                                 R"("health": {"topic": "tm/{node}/health"}, "node_id")"),
                         "/health/topic") ==
              "\"tm/{node}/health\" uses an unknown placeholder {node}: the placeholders are "
              "{node_id}");
    }
    SECTION("more keys than windows allowed") {
        std::string json = replace(minimal, R"("type": "tumbling", "size": "1m")",
                                   R"("type": "hopping", "size": "1h", "advance": "1m")");
        json = replace(json, R"("aggregates")",
                       R"("late": {"allowed_lateness": "10m"},
                          "limits": {"max_keys": 100000, "max_open_windows": 1000000},
                          "aggregates")");
        auto message = only_error(json, "/pipelines/0/limits");
        // The per-key figure is core::windows_per_key_estimate's; the sentence is the config's.
        CHECK(std::regex_match(
            message, std::regex("100000 keys x [0-9]+ windows per key \\(1h hopping every "
                                "1m, plus 10m allowed lateness\\) = [0-9]+00000 > "
                                "max_open_windows 1000000: raise max_open_windows or "
                                "lower max_keys")));
    }
    SECTION("a quantile bound the sketch cannot honour is refused, not a crash at run time") {
        // check-config used to pass 0 < relative_error < 1e-6, which aborted in the sketch.
        const std::string json =
            replace(minimal, R"("aggregates")",
                    R"("quantile": {"relative_error": 0.0000001}, "aggregates")");
        CHECK_THAT(only_error(json, "/pipelines/0/quantile/relative_error"),
                   Catch::StartsWith("must be at least 1e-06"));
    }
    SECTION("state that cannot fit in half the LMDB map") {
        std::string json =
            replace(minimal, R"("node_id")", R"("storage": {"map_size": "64MiB"}, "node_id")");
        json =
            replace(json, R"("aggregates")",
                    R"("limits": {"max_keys": 1000, "max_open_windows": 1000000}, "aggregates")");
        core::AggregateSet set({{"n", core::AggregateFn::count, -1, 0.5}}, {});
        uint64_t per_window = set.bytes_per_window() + config::window_overhead_bytes;
        auto message = only_error(json, "/storage/map_size");
        CHECK_THAT(message, Catch::StartsWith("the pipelines' state can reach 1000000 windows x " +
                                              std::to_string(per_window) + " bytes (p) = " +
                                              std::to_string(per_window * 1000000) + " bytes ("));
        CHECK_THAT(message, Catch::EndsWith("more than half of storage.map_size 64MiB (32MiB; the "
                                            "other half holds the outbox and checkpoint copies): "
                                            "raise storage.map_size or lower "
                                            "limits.max_open_windows"));
    }
}

TEST_CASE("several mistakes are all reported, in document order", "[config]") {
    std::string json =
        replace(minimal, R"("node_id": "gw-01")", R"("node_id": "gw/01", "bogus": 1)");
    json = replace(json, "tcp://", "udp://");
    json = replace(json, R"("size": "1m")", R"("size": "soon")");
    json = replace(json, R"({"fn": "count"})", R"({"fn": "count", "q": 0.5})");
    auto errors = errors_of(json);
    std::vector<std::string> pointers;
    for (const auto& e : errors)
        pointers.push_back(e.pointer);
    CHECK(pointers == std::vector<std::string>{"/bogus", "/node_id", "/source/uri",
                                               "/pipelines/0/window/size",
                                               "/pipelines/0/aggregates/n/q"});
    std::string text = config::format_errors(errors);
    CHECK_THAT(text, Catch::Contains("/pipelines/0/window/size: \"soon\" is not a duration"));
    CHECK(std::count(text.begin(), text.end(), '\n') == 5);
}

TEST_CASE("a password comes from its file, without the trailing newline", "[config]") {
    TempDir dir;
    dir.write("up.pass", "hunter2\r\n");
    std::string json = replace(minimal, R"("node_id")",
                               R"("upstream": {"uri": "tcp://cloud:1883", "username": "gw",
                                               "password_file": "up.pass",
                                               "allow_plaintext_password": true}, "node_id")");
    auto loaded = parse_config(json, dir.path.string());
    INFO((loaded ? std::string() : config::format_errors(loaded.error())));
    REQUIRE(loaded.has_value());
    REQUIRE(loaded->upstream.has_value());
    CHECK(loaded->upstream->password == "hunter2");
    CHECK(loaded->upstream->client_id == "gw-01");
    CHECK(loaded->upstream->topic == "tidemark/{node_id}/{pipeline}");
}

TEST_CASE("the shipped example configs load", "[config]") {
    const char* source = std::getenv("TIDEMARK_SOURCE_DIR");
    REQUIRE(source != nullptr);
    fs::path examples = fs::path(source) / "examples";

    auto demo = config::load_config_file((examples / "demo.json").string());
    INFO((demo ? std::string() : config::format_errors(demo.error())));
    REQUIRE(demo.has_value());
    CHECK(demo->pipelines.size() == 3);

    // The service example names secrets under /etc/tidemark, which a build machine lacks: those
    // are its only errors.
    auto service = config::load_config_file((examples / "tidemark.json").string());
    if (!service) {
        INFO(config::format_errors(service.error()));
        for (const auto& e : service.error()) {
            CHECK(e.message.starts_with("cannot read the "));
            CHECK(e.message.find("\"/etc/tidemark/") != std::string::npos);
        }
    }
}

TEST_CASE("a missing config file is one error naming it", "[config]") {
    auto loaded = config::load_config_file("/nonexistent/tidemark.json");
    REQUIRE_FALSE(loaded.has_value());
    REQUIRE(loaded.error().size() == 1);
    CHECK(loaded.error()[0].message ==
          "cannot read the config file \"/nonexistent/tidemark.json\": No such file or directory");
}

TEST_CASE("upstream.reconnect_max bounds the wait between connect attempts", "[config]") {
    const std::string with_upstream = replace(
        minimal, R"("pipelines")",
        R"("upstream": {"uri": "tcp://127.0.0.1:1884", "reconnect_max": "5s"}, "pipelines")");
    auto loaded = parse_config(with_upstream, "/");
    REQUIRE(loaded);
    CHECK(loaded->upstream->reconnect_max_ms == 5'000);
    auto defaults = parse_config(replace(with_upstream, R"(, "reconnect_max": "5s")", ""), "/");
    REQUIRE(defaults);
    CHECK(defaults->upstream->reconnect_max_ms == 1'500);  // first row within 2 s of recovery
    CHECK_THAT(
        only_error(replace(with_upstream, R"("5s")", R"("100ms")"), "/upstream/reconnect_max"),
        Catch::Contains("between 250ms and 1h"));
}
