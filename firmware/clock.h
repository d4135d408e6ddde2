// The gateway's clock: wall time for ingest, and whether it can be trusted yet.
#pragma once

#include <cstdint>
#include <string>

#include "adapters/config/config.h"
#include "core/clock.h"

namespace tidemark::firmware {

/// The host's clocks: `wall_ms` by std::chrono::system_clock (what ingest stamps records with),
/// `steady_ms` by std::chrono::steady_clock, `thread_cpu_us` by CLOCK_THREAD_CPUTIME_ID. main()
/// makes the one instance and passes it down; nothing in firmware reads a clock any other way, so
/// tests can pass a test::ManualClock.
class SystemClock final : public core::Clock {
  public:
    int64_t wall_ms() const override;
    int64_t steady_ms() const override;
    int64_t thread_cpu_us() const override;
};

/// What the host says of its clock.
struct ClockStatus {
    bool kernel_synchronised = false;  // adjtimex: STA_UNSYNC clear
    bool kernel_readable = false;      // adjtimex answered (a seccomp filter may refuse it)
    std::string sync_service;          // "systemd-timesyncd", "chronyd", "ntpd" or "" (none seen)
    bool trusted = true;               // the decision, under the configured ClockTrust
};

/// Reads the clock's state and decides whether to trust it.
///
/// Operation: a Raspberry Pi has no real-time clock: it boots at the last saved time (or 1970)
/// and steps when NTP syncs. The kernel's STA_UNSYNC bit (adjtimex, read-only) says whether a
/// time-sync service has disciplined the clock since boot; systemd-timesyncd's flag file
/// /run/systemd/timesync/synchronized says it for timesyncd when adjtimex is refused.
/// ClockTrust::automatic trusts an unsynchronised clock only when no sync service is seen
/// (nothing will ever synchronise it, and holding idle advance forever would be worse).
/// Limits: reads a few files and one system call; call it about once a second, not per
/// message. The environment variable TIDEMARK_CLOCK_STATUS (a file holding "synchronised" or
/// "unsynchronised") replaces the kernel's answer, so tests can run the unsynchronised path on
/// a host whose clock they cannot unset.
ClockStatus read_clock_status(config::ClockTrust trust);

}  // namespace tidemark::firmware
