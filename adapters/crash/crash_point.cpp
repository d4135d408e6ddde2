#include "adapters/crash/crash_point.h"

#include <unistd.h>

#include <array>
#include <atomic>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace tidemark::crash {
namespace {

constexpr std::array<std::string_view, 5> names = {"after_log_append", "mid_checkpoint",
                                                   "after_checkpoint_commit", "after_outbox_append",
                                                   "after_outbox_delete"};

struct Target {
    bool armed = false;
    CrashPoint point = CrashPoint::after_log_append;
    uint64_t hit = 1;  // crash on this hit, counting from 1
};

Target parse_target() {
    Target target;
    const char* env = std::getenv("TIDEMARK_CRASH_AT");
    if (env == nullptr || *env == '\0') return target;
    std::string_view spec(env);
    std::string_view name = spec.substr(0, spec.find(':'));
    auto point = crash_point_from_name(name);
    if (!point) {
        std::fprintf(stderr, "tidemark: TIDEMARK_CRASH_AT=%s names no crash point; ignored\n", env);
        return target;
    }
    if (name.size() < spec.size()) {
        std::string_view count = spec.substr(name.size() + 1);
        uint64_t n = 0;
        auto [end, ec] = std::from_chars(count.data(), count.data() + count.size(), n);
        if (ec != std::errc{} || end != count.data() + count.size() || n == 0) {
            std::fprintf(stderr,
                         "tidemark: TIDEMARK_CRASH_AT=%s: the count after ':' must be a "
                         "positive integer; ignored\n",
                         env);
            return target;
        }
        target.hit = n;
    }
    target.armed = true;
    target.point = *point;
    return target;
}

}  // namespace

std::string_view crash_point_name(CrashPoint point) {
    return names[static_cast<size_t>(point)];
}

std::optional<CrashPoint> crash_point_from_name(std::string_view name) {
    for (size_t i = 0; i < names.size(); ++i) {
        if (names[i] == name) return static_cast<CrashPoint>(i);
    }
    return std::nullopt;
}

#if defined(TIDEMARK_CRASH_POINTS)
void crash_point(CrashPoint point) {
    // Function-local statics: the environment is read once, thread-safely, on first use.
    static const Target target = parse_target();
    static std::atomic<uint64_t> hits{0};
    if (!target.armed || target.point != point) return;
    if (hits.fetch_add(1, std::memory_order_relaxed) + 1 == target.hit) _exit(137);
}
#endif

}  // namespace tidemark::crash
