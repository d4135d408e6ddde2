// Times in `tidemark inspect` are 64-bit milliseconds rendered as RFC 3339: past 2038, where a
// 32-bit time_t (armhf) wraps, and before 1970.
#include <catch2/catch.hpp>

#include "firmware/time_text.h"

using tidemark::firmware::utc_text;

TEST_CASE("utc_text renders a 2040 timestamp, past the 32-bit time_t end") {
    // 2040-02-29T12:34:56.789Z: a leap day, after 2038-01-19T03:14:07Z.
    CHECK(utc_text(2'214'131'696'789) == "2040-02-29T12:34:56.789Z");
    CHECK(utc_text(2'147'483'648'000) == "2038-01-19T03:14:08.000Z");
}

TEST_CASE("utc_text renders the epoch, before it, and the four-digit year range") {
    CHECK(utc_text(0) == "1970-01-01T00:00:00.000Z");
    CHECK(utc_text(-1) == "1969-12-31T23:59:59.999Z");
    CHECK(utc_text(1'764'400'000'123) == "2025-11-29T07:06:40.123Z");
    CHECK(utc_text(253'402'300'799'999) == "9999-12-31T23:59:59.999Z");
    CHECK(utc_text(-62'167'219'200'000) == "0000-01-01T00:00:00.000Z");
}

TEST_CASE("utc_text shows a time outside the years 0 to 9999 as the number") {
    // The engine's "no watermark yet" is INT64_MIN.
    CHECK(utc_text(INT64_MIN) == "-9223372036854775808 ms");
    CHECK(utc_text(253'402'300'800'000) == "253402300800000 ms");
}
