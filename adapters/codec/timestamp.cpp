#include "adapters/codec/timestamp.h"

#include <cmath>

#include "core/time_math.h"

namespace tidemark::codec {
namespace {

bool is_digit(char c) {
    return c >= '0' && c <= '9';
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
