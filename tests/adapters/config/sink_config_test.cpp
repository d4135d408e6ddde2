// The sink's config is read as strictly as the gateway's: every unknown key and bad value is an
// error naming its JSON pointer, and the defaults are DESIGN.md section 10's.
#include "adapters/config/sink_config.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "tests/adapters/config/config_support.h"
#include "tests/support/broker.h"

using namespace tidemark;
using tidemark::test::replace;

namespace {

const std::string minimal_sink = R"({"sink": {
  "source": {"uri": "tcp://127.0.0.1:1883"},
  "postgres": {"conninfo": "host=127.0.0.1 dbname=telemetry user=tidemark"}
}})";

// minimal_sink with one more section, e.g. R"("spool": {...})".
std::string with_section(const std::string& section) {
    return replace(minimal_sink, R"(user=tidemark"})", R"(user=tidemark"}, )" + section);
}

std::vector<config::ConfigError> sink_errors(const std::string& json,
                                             const std::string& base = "/") {
    auto result = config::parse_sink_config(json, base);
    REQUIRE_FALSE(result.has_value());
    return result.error();
}

std::string only_sink_error(const std::string& json, const std::string& pointer) {
    auto errors = sink_errors(json);
    INFO(config::format_errors(errors));
    REQUIRE(errors.size() == 1);
    CHECK(errors[0].pointer == pointer);
    return errors[0].message;
}

}  // namespace

TEST_CASE("the smallest sink config loads, with DESIGN.md's defaults", "[config][sink]") {
    auto loaded = config::parse_sink_config(minimal_sink, "/");
    INFO((loaded ? "" : config::format_errors(loaded.error())));
    REQUIRE(loaded.has_value());
    const config::SinkConfig& c = *loaded;
    CHECK(c.source.endpoint.host == "127.0.0.1");
    CHECK(c.source.endpoint.port == 1883);
    CHECK(c.source.client_id == "tidemark-sink");
    CHECK(c.source.topics == std::vector<std::string>{"tidemark/#"});
    CHECK(c.postgres.schema == "tidemark");
    CHECK(c.health_topic() == "tidemark-sink/tidemark-sink/health");
    CHECK(c.health.interval_ms == 10'000);
    CHECK(c.spool.dir == "/var/lib/tidemark-sink/spool");
    CHECK(c.spool.max_bytes == 256ULL << 20);
    CHECK(c.spool.fsync == config::FsyncPolicy::interval);
    CHECK(c.batch.max_rows == 1000);
    CHECK(c.batch.max_delay_ms == 50);
}

TEST_CASE("DESIGN.md's example sink config loads", "[config][sink]") {
    test::TempDir dir("tidemark-sinkcfg");
    const std::string pass = dir.path() + "/sink.pass";
    const std::string pg_pass = dir.path() + "/pg.pass";
    std::ofstream(pass) << "secret\n";
    std::ofstream(pg_pass) << "pg-secret\n";
    const std::string json = R"({"sink": {
      "source": {"uri": "tcp://127.0.0.1:1883", "client_id": "tidemark-sink-1",
                 "topics": ["tidemark/#"], "username": "sink", "password_file": ")" +
                             pass + R"("},
      "postgres": {"conninfo": "host=127.0.0.1 port=5432 dbname=telemetry user=tidemark",
                   "password_file": ")" +
                             pg_pass + R"(", "schema": "tidemark"},
      "health": {"topic": "tidemark-sink/{client_id}/health", "interval": "10s"}}})";
    auto loaded = config::parse_sink_config(json, dir.path());
    INFO((loaded ? "" : config::format_errors(loaded.error())));
    REQUIRE(loaded.has_value());
    CHECK(loaded->source.password == "secret");
    CHECK(loaded->postgres.password == "pg-secret");
    CHECK(loaded->health_topic() == "tidemark-sink/tidemark-sink-1/health");
}

