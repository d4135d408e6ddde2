// Durations and sizes for a person to read (not config syntax, which is core/duration.h's):
// what `advise`, `status` and other commands print.
#pragma once

#include <cstdint>
#include <string>

namespace tidemark::firmware {

/// The round units these texts use.
inline constexpr int64_t second_ms = 1'000, minute_ms = 60'000, hour_ms = 3'600'000;

/// "12ms", "1.5s", "2m", "1.2h": four significant digits, for lags that may be fractional.
std::string human_ms(double ms);

/// Two round units at most: "0s", "850ms", "2.1s", "45s", "3m 12s", "2h 5m", "3d 4h"; negative
/// durations (a clock stepped back) get a leading "-".
std::string human_duration(int64_t ms);

/// Bytes in binary units, three significant digits: "512 B", "12.5 KiB", "256 MiB", "1.5 GiB".
std::string human_bytes(uint64_t bytes);

}  // namespace tidemark::firmware
