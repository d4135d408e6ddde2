#include "firmware/time_text.h"

#include <chrono>
#include <cstdio>
#include <string>

namespace tidemark::firmware {

namespace {

// 0000-01-01T00:00:00.000Z and 9999-12-31T23:59:59.999Z: the four-digit years of RFC 3339.
constexpr int64_t utc_text_ms_min = -62'167'219'200'000;
constexpr int64_t utc_text_ms_max = 253'402'300'799'999;

}  // namespace

std::string utc_text(int64_t ms) {
    using namespace std::chrono;
    // An engine's "no watermark yet" is INT64_MIN: shown as the number, not a wrapped date.
    if (ms < utc_text_ms_min || ms > utc_text_ms_max) return std::to_string(ms) + " ms";
    // Calendar arithmetic on sys_days (civil from days), in 64 bits throughout: no time_t.
    const sys_time<milliseconds> t{milliseconds{ms}};
    const sys_days day = floor<days>(t);
    const year_month_day ymd{day};
    const hh_mm_ss<milliseconds> time{t - day};
    char out[48];
    std::snprintf(
        out, sizeof out, "%04d-%02u-%02uT%02d:%02d:%02d.%03dZ", static_cast<int>(ymd.year()),
        static_cast<unsigned>(ymd.month()), static_cast<unsigned>(ymd.day()),
        static_cast<int>(time.hours().count()), static_cast<int>(time.minutes().count()),
        static_cast<int>(time.seconds().count()), static_cast<int>(time.subseconds().count()));
    return out;
}

}  // namespace tidemark::firmware
