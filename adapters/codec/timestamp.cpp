#include "adapters/codec/timestamp.h"

#include <cmath>

#include "core/time_math.h"

namespace tidemark::codec {
namespace {

bool is_digit(char c) {
    return c >= '0' && c <= '9';
}

// Reads exactly `n` digits at text[at...]; false if they are not all digits.
bool digits(std::string_view text, size_t at, size_t n, unsigned& out) {
    if (at + n > text.size()) return false;
    out = 0;
    for (size_t i = 0; i < n; ++i) {
        if (!is_digit(text[at + i])) return false;
        out = out * 10 + static_cast<unsigned>(text[at + i] - '0');
    }
    return true;
}

bool is_leap(int64_t y) {
    return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

unsigned days_in_month(int64_t y, unsigned m) {
    static constexpr unsigned days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return m == 2 && is_leap(y) ? 29 : days[m - 1];
}

constexpr int shift_of(EpochUnit unit) {
    switch (unit) {
        case EpochUnit::s:
            return 3;
        case EpochUnit::ms:
            return 0;
        case EpochUnit::us:
            return -3;
        case EpochUnit::ns:
            return -6;
    }
    return 0;
}

constexpr int64_t pow10(int n) {
    int64_t p = 1;
    for (int i = 0; i < n; ++i)
        p *= 10;
    return p;
}

}  // namespace

int64_t days_from_civil(int64_t y, unsigned m, unsigned d) noexcept {
    y -= m <= 2;
    const int64_t era = (y >= 0 ? y : y - 399) / 400;
    const int64_t yoe = y - era * 400;
    const int64_t doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

std::optional<int64_t> parse_rfc3339_ms(std::string_view t) noexcept {
    unsigned year, month, day, hour, minute, second;
    if (!digits(t, 0, 4, year) || t.size() < 20 || t[4] != '-' || !digits(t, 5, 2, month) ||
        t[7] != '-' || !digits(t, 8, 2, day) || (t[10] != 'T' && t[10] != 't' && t[10] != ' ') ||
        !digits(t, 11, 2, hour) || t[13] != ':' || !digits(t, 14, 2, minute) || t[16] != ':' ||
        !digits(t, 17, 2, second)) {
        return std::nullopt;
    }
    if (month < 1 || month > 12 || day < 1 || day > days_in_month(year, month) || hour > 23 ||
        minute > 59 || second > 60) {
        return std::nullopt;
    }
    size_t at = 19;
    int64_t fraction_ms = 0;
    if (at < t.size() && t[at] == '.') {
        ++at;
        size_t first = at;
        int64_t scale = 100;
        while (at < t.size() && is_digit(t[at])) {
            fraction_ms += (t[at] - '0') * scale;
            scale /= 10;
            ++at;
        }
        if (at == first) return std::nullopt;
    }
    if (at >= t.size()) return std::nullopt;
    int64_t offset_minutes = 0;
    if (t[at] == 'Z' || t[at] == 'z') {
        ++at;
    } else if (t[at] == '+' || t[at] == '-') {
        unsigned offset_hour, offset_minute;
        if (!digits(t, at + 1, 2, offset_hour) || at + 3 >= t.size() || t[at + 3] != ':' ||
            !digits(t, at + 4, 2, offset_minute) || offset_hour > 23 || offset_minute > 59) {
            return std::nullopt;
        }
        offset_minutes = static_cast<int64_t>(offset_hour * 60 + offset_minute);
        if (t[at] == '-') offset_minutes = -offset_minutes;
        at += 6;
    } else {
        return std::nullopt;
    }
    if (at != t.size()) return std::nullopt;
    int64_t seconds = days_from_civil(year, month, day) * 86400 + hour * 3600 + minute * 60 +
                      second - offset_minutes * 60;
    int64_t ms = seconds * 1000 + fraction_ms;
    if (ms < timestamp_min_ms || ms > timestamp_max_ms) return std::nullopt;
    return ms;
}

std::optional<int64_t> parse_epoch_text_ms(std::string_view text, EpochUnit unit) noexcept {
    size_t at = 0;
    bool negative = false;
    if (at < text.size() && text[at] == '-') {
        negative = true;
        ++at;
    }
    size_t int_start = at;
    int64_t whole = 0;
    while (at < text.size() && is_digit(text[at])) {
        if (__builtin_mul_overflow(whole, 10, &whole) ||
            __builtin_add_overflow(whole, text[at] - '0', &whole)) {
            return std::nullopt;
        }
        ++at;
    }
    if (at == int_start) return std::nullopt;
    std::string_view fraction;
    if (at < text.size() && text[at] == '.') {
        size_t fraction_start = ++at;
        while (at < text.size() && is_digit(text[at]))
            ++at;
        if (at == fraction_start) return std::nullopt;
        fraction = text.substr(fraction_start, at - fraction_start);
    }
    if (at != text.size()) return std::nullopt;

    const int shift = shift_of(unit);
    int64_t ms = 0;
    bool inexact = false;  // digits below 1 ms were dropped: floors a negative time one lower
    if (shift >= 0) {
        int64_t fraction_part = 0;
        for (int i = 0; i < shift; ++i) {
            fraction_part = fraction_part * 10 +
                            (static_cast<size_t>(i) < fraction.size() ? fraction[i] - '0' : 0);
        }
        for (size_t i = static_cast<size_t>(shift); i < fraction.size(); ++i) {
            inexact |= fraction[i] != '0';
        }
        if (__builtin_mul_overflow(whole, pow10(shift), &ms) ||
            __builtin_add_overflow(ms, fraction_part, &ms)) {
            return std::nullopt;
        }
    } else {
        int64_t divisor = pow10(-shift);
        ms = whole / divisor;
        inexact = whole % divisor != 0;
        for (char c : fraction)
            inexact |= c != '0';
    }
    if (negative) ms = -ms - (inexact ? 1 : 0);
    return ms;
}

std::optional<int64_t> epoch_integer_ms(int64_t value, EpochUnit unit) noexcept {
    const int shift = shift_of(unit);
    if (shift >= 0) {
        int64_t ms;
        if (__builtin_mul_overflow(value, pow10(shift), &ms)) return std::nullopt;
        return ms;
    }
    return core::floor_div(value, pow10(-shift));
}

std::optional<int64_t> epoch_double_ms(double value, EpochUnit unit) noexcept {
    if (!std::isfinite(value)) return std::nullopt;
    // To microseconds: s x 1e6, ms x 1e3, us x 1, ns / 1e3.
    double us = 0;
    switch (unit) {
        case EpochUnit::s:
            us = value * 1e6;
            break;
        case EpochUnit::ms:
            us = value * 1e3;
            break;
        case EpochUnit::us:
            us = value;
            break;
        case EpochUnit::ns:
            us = value / 1e3;
            break;
    }
    if (!(std::fabs(us) < 9.0e18)) return std::nullopt;
    return core::floor_div(std::llround(us), 1000);
}

}  // namespace tidemark::codec
