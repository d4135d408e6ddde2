// Durations ("250ms", "5s", "1m", "1h", "1d") and sizes ("64KiB", "1GiB") as they appear in config.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/result.h"

namespace tidemark::core {

/// Parses a duration: an integer followed by one of ms, s, m, h, d. Errors quote the text.
Result<int64_t> parse_duration_ms(std::string_view text);

/// Parses a size: an integer followed by B, KiB, MiB, GiB or TiB (also KB/MB/GB as powers of ten).
Result<uint64_t> parse_size_bytes(std::string_view text);

/// The shortest exact spelling of a duration, for messages: 60000 -> "1m", 1500 -> "1500ms".
std::string format_duration(int64_t duration_ms);

/// The exact spelling of a size, for messages: 1048576 -> "1MiB".
std::string format_size(uint64_t size_bytes);

}  // namespace tidemark::core
