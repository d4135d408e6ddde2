// Event times from payloads: RFC 3339 text and epoch numbers in s, ms, us or ns, to int64 ms.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace tidemark::codec {

/// The range of times a payload may carry: 0000-01-01T00:00:00Z to 9999-12-31T23:59:59.999Z.
inline constexpr int64_t timestamp_min_ms = -62'167'219'200'000;
inline constexpr int64_t timestamp_max_ms = 253'402'300'799'999;

/// Days from 1970-01-01 to the proleptic Gregorian date y-m-d (m 1..12, d 1..31).
int64_t days_from_civil(int64_t y, unsigned m, unsigned d) noexcept;

/// Strict RFC 3339 date-time: "2025-11-29T10:00:00Z", "2025-11-29T10:00:00.123+01:00".
/// 'T' may be 't' or ' ' (RFC 3339 section 5.6 note), 'Z' may be 'z'. The fraction has 1 or
/// more digits, truncated to milliseconds; a leap second (:60) counts as the next second's
/// start. No locale, no time zone database: only Z or a numeric offset. nullopt when the text
/// is anything else or an impossible date (2025-02-29).
std::optional<int64_t> parse_rfc3339_ms(std::string_view text) noexcept;

/// Epoch time units: a count of 10^-3 (s) ... 10^-9 (ns) seconds becomes ms by this shift.
enum class EpochUnit { s, ms, us, ns };

/// Decimal text "1764400000", "-12.5", "1764400000.123": exact, floored to whole ms (towards the
/// past). No exponent, no '+', no spaces. nullopt when malformed or out of int64 ms.
std::optional<int64_t> parse_epoch_text_ms(std::string_view text, EpochUnit unit) noexcept;

/// An integer epoch value in `unit`, floored to ms; nullopt on overflow.
std::optional<int64_t> epoch_integer_ms(int64_t value, EpochUnit unit) noexcept;

/// A fractional epoch value: rounded to the nearest microsecond first (a double holding epoch
/// seconds cannot carry more; 1764400000.123 must not become ...122 ms), then floored to ms.
std::optional<int64_t> epoch_double_ms(double value, EpochUnit unit) noexcept;

}  // namespace tidemark::codec
