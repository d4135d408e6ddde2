// The one RFC 3339 parser and printer (core/time_text.h), which the config, the payload codec,
// `tidemark replay --from/--to` and `tidemark inspect` share: the calendar, the syntax, leap
// seconds, offsets and the year bounds. Times are 64-bit milliseconds: past 2038, where a 32-bit
// time_t (armhf) wraps, and before 1970.
#include "core/time_text.h"

#include <catch2/catch.hpp>
#include <string>

using namespace tidemark;
using core::parse_rfc3339_ms;
using core::TimeTextError;
using core::utc_text;

namespace {

TimeTextError error_of(std::string_view text) {
    auto t = parse_rfc3339_ms(text);
    INFO(text);
    REQUIRE_FALSE(t);
    return t.error();
}

}  // namespace

TEST_CASE("utc_text renders a 2040 timestamp, past the 32-bit time_t end", "[time_text]") {
    // 2040-02-29T12:34:56.789Z: a leap day, after 2038-01-19T03:14:07Z.
    CHECK(utc_text(2'214'131'696'789) == "2040-02-29T12:34:56.789Z");
    CHECK(utc_text(2'147'483'648'000) == "2038-01-19T03:14:08.000Z");
}

TEST_CASE("utc_text renders the epoch, before it, and the four-digit year range", "[time_text]") {
    CHECK(utc_text(0) == "1970-01-01T00:00:00.000Z");
    CHECK(utc_text(-1) == "1969-12-31T23:59:59.999Z");
    CHECK(utc_text(1'764'400'000'123) == "2025-11-29T07:06:40.123Z");
    CHECK(utc_text(253'402'300'799'999) == "9999-12-31T23:59:59.999Z");
    CHECK(utc_text(-62'167'219'200'000) == "0000-01-01T00:00:00.000Z");
}

TEST_CASE("utc_text shows a time outside the years 0 to 9999 as the number", "[time_text]") {
    // The engine's "no watermark yet" is INT64_MIN.
    CHECK(utc_text(INT64_MIN) == "-9223372036854775808 ms");
    CHECK(utc_text(253'402'300'800'000) == "253402300800000 ms");
    CHECK(utc_text(core::time_text_ms_min - 1) == "-62167219200001 ms");
}

TEST_CASE("the calendar: days_from_civil and civil_from_days agree over the years 0..9999",
          "[time_text]") {
    CHECK(core::days_from_civil(1970, 1, 1) == 0);
    CHECK(core::days_from_civil(2000, 3, 1) == 11017);
    CHECK(core::days_from_civil(0, 1, 1) == -719528);
    CHECK(core::days_from_civil(9999, 12, 31) == 2932896);
    int64_t day = core::days_from_civil(0, 1, 1);
    for (int64_t year = 0; year <= 9999; ++year) {
        for (unsigned month = 1; month <= 12; ++month) {
            const unsigned days = core::days_in_month(year, month);
            for (unsigned d = 1; d <= days; ++d, ++day) {
                // Every day once, in order, and back again.
                if (core::days_from_civil(year, month, d) != day ||
                    core::civil_from_days(day) != core::CivilDate{year, month, d}) {
                    FAIL(year << "-" << month << "-" << d << " is not day " << day);
                }
            }
        }
    }
    CHECK(day == core::days_from_civil(10000, 1, 1));
    CHECK(core::days_in_month(2024, 2) == 29);
    CHECK(core::days_in_month(2025, 2) == 28);
    CHECK(core::days_in_month(1900, 2) == 28);
    CHECK(core::days_in_month(2000, 2) == 29);
}

TEST_CASE("RFC 3339: the forms it reads", "[time_text]") {
    CHECK(parse_rfc3339_ms("1970-01-01T00:00:00Z") == 0);
    CHECK(parse_rfc3339_ms("2025-11-29T07:06:40Z") == 1'764'400'000'000);
    CHECK(parse_rfc3339_ms("2025-11-29T07:06:40.123Z") == 1'764'400'000'123);
    // The fraction is truncated to ms, towards the past also before 1970.
    CHECK(parse_rfc3339_ms("2025-11-29T07:06:40.1239999z") == 1'764'400'000'123);
    CHECK(parse_rfc3339_ms("1969-12-31T23:59:59.9999Z") == -1);
    CHECK(parse_rfc3339_ms("2025-11-29t07:06:40.5Z") == 1'764'400'000'500);
    CHECK(parse_rfc3339_ms("2025-11-29 07:06:40Z") == 1'764'400'000'000);
    // Offsets: local time minus the offset is UTC.
    CHECK(parse_rfc3339_ms("2025-11-29T08:06:40+01:00") == 1'764'400'000'000);
    CHECK(parse_rfc3339_ms("2025-11-29T01:36:40-05:30") == 1'764'400'000'000);
    CHECK(parse_rfc3339_ms("2025-11-30T07:05:40+23:59") == 1'764'400'000'000);
    CHECK(parse_rfc3339_ms("2025-11-29T07:06:40-00:00") == 1'764'400'000'000);
    CHECK(parse_rfc3339_ms("2026-11-30T12:00:00.250+01:00") == 1'796'036'400'250);
}

