// Named crash points: a test build kills the process at a chosen point so that the crash tests
// can check what recovery makes of the store at exactly that moment.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace tidemark::crash {

/// Every point where a kill is interesting for durability. Keep the names stable: the crash
/// tests and scripts select them by name.
enum class CrashPoint : uint8_t {
    after_log_append,         // a record is in the log (and synced if fsync=always)
    mid_checkpoint,           // inside the checkpoint's write txn, before commit
    after_checkpoint_commit,  // the checkpoint is committed
    after_outbox_append,      // emissions are committed to the outbox
    after_outbox_delete,      // an acknowledged row was deleted from the outbox
};

/// The name used in TIDEMARK_CRASH_AT, e.g. "after_log_append".
std::string_view crash_point_name(CrashPoint point);
std::optional<CrashPoint> crash_point_from_name(std::string_view name);

#if defined(TIDEMARK_CRASH_POINTS)
/// Operation: when the environment variable TIDEMARK_CRASH_AT is `NAME` or `NAME:N` and this is
/// the Nth time (default 1st) that point NAME is reached in this process, calls _exit(137)
/// at once: no destructors, no flush, no atexit handlers, like a SIGKILL.
/// The variable is read once, on the first call; an unknown name or count is reported on
/// stderr and ignored (a crash test with a typo must not pass by never crashing silently).
/// Concurrency: any thread; the hit count is atomic.
void crash_point(CrashPoint point);
#else
/// Compiled without TIDEMARK_CRASH_POINTS: nothing at all.
inline void crash_point(CrashPoint) {}
#endif

}  // namespace tidemark::crash
