// Event and ingest times as people read them. Times are 64-bit milliseconds since the epoch
// everywhere: never time_t, which is 32 bits on armhf and ends in January 2038.
#pragma once

#include <cstdint>
#include <string>

namespace tidemark::firmware {

/// RFC 3339 in UTC with milliseconds, "2040-01-01T00:00:00.000Z", for the years 0 to 9999
/// (before 1970 included); outside them, the number: "-9223372036854775808 ms".
std::string utc_text(int64_t ms);

}  // namespace tidemark::firmware
