#include "core/duration.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <limits>
#include <string>

using tidemark::core::format_duration;
using tidemark::core::format_size;
using tidemark::core::parse_duration_ms;
using tidemark::core::parse_size_bytes;

namespace {

// The error message of a parse that must fail.
template <typename R>
std::string error_of(const R& result) {
    REQUIRE_FALSE(result.has_value());
    return result.error().message;
}

}  // namespace

TEST_CASE("durations parse in every unit", "[duration]") {
    CHECK(parse_duration_ms("250ms") == 250);
    CHECK(parse_duration_ms("5s") == 5'000);
    CHECK(parse_duration_ms("1m") == 60'000);
    CHECK(parse_duration_ms("1h") == 3'600'000);
    CHECK(parse_duration_ms("1d") == 86'400'000);
    CHECK(parse_duration_ms("7d") == 7 * 86'400'000LL);
    CHECK(parse_duration_ms("0s") == 0);
    CHECK(parse_duration_ms("0ms") == 0);
    CHECK(parse_duration_ms("007s") == 7'000);
}

TEST_CASE("the largest durations parse and one more is refused", "[duration]") {
    constexpr int64_t max = std::numeric_limits<int64_t>::max();
    CHECK(parse_duration_ms("9223372036854775807ms") == max);
    CHECK(parse_duration_ms("106751991167d") == 106751991167LL * 86'400'000LL);
    CHECK_THAT(error_of(parse_duration_ms("9223372036854775808ms")),
               Catch::Contains("\"9223372036854775808ms\"") && Catch::Contains("too large"));
    CHECK_THAT(error_of(parse_duration_ms("106751991168d")), Catch::Contains("too large"));
    CHECK_THAT(error_of(parse_duration_ms("99999999999999999999999s")),
               Catch::Contains("too large"));
}

TEST_CASE("every malformed duration is refused with the text and the units", "[duration]") {
    for (const char* text : {"", "-5s", "+5s", "5", "5x", "5 s", " 5s", "5s ", "1.5s", "5S", "s",
                             "5sec", "5mss", "1e3ms", "0x10s", "5,0s"}) {
        INFO("text: \"" << text << "\"");
        const std::string message = error_of(parse_duration_ms(text));
        if (*text != '\0') CHECK_THAT(message, Catch::Contains(std::string("\"") + text + "\""));
        CHECK_THAT(message, Catch::Contains("ms, s, m, h, d"));
    }
    CHECK_THAT(error_of(parse_duration_ms("-5s")), Catch::Contains("negative"));
    CHECK_THAT(error_of(parse_duration_ms("5")), Catch::Contains("no unit"));
    CHECK_THAT(error_of(parse_duration_ms("5x")), Catch::Contains("unknown unit \"x\""));
    CHECK_THAT(error_of(parse_duration_ms("1.5s")), Catch::Contains("whole number"));
    CHECK_THAT(error_of(parse_duration_ms("")), Catch::Contains("empty"));
}

TEST_CASE("sizes parse in binary and decimal units", "[size]") {
    CHECK(parse_size_bytes("0B") == 0u);
    CHECK(parse_size_bytes("10B") == 10u);
    CHECK(parse_size_bytes("64KiB") == 65'536u);
    CHECK(parse_size_bytes("256MiB") == 256u * 1024 * 1024);
    CHECK(parse_size_bytes("1GiB") == 1'073'741'824u);
    CHECK(parse_size_bytes("2TiB") == 2ull << 40);
    CHECK(parse_size_bytes("5KB") == 5'000u);
    CHECK(parse_size_bytes("2MB") == 2'000'000u);
    CHECK(parse_size_bytes("3GB") == 3'000'000'000u);
    CHECK(parse_size_bytes("1TB") == 1'000'000'000'000u);
    CHECK(parse_size_bytes("18446744073709551615B") == std::numeric_limits<uint64_t>::max());
    CHECK(parse_size_bytes("16777215TiB") == 16777215ull << 40);
}

TEST_CASE("every malformed or too large size is refused with the text and the units", "[size]") {
    for (const char* text :
         {"", "-1B", "64", "64kib", "64 KiB", "64KiB ", "1.5GiB", "KiB", "1Gb", "1G", "1iB"}) {
        INFO("text: \"" << text << "\"");
        const std::string message = error_of(parse_size_bytes(text));
        if (*text != '\0') CHECK_THAT(message, Catch::Contains(std::string("\"") + text + "\""));
        CHECK_THAT(message, Catch::Contains("B, KiB, MiB, GiB, TiB"));
    }
    CHECK_THAT(error_of(parse_size_bytes("16777216TiB")), Catch::Contains("too large"));
    CHECK_THAT(error_of(parse_size_bytes("18446744073709551616B")), Catch::Contains("too large"));
}

TEST_CASE("durations format in the largest exact unit", "[duration]") {
    CHECK(format_duration(60'000) == "1m");
    CHECK(format_duration(1'500) == "1500ms");
    CHECK(format_duration(90'000) == "90s");
    CHECK(format_duration(7'200'000) == "2h");
    CHECK(format_duration(86'400'000) == "1d");
    CHECK(format_duration(0) == "0s");
    CHECK(format_duration(-5'000) == "-5s");
    CHECK(format_duration(std::numeric_limits<int64_t>::min()) == "-9223372036854775808ms");
    for (int64_t ms : {int64_t{1}, int64_t{999}, int64_t{1'000}, int64_t{61'000},
                       int64_t{3'600'000} * 25, std::numeric_limits<int64_t>::max()}) {
        CHECK(parse_duration_ms(format_duration(ms)) == ms);
    }
}

TEST_CASE("sizes format exactly", "[size]") {
    CHECK(format_size(1'048'576) == "1MiB");
    CHECK(format_size(65'536) == "64KiB");
    CHECK(format_size(0) == "0B");
    CHECK(format_size(1'536) == "1536B");
    CHECK(format_size(64'000) == "64KB");
    CHECK(format_size(1ull << 40) == "1TiB");
    for (uint64_t n : {uint64_t{1}, uint64_t{1'000}, uint64_t{1'024}, uint64_t{3} << 30,
                       uint64_t{5'000'000'000}, std::numeric_limits<uint64_t>::max()}) {
        CHECK(parse_size_bytes(format_size(n)) == n);
    }
}
