#include "core/time_text.h"

#include <cstdio>

#include "core/time_math.h"

namespace tidemark::core {
namespace {

constexpr int64_t ms_per_day = 86'400'000;

bool is_digit(char c) {
    return c >= '0' && c <= '9';
}

// Reads exactly `n` digits at text[at...]; false if they are not all there and all digits.
bool digits(std::string_view text, size_t at, size_t n, unsigned& out) {
    if (at + n > text.size()) return false;
    out = 0;
    for (size_t i = 0; i < n; ++i) {
        if (!is_digit(text[at + i])) return false;
        out = out * 10 + static_cast<unsigned>(text[at + i] - '0');
    }
    return true;
}

}  // namespace

unsigned days_in_month(int64_t year, unsigned month) noexcept {
    static constexpr unsigned days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return month == 2 && is_leap_year(year) ? 29 : days[month - 1];
}

int64_t days_from_civil(int64_t y, unsigned m, unsigned d) noexcept {
    y -= m <= 2;
    const int64_t era = (y >= 0 ? y : y - 399) / 400;
    const int64_t yoe = y - era * 400;
    const int64_t doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

CivilDate civil_from_days(int64_t z) noexcept {
    z += 719468;
    const int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    const int64_t doe = z - era * 146097;
    const int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    const int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    const int64_t mp = (5 * doy + 2) / 153;
    const auto day = static_cast<unsigned>(doy - (153 * mp + 2) / 5 + 1);
    const auto month = static_cast<unsigned>(mp < 10 ? mp + 3 : mp - 9);
    return CivilDate{yoe + era * 400 + (month <= 2), month, day};
}

std::string_view time_text_error_text(TimeTextError error) noexcept {
    switch (error) {
        case TimeTextError::not_rfc3339:
            return "is not an RFC 3339 time such as \"2025-11-29T10:00:00Z\"";
        case TimeTextError::no_such_date:
            return "names a day the calendar does not have (February 29th is only in leap years)";
        case TimeTextError::out_of_range:
            return "is outside the years 0000 to 9999 in UTC";
    }
    return "?";
}

std::expected<int64_t, TimeTextError> parse_rfc3339_ms(std::string_view t) noexcept {
    const auto syntax = std::unexpected(TimeTextError::not_rfc3339);
    unsigned year, month, day, hour, minute, second;
    if (!digits(t, 0, 4, year) || t.size() < 20 || t[4] != '-' || !digits(t, 5, 2, month) ||
        t[7] != '-' || !digits(t, 8, 2, day) || (t[10] != 'T' && t[10] != 't' && t[10] != ' ') ||
        !digits(t, 11, 2, hour) || t[13] != ':' || !digits(t, 14, 2, minute) || t[16] != ':' ||
        !digits(t, 17, 2, second)) {
        return syntax;
    }
    if (month < 1 || month > 12 || day < 1 || hour > 23 || minute > 59 || second > 60)
        return syntax;
    size_t at = 19;
    int64_t fraction_ms = 0;
    if (t[at] == '.') {
        ++at;
        const size_t first = at;
        int64_t scale = 100;
        while (at < t.size() && is_digit(t[at])) {
            fraction_ms += (t[at] - '0') * scale;
            scale /= 10;
            ++at;
        }
        if (at == first) return syntax;
    }
    if (at >= t.size()) return syntax;
    int64_t offset_minutes = 0;
    if (t[at] == 'Z' || t[at] == 'z') {
        ++at;
    } else if (t[at] == '+' || t[at] == '-') {
        unsigned offset_hour, offset_minute;
        if (!digits(t, at + 1, 2, offset_hour) || at + 3 >= t.size() || t[at + 3] != ':' ||
            !digits(t, at + 4, 2, offset_minute) || offset_hour > 23 || offset_minute > 59) {
            return syntax;
        }
        offset_minutes = static_cast<int64_t>(offset_hour * 60 + offset_minute);
        if (t[at] == '-') offset_minutes = -offset_minutes;
        at += 6;
    } else {
        return syntax;
    }
    if (at != t.size()) return syntax;
    // After the syntax: a text that reads as a time in every part but the day is a different
    // mistake, and the config says which.
    if (day > days_in_month(year, month)) return std::unexpected(TimeTextError::no_such_date);
    const int64_t seconds = days_from_civil(year, month, day) * 86400 + hour * 3600 + minute * 60 +
                            second - offset_minutes * 60;
    const int64_t ms = seconds * 1000 + fraction_ms;
    if (ms < time_text_ms_min || ms > time_text_ms_max)
        return std::unexpected(TimeTextError::out_of_range);
    return ms;
}

std::string utc_text(int64_t ms) {
    if (ms < time_text_ms_min || ms > time_text_ms_max) return std::to_string(ms) + " ms";
    const int64_t days = floor_div(ms, ms_per_day);
    const CivilDate date = civil_from_days(days);
    const int64_t in_day_ms = ms - days * ms_per_day;
    char out[48];
    std::snprintf(out, sizeof out, "%04d-%02u-%02uT%02d:%02d:%02d.%03dZ",
                  static_cast<int>(date.year), date.month, date.day,
                  static_cast<int>(in_day_ms / 3'600'000),
                  static_cast<int>(in_day_ms / 60'000 % 60),
                  static_cast<int>(in_day_ms / 1000 % 60), static_cast<int>(in_day_ms % 1000));
    return out;
}

}  // namespace tidemark::core
