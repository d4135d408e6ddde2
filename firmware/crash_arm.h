// Arms the named crash points (core/crash_point.h) from TIDEMARK_CRASH_AT, in test builds.
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>

#include "core/crash_point.h"

namespace tidemark::firmware {

#if defined(TIDEMARK_CRASH_POINTS)
namespace crash_detail {
inline core::CrashTarget target;
inline std::atomic<uint64_t> hits{0};
// _exit(137) at once: no destructors, no flush, no atexit handlers, like a SIGKILL.
inline void on_crash_point(core::CrashPoint point) {
    if (point != target.point) return;
    if (hits.fetch_add(1, std::memory_order_relaxed) + 1 == target.hit) ::_exit(137);
}
}  // namespace crash_detail

/// Operation: when TIDEMARK_CRASH_AT is `NAME` or `NAME:N`, the process exits with status 137
/// the Nth time (default 1st) it reaches point NAME. Call once, early in main, before threads.
/// An unknown name or count is reported on stderr and ignored: a crash test with a typo must
/// not pass by never crashing silently.
inline void arm_crash_points_from_env() {
    const char* env = std::getenv("TIDEMARK_CRASH_AT");
    if (env == nullptr || *env == '\0') return;
    const std::optional<core::CrashTarget> target = core::parse_crash_target(env);
    if (!target) {
        std::fprintf(stderr,
                     "tidemark: TIDEMARK_CRASH_AT=%s is not NAME or NAME:N (N a positive "
                     "integer) with NAME a crash point; ignored\n",
                     env);
        return;
    }
    crash_detail::target = *target;
    core::crash_hook.store(&crash_detail::on_crash_point, std::memory_order_release);
}
#else
inline void arm_crash_points_from_env() {}
#endif

}  // namespace tidemark::firmware