TEST_CASE("RFC 3339: February, leap years and days that do not exist", "[time_text]") {
    CHECK(parse_rfc3339_ms("2024-02-29T00:00:00Z") == 1'709'164'800'000);
    CHECK(parse_rfc3339_ms("2000-02-29T12:00:00Z") == 951'825'600'000);
    CHECK(parse_rfc3339_ms("2040-02-29T12:34:56.789Z") == 2'214'131'696'789);
    // The date the config used to read as 2025-03-02 (issue 25, finding 7).
    CHECK(error_of("2025-02-30T00:00:00Z") == TimeTextError::no_such_date);
    CHECK(error_of("2025-02-29T00:00:00Z") == TimeTextError::no_such_date);
    CHECK(error_of("1900-02-29T00:00:00Z") == TimeTextError::no_such_date);
    CHECK(error_of("2100-02-29T00:00:00Z") == TimeTextError::no_such_date);
    CHECK(error_of("2025-04-31T00:00:00Z") == TimeTextError::no_such_date);
    CHECK(error_of("2025-12-32T00:00:00Z") == TimeTextError::no_such_date);
    // An impossible day with an offset that would carry it into a real one is still refused.
    CHECK(error_of("2025-02-30T00:30:00+01:00") == TimeTextError::no_such_date);
    // Months and days that no calendar has are syntax.
    CHECK(error_of("2025-13-01T00:00:00Z") == TimeTextError::not_rfc3339);
    CHECK(error_of("2025-00-10T00:00:00Z") == TimeTextError::not_rfc3339);
    CHECK(error_of("2025-01-00T00:00:00Z") == TimeTextError::not_rfc3339);
}

TEST_CASE("RFC 3339: a leap second counts as the next second's start", "[time_text]") {
    CHECK(parse_rfc3339_ms("2016-12-31T23:59:60Z") == 1'483'228'800'000);
    CHECK(parse_rfc3339_ms("2016-12-31T23:59:60Z") == parse_rfc3339_ms("2017-01-01T00:00:00Z"));
    CHECK(parse_rfc3339_ms("2016-12-31T23:59:60.5Z") == 1'483'228'800'500);
    CHECK(parse_rfc3339_ms("2017-01-01T00:59:60+01:00") == 1'483'228'800'000);
    CHECK(error_of("2016-12-31T23:59:61Z") == TimeTextError::not_rfc3339);
    CHECK(error_of("2016-12-31T23:60:00Z") == TimeTextError::not_rfc3339);
    CHECK(error_of("2016-12-31T24:00:00Z") == TimeTextError::not_rfc3339);
}

TEST_CASE("RFC 3339: the years 0000 to 9999 in UTC, offsets included", "[time_text]") {
    CHECK(parse_rfc3339_ms("0000-01-01T00:00:00Z") == core::time_text_ms_min);
    CHECK(parse_rfc3339_ms("9999-12-31T23:59:59.999Z") == core::time_text_ms_max);
    CHECK(parse_rfc3339_ms("0000-01-01T01:00:00+01:00") == core::time_text_ms_min);
    CHECK(parse_rfc3339_ms("9999-12-31T22:59:59.999-01:00") == core::time_text_ms_max);
    CHECK(error_of("0000-01-01T00:00:00+00:01") == TimeTextError::out_of_range);
    CHECK(error_of("9999-12-31T23:59:59.999-00:01") == TimeTextError::out_of_range);
    CHECK(error_of("9999-12-31T23:59:60Z") == TimeTextError::out_of_range);
    CHECK(error_of("10000-01-01T00:00:00Z") == TimeTextError::not_rfc3339);
    CHECK(error_of("-0001-01-01T00:00:00Z") == TimeTextError::not_rfc3339);
}

TEST_CASE("RFC 3339: anything else is refused", "[time_text]") {
    for (const char* text : {"",
                             "2025",
                             "2025-11-29",
                             "2025-11-29T07:06:40",
                             "2025-11-29T07:06:40.5",
                             "2025-11-29T07:06:40.Z",
                             "2025-11-29T07:06Z",
                             "2025-11-29T7:06:40Z",
                             "2025-1-29T07:06:40Z",
                             " 2025-11-29T07:06:40Z",
                             "2025-11-29T07:06:40Z ",
                             "2025-11-29X07:06:40Z",
                             "2025-11-29T07:06:40+0100",
                             "2025-11-29T07:06:40+01",
                             "2025-11-29T07:06:40+24:00",
                             "2025-11-29T07:06:40+01:60",
                             "2025-11-29T07:06:40UTC",
                             "+025-11-29T07:06:40Z",
                             "2025-11-29T07:06:40Z0",
                             "1764400000000",
                             "7d"}) {
        CHECK(error_of(text) == TimeTextError::not_rfc3339);
    }
    CHECK(core::time_text_error_text(TimeTextError::no_such_date).find("calendar") !=
          std::string_view::npos);
}

TEST_CASE("utc_text's text reads back to the same ms", "[time_text]") {
    for (int64_t ms : {core::time_text_ms_min, int64_t{-86'400'001}, int64_t{-1}, int64_t{0},
                       int64_t{951'825'600'000}, int64_t{1'764'400'000'123},
                       int64_t{2'214'131'696'789}, core::time_text_ms_max}) {
        INFO(ms);
        CHECK(parse_rfc3339_ms(utc_text(ms)) == ms);
    }
}