TEST_CASE("sink config errors name their JSON pointer", "[config][sink]") {
    CHECK(only_sink_error(replace(minimal_sink, R"("uri")", R"("uri": "tcp://h:1", "url")"),
                          "/sink/source/url")
              .find("did you mean") != std::string::npos);
    CHECK(only_sink_error(replace(minimal_sink, R"({"sink": {)", R"({"sink": {"extra": 1,)"),
                          "/sink/extra")
              .find("allowed keys") != std::string::npos);
    CHECK(only_sink_error(replace(minimal_sink, R"({"sink": {)", R"({"node_id": "x", "sink": {)"),
                          "/node_id")
              .find("in a sink config") != std::string::npos);
    CHECK(only_sink_error(replace(minimal_sink, "tcp://127.0.0.1:1883", "mqtt://h:1"),
                          "/sink/source/uri")
              .find("tcp://") != std::string::npos);
    CHECK(only_sink_error(replace(minimal_sink, R"("uri": "tcp://127.0.0.1:1883")",
                                  R"("uri": "tcp://h:1", "topics": ["a/#/b"])"),
                          "/sink/source/topics/0")
              .find("'#'") != std::string::npos);
    CHECK(only_sink_error(replace(minimal_sink, R"("uri": "tcp://127.0.0.1:1883")",
                                  R"("uri": "tcp://h:1", "topics": ["$share//x"])"),
                          "/sink/source/topics/0")
              .find("$share/GROUP/FILTER") != std::string::npos);
    CHECK(only_sink_error(replace(minimal_sink, R"("uri": "tcp://127.0.0.1:1883")",
                                  R"("uri": "tcp://h:1", "topics": [])"),
                          "/sink/source/topics")
              .find("1 to 64") != std::string::npos);
    CHECK(only_sink_error(replace(minimal_sink, R"("uri": "tcp://127.0.0.1:1883")",
                                  R"("uri": "tcp://h:1", "password": "x")"),
                          "/sink/source/password")
              .find("password_file") != std::string::npos);
    CHECK(only_sink_error(replace(minimal_sink, "user=tidemark", "user=tidemark password=x"),
                          "/sink/postgres/conninfo")
              .find("password_file") != std::string::npos);
    CHECK(
        only_sink_error(replace(minimal_sink, R"("host=127.0.0.1 dbname=telemetry user=tidemark")",
                                R"("postgresql://tidemark:secret@db/telemetry")"),
                        "/sink/postgres/conninfo")
            .find("password_file") != std::string::npos);
    CHECK(only_sink_error(replace(minimal_sink, R"(user=tidemark")",
                                  R"(user=tidemark", "schema": "Tide Mark")"),
                          "/sink/postgres/schema")
              .find("schema name") != std::string::npos);
    CHECK(only_sink_error(replace(minimal_sink, R"(user=tidemark")",
                                  R"(user=tidemark", "password_file": "/nonexistent/pg.pass")"),
                          "/sink/postgres/password_file")
              .find("/nonexistent/pg.pass") != std::string::npos);
    CHECK(
        only_sink_error(with_section(R"("spool": {"max_bytes": "1MiB"})"), "/sink/spool/max_bytes")
            .size() > 0);
    CHECK(only_sink_error(with_section(R"("spool": {"fsync": "sometimes"})"), "/sink/spool/fsync")
              .find("always") != std::string::npos);
    CHECK(only_sink_error(with_section(R"("batch": {"max_rows": 0})"), "/sink/batch/max_rows")
              .size() > 0);
    CHECK(only_sink_error(with_section(R"("batch": {"max_delay": "1m"})"), "/sink/batch/max_delay")
              .find("10s") != std::string::npos);
    CHECK(
        only_sink_error(with_section(R"("health": {"topic": "x/{node_id}"})"), "/sink/health/topic")
            .find("{client_id}") != std::string::npos);
    CHECK(only_sink_error(with_section(R"("health": {"topic": "tidemark/sink/health"})"),
                          "/sink/health/topic")
              .find("its own health") != std::string::npos);
    CHECK(only_sink_error(R"({"sink": {"source": {"uri": "tcp://h:1"}}})", "/sink/postgres")
              .find("required") != std::string::npos);
    CHECK(
        only_sink_error(
            R"({"sink": {"source": {"uri": "tcp://h:1"}, "postgres": {"conninfo": "a"}, "postgres": {"conninfo": "b"}}})",
            "/sink/postgres")
            .find("twice") != std::string::npos);
}

TEST_CASE("every error of a sink config at once", "[config][sink]") {
    const auto errors = sink_errors(R"({"sink": {"source": {"uri": "bad", "topics": [1]},
        "postgres": {"conninfo": ""}, "batch": {"max_rows": -1}, "log_level": "loud"}})");
    INFO(config::format_errors(errors));
    std::vector<std::string> pointers;
    for (const auto& e : errors)
        pointers.push_back(e.pointer);
    CHECK(pointers == std::vector<std::string>{"/sink/source/uri", "/sink/source/topics/0",
                                               "/sink/postgres/conninfo", "/sink/batch/max_rows",
                                               "/sink/log_level"});
}

TEST_CASE("a sink config file is recognised by its top-level key", "[config][sink]") {
    test::TempDir dir("tidemark-sinkcfg");
    const std::string sink = dir.path() + "/sink.json";
    const std::string gateway = dir.path() + "/gateway.json";
    std::ofstream(sink) << minimal_sink;
    std::ofstream(gateway) << test::minimal;
    CHECK(config::is_sink_config_file(sink));
    CHECK_FALSE(config::is_sink_config_file(gateway));
    CHECK_FALSE(config::is_sink_config_file(dir.path() + "/missing.json"));
    CHECK(config::load_sink_config_file(sink).has_value());
}

TEST_CASE("examples/sink.json, the example the package ships, loads", "[config][sink]") {
    const char* source = std::getenv("TIDEMARK_SOURCE_DIR");
    REQUIRE(source != nullptr);
    auto loaded = config::load_sink_config_file(std::string(source) + "/examples/sink.json");
    INFO((loaded ? "" : config::format_errors(loaded.error())));
    CHECK(loaded.has_value());
}

TEST_CASE("the sink's source.uri is one address or a cluster's list; protocol 3.1.1 for NATS",
          "[config][sink][fleet]") {
    auto loaded = config::parse_sink_config(
        replace(minimal_sink, R"("uri": "tcp://127.0.0.1:1883")",
                R"("uri": ["tcp://127.0.0.1:4001", "tcp://127.0.0.1:4002"], "protocol": "3.1.1")"),
        "/");
    INFO((loaded ? "" : config::format_errors(loaded.error())));
    REQUIRE(loaded.has_value());
    REQUIRE(loaded->source.endpoints.size() == 2);
    CHECK(loaded->source.endpoints[1].port == 4002);
    CHECK(loaded->source.protocol == config::SinkProtocol::v3_1_1);
    CHECK(config::parse_sink_config(minimal_sink, "/")->source.protocol ==
          config::SinkProtocol::v5);
    CHECK_THAT(only_sink_error(replace(minimal_sink, R"("uri": "tcp://127.0.0.1:1883")",
                                       R"("uri": ["tcp://127.0.0.1:4001", "udp://x:1"])"),
                               "/sink/source/uri/1"),
               Catch::Contains("is not a broker URI"));
    CHECK_THAT(only_sink_error(replace(minimal_sink, R"("uri": "tcp://127.0.0.1:1883")",
                                       R"("uri": "tcp://127.0.0.1:1883", "protocol": "4")"),
                               "/sink/source/protocol"),
               Catch::Contains("3.1.1"));
}
