#include "firmware/human_units.h"

#include <cmath>
#include <cstdio>

namespace tidemark::firmware {

std::string human_ms(double ms) {
    char buf[48];
    const double a = std::fabs(ms);
    if (a < 1'000)
        std::snprintf(buf, sizeof buf, "%.4gms", ms);
    else if (a < 60'000)
        std::snprintf(buf, sizeof buf, "%.4gs", ms / 1'000);
    else if (a < 3'600'000)
        std::snprintf(buf, sizeof buf, "%.4gm", ms / 60'000);
    else
        std::snprintf(buf, sizeof buf, "%.4gh", ms / 3'600'000);
    return buf;
}

std::string human_duration(int64_t ms) {
    if (ms < 0) return "-" + human_duration(ms == INT64_MIN ? INT64_MAX : -ms);
    constexpr int64_t second = 1'000, minute = 60 * second, hour = 60 * minute, day = 24 * hour;
    char buf[64];
    if (ms == 0) return "0s";
    if (ms < second) {
        std::snprintf(buf, sizeof buf, "%lldms", static_cast<long long>(ms));
    } else if (ms < 10 * second) {
        // One decimal where it still says something (2.1s); whole seconds above.
        std::snprintf(buf, sizeof buf, "%.1fs", static_cast<double>(ms / 100) / 10);
    } else if (ms < minute) {
        std::snprintf(buf, sizeof buf, "%llds", static_cast<long long>(ms / second));
    } else {
        struct Pair {
            int64_t big;
            const char* big_name;
            int64_t small;
            const char* small_name;
        };
        const Pair p = ms < hour  ? Pair{minute, "m", second, "s"}
                       : ms < day ? Pair{hour, "h", minute, "m"}
                                  : Pair{day, "d", hour, "h"};
        const long long big = ms / p.big, small = (ms % p.big) / p.small;
        if (small == 0)
            std::snprintf(buf, sizeof buf, "%lld%s", big, p.big_name);
        else
            std::snprintf(buf, sizeof buf, "%lld%s %lld%s", big, p.big_name, small, p.small_name);
    }
    return buf;
}

std::string human_bytes(uint64_t bytes) {
    static constexpr const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    char buf[48];
    if (bytes < 1024) {
        std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
        return buf;
    }
    double value = static_cast<double>(bytes);
    std::size_t unit = 0;
    while (value >= 1024 && unit + 1 < std::size(units)) {
        value /= 1024;
        ++unit;
    }
    std::snprintf(buf, sizeof buf, value < 100 ? "%.3g %s" : "%.0f %s", value, units[unit]);
    return buf;
}

}  // namespace tidemark::firmware
