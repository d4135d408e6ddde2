// The readers' shared messages, the broker URI parse, the 32-bit map limit and health.upstream.
#include <algorithm>
#include <catch2/catch.hpp>
#include <string>

#include "adapters/config/config.h"
#include "tests/adapters/config/config_support.h"

using namespace tidemark;
using config::parse_config;
using test::minimal;
using test::only_error;
using test::replace;

TEST_CASE("every reader names the JSON path and says what it expected", "[config]") {
    const std::string with_upstream = replace(
        minimal, R"("pipelines")", R"("upstream": {"uri": "tcp://127.0.0.1:1884"}, "pipelines")");
    SECTION("a duration, a size, an integer, a boolean, a number of the wrong type") {
        CHECK(only_error(replace(minimal, R"("size": "1m")", R"("size": 60)"),
                         "/pipelines/0/window/size") ==
              "expected a duration string such as \"5s\", found the number 60");
        CHECK(only_error(replace(minimal, R"("uri")", R"("max_payload": 1024, "uri")"),
                         "/source/max_payload") ==
              "expected a size string such as \"64MiB\", found the number 1024");
        CHECK(only_error(replace(with_upstream, R"("uri": "tcp://127.0.0.1:1884")",
                                 R"("uri": "tcp://127.0.0.1:1884", "qos": "1")"),
                         "/upstream/qos") == "expected an integer, found the string \"1\"");
        CHECK(only_error(replace(with_upstream, R"("uri": "tcp://127.0.0.1:1884")",
                                 R"("uri": "tcp://127.0.0.1:1884", "compact_superseded": "yes")"),
                         "/upstream/compact_superseded") ==
              "expected true or false, found the string \"yes\"");
        CHECK(only_error(replace(minimal, R"({"fn": "count"})",
                                 R"({"fn": "quantile", "field": "temp", "q": "high"})"),
                         "/pipelines/0/aggregates/n/q") ==
              "expected a number, found the string \"high\"");
    }
    SECTION("values out of range or not among the choices") {
        CHECK(only_error(replace(with_upstream, R"("uri": "tcp://127.0.0.1:1884")",
                                 R"("uri": "tcp://127.0.0.1:1884", "qos": 2)"),
                         "/upstream/qos") == "must be between 0 and 1, not 2");
        CHECK(
            only_error(
                replace(minimal, R"("node_id")", R"("storage": {"fsync": "sometimes"}, "node_id")"),
                "/storage/fsync") == "\"sometimes\" is not one of always, interval, never");
        CHECK(only_error(replace(minimal, R"("size": "1m")", R"("size": "0s")"),
                         "/pipelines/0/window/size") == "\"0s\" must be more than 0");
        CHECK(only_error(replace(minimal, R"("uri")", R"("max_payload": "8B", "uri")"),
                         "/source/max_payload") ==
              "\"8B\" is out of range: use between 16B and 256MiB");
    }
    SECTION("a section that is not an object, at any depth") {
        CHECK(only_error(replace(minimal, R"("node_id")", R"("storage": [], "node_id")"),
                         "/storage") ==
              "expected an object such as {\"map_size\": \"1GiB\", \"fsync\": \"interval\"}, "
              "found an array");
        CHECK(only_error(replace(minimal, R"("node_id")",
                                 R"("storage": {"log_retention": "7d"}, "node_id")"),
                         "/storage/log_retention") ==
              "expected an object such as {\"max_age\": \"7d\", \"max_bytes\": \"512MiB\"}, found "
              "the string \"7d\"");
    }
    SECTION("a required field inside a section") {
        CHECK(only_error(
                  replace(minimal, R"("type": "tumbling", "size": "1m")", R"("type": "tumbling")"),
                  "/pipelines/0/window/size") == "is required: the window length, e.g. \"1m\"");
    }
    SECTION("a key with '/' or '~' is escaped in the pointer (RFC 6901)") {
        CHECK(only_error(
                  replace(minimal, R"({"temp": "/temp"})", R"({"temp": "/temp", "a/b~c": "/x"})"),
                  "/pipelines/0/fields/a~1b~0c") ==
              "\"a/b~c\" is not a field name: use 1 to 64 letters, digits, '-', '_' or '.'");
    }
}

TEST_CASE("a broker URI is parsed once into host, port and transport", "[config]") {
    using config::Endpoint;
    CHECK(config::parse_broker_uri("tcp://127.0.0.1:1883") == Endpoint{false, "127.0.0.1", 1883});
    CHECK(config::parse_broker_uri("ssl://cloud.example:8883") ==
          Endpoint{true, "cloud.example", 8883});
    CHECK(config::parse_broker_uri("ssl://[::1]:8883") == Endpoint{true, "::1", 8883});
    CHECK(config::parse_broker_uri("tcp://h:1") == Endpoint{false, "h", 1});
    CHECK(config::parse_broker_uri("tcp://h:65535") == Endpoint{false, "h", 65535});
    for (const char* bad :
         {"tcp://h:0", "tcp://h:65536", "tcp://h:", "tcp://h:x", "tcp://h:-1", "tcp://h:18 83"}) {
        INFO(bad);
        auto parsed = config::parse_broker_uri(bad);
        REQUIRE_FALSE(parsed.has_value());
        CHECK(parsed.error() == "\"" + std::string(bad) + "\" has an invalid port: use 1 to 65535");
    }
    CHECK_THAT(config::parse_broker_uri("tcp://:1883").error(), Catch::Contains("has no host"));
    CHECK_THAT(config::parse_broker_uri("ssl://[]:8883").error(), Catch::Contains("has no host"));
    CHECK_THAT(config::parse_broker_uri("tcp://h").error(), Catch::Contains("has no port"));
    CHECK_THAT(config::parse_broker_uri("ssl://[::1]").error(), Catch::Contains("has no port"));
    CHECK(config::parse_broker_uri("mqtt://h:1883").error() ==
          "\"mqtt://h:1883\" is not a broker URI: use tcp:// or ssl:// followed by host:port, as "
          "in \"tcp://127.0.0.1:1883\"");
    CHECK_THAT(config::parse_broker_uri("TCP://h:1883").error(),
               Catch::Contains("is not a broker URI"));

    // The config carries both: the text for messages and health, the parts for the clients.
    auto loaded =
        parse_config(replace(minimal, R"("pipelines")",
                             R"("upstream": {"uri": "ssl://cloud.example:8883"}, "pipelines")"),
                     "/");
    INFO((loaded ? std::string() : config::format_errors(loaded.error())));
    REQUIRE(loaded.has_value());
    CHECK(loaded->source.uri == "tcp://127.0.0.1:1883");
    CHECK(loaded->source.endpoint == Endpoint{false, "127.0.0.1", 1883});
    CHECK(loaded->upstream->endpoint == Endpoint{true, "cloud.example", 8883});
}

TEST_CASE("a 32-bit gateway refuses an LMDB map it cannot address", "[config]") {
    const auto with_map = [](const std::string& size) {
        return replace(minimal, R"("node_id")",
                       R"("storage": {"map_size": ")" + size + R"("}, "node_id")");
    };
    // The default fits everywhere: a 32-bit gateway runs with no storage section.
    CHECK(config::StorageConfig{}.map_size_bytes <= config::map_size_max_bytes(4));
    CHECK(parse_config(minimal, "/", 4).has_value());
    CHECK(parse_config(with_map("1GiB"), "/", 4).has_value());

    const std::string two_gib = with_map("2GiB");
    CHECK(parse_config(two_gib, "/", 8).has_value());
    auto refused = parse_config(two_gib, "/", 4);
    REQUIRE_FALSE(refused.has_value());
    INFO(config::format_errors(refused.error()));
    REQUIRE(refused.error().size() == 1);  // no budget against a map that cannot open
    CHECK(refused.error()[0].pointer == "/storage/map_size");
    CHECK(refused.error()[0].message ==
          "storage.map_size 2GiB > 1GiB, the most a 32-bit gateway can map (LMDB maps the "
          "whole file as one piece of the 4GiB address space that the program, its libraries, "
          "stacks and heap share): set storage.map_size to 1GiB or less, and if the pipelines' "
          "state or the outbox then does not fit in half of it, lower "
          "limits.max_open_windows or upstream.outbox.max_bytes");
    CHECK(config::check_map_size((1ULL << 30) + 1, 4).has_value());
    CHECK_FALSE(config::check_map_size(1ULL << 30, 4).has_value());
    CHECK_FALSE(config::check_map_size(1ULL << 40, 8).has_value());
}

TEST_CASE("upstream.uri is one address or a cluster's list, each checked", "[config][fleet]") {
    using config::Endpoint;
    const auto with_uri = [](const std::string& uri) {
        return replace(minimal, R"("pipelines")",
                       R"("upstream": {"uri": )" + uri + R"(}, "pipelines")");
    };
    auto loaded = parse_config(
        with_uri(R"(["tcp://127.0.0.1:4001", "tcp://127.0.0.1:4002", "tcp://[::1]:4003"])"), "/");
    INFO((loaded ? std::string() : config::format_errors(loaded.error())));
    REQUIRE(loaded.has_value());
    REQUIRE(loaded->upstream->endpoints.size() == 3);
    CHECK(loaded->upstream->endpoints[2] == Endpoint{false, "::1", 4003});
    CHECK(loaded->upstream->endpoint == Endpoint{false, "127.0.0.1", 4001});  // the first
    CHECK(loaded->upstream->uri == "tcp://127.0.0.1:4001, tcp://127.0.0.1:4002, tcp://[::1]:4003");

    // A single string stays valid.
    loaded = parse_config(with_uri(R"("tcp://127.0.0.1:4001")"), "/");
    REQUIRE(loaded.has_value());
    CHECK(loaded->upstream->endpoints.size() == 1);

    // Every address is checked, by its own pointer.
    CHECK_THAT(only_error(with_uri(R"(["tcp://127.0.0.1:4001", "tcp://h"])"), "/upstream/uri/1"),
               Catch::Contains("has no port"));
    CHECK_THAT(only_error(with_uri(R"(["tcp://127.0.0.1:4001", 7])"), "/upstream/uri/1"),
               Catch::Contains("expected a broker URI"));
    CHECK_THAT(only_error(with_uri(R"(["tcp://a:1", "tcp://a:1"])"), "/upstream/uri/1"),
               Catch::Contains("twice"));
    CHECK_THAT(only_error(with_uri("[]"), "/upstream/uri"), Catch::Contains("1 to 16"));
    CHECK_THAT(only_error(with_uri(R"(["ssl://a:8883", "tcp://b:1883"])"), "/upstream/uri"),
               Catch::Contains("mixes ssl:// and tcp://"));
    // One tls section for every address: each must be ssl://.
    const auto errors = test::errors_of(replace(
        minimal, R"("pipelines")",
        R"("upstream": {"uri": ["ssl://a:8883", "tcp://b:1883"], "tls": {}}, "pipelines")"));
    INFO(config::format_errors(errors));
    CHECK(std::any_of(errors.begin(), errors.end(), [](const config::ConfigError& e) {
        return e.pointer == "/upstream/tls" &&
               e.message.find("\"tcp://b:1883\" is not an encrypted") != std::string::npos;
    }));
}

TEST_CASE("health.upstream is off by default, needs an upstream, and owns its topic there",
          "[config][health]") {
    const std::string upstream = R"("upstream": {"uri": "tcp://127.0.0.1:1884"},)";
    const std::string with_upstream =
        replace(minimal, R"("pipelines")", upstream + R"("pipelines")");
    SECTION("off by default") {
        auto c = config::parse_config(with_upstream, "/");
        REQUIRE(c);
        CHECK_FALSE(c->health.upstream);
    }
    SECTION("true with an upstream") {
        auto c = config::parse_config(replace(with_upstream, R"("pipelines")",
                                              R"("health": {"upstream": true}, "pipelines")"),
                                      "/");
        REQUIRE(c);
        CHECK(c->health.upstream);
    }
    SECTION("true without an upstream is refused, saying what to do") {
        const std::string msg = only_error(
            replace(minimal, R"("pipelines")", R"("health": {"upstream": true}, "pipelines")"),
            "/health/upstream");
        CHECK(msg.find("needs an upstream section") != std::string::npos);
    }
    SECTION("not a boolean") {
        only_error(replace(with_upstream, R"("pipelines")",
                           R"("health": {"upstream": "yes"}, "pipelines")"),
                   "/health/upstream");
    }
    SECTION("a pipeline whose results topic is the health topic is refused") {
        std::string text = replace(with_upstream, R"("pipelines")",
                                   R"("health": {"upstream": true}, "pipelines")");
        text = replace(text, R"("name": "p")", R"("name": "health")");
        const std::string msg = only_error(text, "/health/upstream");
        CHECK(msg.find("tidemark/gw-01/health") != std::string::npos);
        CHECK(msg.find("/pipelines/0") != std::string::npos);
        // Without health.upstream the two are on different brokers: no conflict.
        CHECK(config::parse_config(replace(with_upstream, R"("name": "p")", R"("name": "health")"),
                                   "/"));
    }
}
