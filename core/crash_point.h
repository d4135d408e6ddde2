// Named crash points: places in the adapters where a test build may kill the process, so that
// the crash tests can check what recovery makes of the store at exactly that moment.
#pragma once

#include <array>
#include <atomic>
#include <charconv>
#include <cstdint>
#include <optional>
#include <string_view>

namespace tidemark::core {

/// Every point where a kill is interesting for durability. Keep the names stable: the crash
/// tests and scripts select them by name (TIDEMARK_CRASH_AT=NAME[:N]).
enum class CrashPoint : uint8_t {
    after_log_append,         // a record is in the log (and synced if fsync=always)
    mid_checkpoint,           // inside the checkpoint's write txn, before commit
    after_checkpoint_commit,  // the checkpoint is committed
    after_outbox_append,      // emissions are committed to the outbox
    after_outbox_delete,      // an acknowledged row was deleted from the outbox
    before_log_seal_write,    // a seal compressed staged records, before its blocks are written
    after_log_seal_write,     // a seal's blocks are written and synced, the stage not punched yet
};

inline constexpr std::array<std::string_view, 7> crash_point_names = {
    "after_log_append",    "mid_checkpoint",      "after_checkpoint_commit",
    "after_outbox_append", "after_outbox_delete", "before_log_seal_write",
    "after_log_seal_write"};

constexpr std::string_view crash_point_name(CrashPoint point) {
    return crash_point_names[static_cast<size_t>(point)];
}

constexpr std::optional<CrashPoint> crash_point_from_name(std::string_view name) {
    for (size_t i = 0; i < crash_point_names.size(); ++i)
        if (crash_point_names[i] == name) return static_cast<CrashPoint>(i);
    return std::nullopt;
}

/// "NAME" or "NAME:N": crash on the Nth time (counting from 1) that point NAME is reached.
struct CrashTarget {
    CrashPoint point = CrashPoint::after_log_append;
    uint64_t hit = 1;
};

/// nullopt when the name is unknown or N is not a positive integer.
constexpr std::optional<CrashTarget> parse_crash_target(std::string_view spec) {
    const std::string_view name = spec.substr(0, spec.find(':'));
    const std::optional<CrashPoint> point = crash_point_from_name(name);
    if (!point) return std::nullopt;
    CrashTarget target{*point, 1};
    if (name.size() < spec.size()) {
        const std::string_view count = spec.substr(name.size() + 1);
        uint64_t n = 0;
        auto [end, ec] = std::from_chars(count.data(), count.data() + count.size(), n);
        if (ec != std::errc{} || end != count.data() + count.size() || n == 0) return std::nullopt;
        target.hit = n;
    }
    return target;
}

#if defined(TIDEMARK_CRASH_POINTS)
/// The process's crash hook: null (nothing happens) until a test build's firmware installs one
/// (firmware/crash_arm.h reads TIDEMARK_CRASH_AT and kills the process at the target). Core
/// declares the seam so that the adapters that reach crash points depend on core only; core
/// itself never kills, reads the environment or calls a hook of its own.
using CrashHook = void (*)(CrashPoint);
inline std::atomic<CrashHook> crash_hook{nullptr};

/// Operation: calls the installed hook, if any. Concurrency: any thread.
inline void crash_point(CrashPoint point) {
    if (CrashHook hook = crash_hook.load(std::memory_order_acquire)) hook(point);
}
#else
/// Compiled without TIDEMARK_CRASH_POINTS: nothing at all.
inline void crash_point(CrashPoint) {}
#endif

}  // namespace tidemark::core
