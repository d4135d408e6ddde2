// Event times from payloads: epoch numbers in s, ms, us or ns, to int64 ms. RFC 3339 text is
// core/time_text.h's (core::parse_rfc3339_ms), the one parser config and replay use too.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "core/time_text.h"

namespace tidemark::codec {

/// The range of times a payload may carry, whatever its format: the years 0000..9999 that
/// RFC 3339 can write (core::time_text_ms_min..time_text_ms_max); outside it, bad_timestamp.
inline constexpr int64_t timestamp_min_ms = core::time_text_ms_min;
inline constexpr int64_t timestamp_max_ms = core::time_text_ms_max;

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
