// Issue 25: what check-config must refuse, with the arithmetic, because the running service
// would wedge on it: a max_payload the log cannot hold (finding 2), a store whose parts fit the
// map one by one but not together (finding 6), a password sent in clear text, and a second,
// wrong error after an outbox bound below its minimum (finding 8).
#include <catch2/catch.hpp>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "adapters/config/config.h"
#include "core/aggregate.h"
#include "tests/adapters/config/config_support.h"

using namespace tidemark;
using config::parse_config;
using test::errors_of;
using test::minimal;
using test::only_error;
using test::replace;

namespace {

std::string with_source(const std::string& extra) {
    return replace(minimal, R"("uri": "tcp://127.0.0.1:1883")",
                   R"("uri": "tcp://127.0.0.1:1883", )" + extra);
}

// The bytes one open window of `minimal`'s pipeline counts in the map budget.
uint64_t window_bytes() {
    auto c = parse_config(minimal, "/");
    REQUIRE(c);
    const auto& spec = c->pipelines[0].spec;
    return core::AggregateSet(spec.aggregates, spec.quantile).bytes_per_window() +
           config::window_overhead_bytes;
}

// `minimal` with a map, an upstream outbox (none when empty) and as many windows as make
// `state_bytes`.
std::string store_config(const std::string& map, const std::string& outbox, uint64_t state_bytes) {
    const uint64_t windows = state_bytes / window_bytes();
    const std::string upstream = outbox.empty() ? std::string()
                                                : R"("upstream": {"uri": "tcp://127.0.0.1:1884",
                                                       "outbox": {"max_bytes": ")" +
                                                      outbox + R"("}}, )";
    std::string json =
        replace(minimal, R"("node_id")",
                R"("storage": {"map_size": ")" + map + R"("}, )" + upstream + R"("node_id")");
    return replace(json, R"("aggregates": {"n": {"fn": "count"}})",
                   R"("aggregates": {"n": {"fn": "count"}},
                      "limits": {"max_keys": 1, "max_open_windows": )" +
                       std::to_string(windows) + "}");
}

}  // namespace

TEST_CASE("source.max_payload above what the log can hold is refused, with the arithmetic",
          "[config][hostile]") {
    // The log holds a record of at most 16 MiB, topic included: 16 MiB - 64 KiB of payload.
    CHECK(config::SourceConfig::max_payload_bytes_limit == 16'711'680);
    const std::string message =
        only_error(with_source(R"("max_payload": "32MiB")"), "/source/max_payload");
    CHECK_THAT(message, Catch::StartsWith("32MiB is more than the log can hold"));
    CHECK_THAT(message, Catch::Contains("16MiB - 64KiB = 16711680 bytes"));
    CHECK_THAT(message, Catch::EndsWith("lower source.max_payload"));
    CHECK(only_error(with_source(R"("max_payload": "16321KiB")"), "/source/max_payload")
              .starts_with("16321KiB is more than the log can hold"));

    auto at_limit = parse_config(with_source(R"("max_payload": "16320KiB")"), "/");
    INFO((at_limit ? std::string() : config::format_errors(at_limit.error())));
    REQUIRE(at_limit);
    CHECK(at_limit->source.max_payload_bytes == 16'711'680);
}

TEST_CASE("state, outbox, side output and LMDB's overhead are summed against the map",
          "[config][hostile]") {
    // The issue's case: each part alone fits (the outbox half the map; the state 48.5 % of it
    // with the backfill's second version, under three quarters), together they do not.
    const uint64_t map = uint64_t{1} << 30;
    const std::string message =
        only_error(store_config("1GiB", "512MiB", map / 2000 * 485), "/storage/map_size");
    INFO(message);
    CHECK_THAT(message, Catch::StartsWith("the store holds at once the pipelines' state "));
    CHECK_THAT(message, Catch::Contains("the largest pipeline's second version, while it "
                                        "backfills"));
    CHECK_THAT(message, Catch::Contains("2 x 512MiB (upstream.outbox.max_bytes"));
    CHECK_THAT(message, Catch::Contains("2 x 16MiB (side output"));
    CHECK_THAT(message, Catch::Contains("4MiB (LMDB's reserve for deletes"));
    CHECK_THAT(message, Catch::Contains("more than storage.map_size 1GiB"));
    CHECK_THAT(message, Catch::Contains("map_full pauses ingest"));

    // 256 MiB of map: state 80 MiB (160 MiB while backfilling: under three quarters) beside a
    // 64 MiB outbox (a quarter) is 160 + 128 + 32 + 4 = 324 MiB: refused. A 32 MiB outbox: 260
    // MiB, still refused; a 16 MiB one: 228 MiB, taken.
    const uint64_t state = uint64_t{80} << 20;
    CHECK(only_error(store_config("256MiB", "64MiB", state), "/storage/map_size")
              .find("raise storage.map_size to at least ") != std::string::npos);
    CHECK_FALSE(parse_config(store_config("256MiB", "32MiB", state), "/").has_value());
    auto fits = parse_config(store_config("256MiB", "16MiB", state), "/");
    INFO((fits ? std::string() : config::format_errors(fits.error())));
    CHECK(fits.has_value());

    // Without an upstream there is no outbox to count; side output and the reserve still are.
    CHECK(parse_config(store_config("256MiB", "", state), "/").has_value());
}

TEST_CASE("an outbox bound below its minimum is one error, not a second about the default",
          "[config][hostile]") {
    // The refused value left the default 256MiB in its place, which is more than half of a
    // 256MiB map: that used to be reported too.
    const auto errors = errors_of(store_config("256MiB", "512KiB", uint64_t{10} << 20));
    INFO(config::format_errors(errors));
    REQUIRE(errors.size() == 1);
    CHECK(errors[0].pointer == "/upstream/outbox/max_bytes");
}

TEST_CASE("a password over tcp:// to another host is refused unless the config allows it",
          "[config][hostile]") {
    const std::string dir = (std::filesystem::temp_directory_path() / "tm-config-hostile").string();
    std::filesystem::create_directories(dir);
    std::ofstream(dir + "/pass") << "s3cret\n";
    const auto upstream = [](const std::string& uri, const std::string& extra) {
        return replace(minimal, R"("node_id")",
                       R"("upstream": {"uri": ")" + uri +
                           R"(", "username": "gw", "password_file": "pass")" + extra +
                           R"(}, "node_id")");
    };
    auto refused = parse_config(upstream("tcp://cloud.example:1883", ""), dir);
    REQUIRE_FALSE(refused);
    INFO(config::format_errors(refused.error()));
    REQUIRE(refused.error().size() == 1);
    CHECK(refused.error()[0].pointer == "/upstream/password_file");
    CHECK_THAT(refused.error()[0].message,
               Catch::StartsWith("the password would go to cloud.example in clear text"));
    CHECK_THAT(refused.error()[0].message, Catch::Contains("\"allow_plaintext_password\": true"));

    CHECK(parse_config(
              upstream("tcp://cloud.example:1883", R"(, "allow_plaintext_password": true)"), dir)
              .has_value());
    CHECK(parse_config(upstream("tcp://127.0.0.1:1883", ""), dir).has_value());
    CHECK(parse_config(upstream("tcp://localhost:1883", ""), dir).has_value());
    // The source is checked the same way.
    auto source = parse_config(
        replace(minimal, R"("uri": "tcp://127.0.0.1:1883")",
                R"("uri": "tcp://10.0.0.7:1883", "username": "tm", "password_file": "pass")"),
        dir);
    REQUIRE_FALSE(source);
    CHECK(source.error()[0].pointer == "/source/password_file");
}
