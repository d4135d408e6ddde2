// Times as text: RFC 3339 read and written, the civil calendar under it, and the years it spans.
// The one parser and printer of the tree: the config (backfill.from), the payload codec
// (timestamp format rfc3339), `tidemark replay --from/--to` and `tidemark inspect` all use these,
// so a date one of them accepts is a date every one of them accepts, and reads the same.
//
// Times are 64-bit milliseconds since 1970-01-01T00:00:00Z everywhere: never time_t, which is 32
// bits on armhf and ends in January 2038. Pure arithmetic: no locale, no time zone database.
#pragma once

#include <cstdint>
#include <expected>
#include <string>
#include <string_view>

namespace tidemark::core {

/// The times RFC 3339's four-digit years can write: 0000-01-01T00:00:00Z to
/// 9999-12-31T23:59:59.999Z. The range of every time read from text (and of payload epochs).
inline constexpr int64_t time_text_ms_min = -62'167'219'200'000;
inline constexpr int64_t time_text_ms_max = 253'402'300'799'999;

/// Proleptic Gregorian: every year divisible by 4, except centuries not divisible by 400.
constexpr bool is_leap_year(int64_t year) noexcept {
    return (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
}

/// 28 to 31. month 1..12.
unsigned days_in_month(int64_t year, unsigned month) noexcept;

/// Days from 1970-01-01 to the proleptic Gregorian date year-month-day (month 1..12, day
/// 1..days_in_month). H. Hinnant's days_from_civil: exact for every int32 year.
int64_t days_from_civil(int64_t year, unsigned month, unsigned day) noexcept;

/// A day of the proleptic Gregorian calendar.
struct CivilDate {
    int64_t year = 1970;
    unsigned month = 1;  // 1..12
    unsigned day = 1;    // 1..31
    bool operator==(const CivilDate&) const = default;
};
/// The inverse of days_from_civil.
CivilDate civil_from_days(int64_t days) noexcept;

/// Why a text is not a time.
enum class TimeTextError : uint8_t {
    not_rfc3339,   // not the RFC 3339 date-time syntax below
    no_such_date,  // the syntax, but a day the calendar does not have: 2025-02-29, 2025-04-31
    out_of_range,  // a real date whose UTC time is outside years 0000..9999 (an offset can do it)
};
/// A phrase for messages: "is not an RFC 3339 time such as \"2025-11-29T10:00:00Z\"", ...
std::string_view time_text_error_text(TimeTextError error) noexcept;

/// Strict RFC 3339 date-time (section 5.6): "2025-11-29T10:00:00Z",
/// "2025-11-29T10:00:00.123+01:00". 'T' may be 't' or ' ' (the section's note), 'Z' may be 'z'.
/// The fraction has 1 or more digits, truncated to milliseconds (towards the past, also before
/// 1970). A leap second (:60, in any minute: no table of leap seconds) counts as the next
/// second's start, so 2016-12-31T23:59:60Z reads as 2017-01-01T00:00:00Z. The offset is
/// "+hh:mm" or "-hh:mm" with hh <= 23 and mm <= 59, subtracted to give UTC. Anything else is an
/// error: a missing offset, a one-digit field, "24:00:00", February 29th outside leap years,
/// February 30th, a time outside time_text_ms_min..time_text_ms_max after the offset.
std::expected<int64_t, TimeTextError> parse_rfc3339_ms(std::string_view text) noexcept;

/// RFC 3339 in UTC with milliseconds, "2040-01-01T00:00:00.000Z", for time_text_ms_min to
/// time_text_ms_max (before 1970 included); outside them, the number: "-9223372036854775808 ms"
/// (the engine's "no watermark yet" is INT64_MIN). parse_rfc3339_ms reads every text it writes
/// back to the same ms.
std::string utc_text(int64_t ms);

}  // namespace tidemark::core
