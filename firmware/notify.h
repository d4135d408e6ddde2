// Tells systemd how the service is doing: readiness, a status line, and watchdog keep-alives.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace tidemark::firmware {

/// A thin wrapper over sd_notify(3) for a Type=notify unit.
///
/// Operation: the constructor reads NOTIFY_SOCKET, and WATCHDOG_USEC/WATCHDOG_PID through
/// sd_watchdog_enabled(3). Without NOTIFY_SOCKET (a shell, a test, `tidemark replay`) every call
/// is a no-op, so the runtime calls it unconditionally. Each call sends one datagram; a send that
/// fails is counted and otherwise ignored: systemd being away must never stop the data path.
///
/// The watchdog keep-alive is driven by the caller, never by a timer thread of its own: the engine
/// loop calls watchdog(now_ms) on every iteration, so a stuck engine stops the keep-alives and
/// systemd restarts the service after WatchdogSec. watchdog() sends at most once per half
/// interval (what sd_watchdog_enabled(3) recommends), so calling it per record costs a
/// comparison, not a syscall.
///
/// Concurrency: watchdog() from one thread only (the engine loop); the other methods keep no
/// state besides an atomic counter and may be called from any thread.
///
/// Limits: a status line is cut to status_bytes_max and its newlines become spaces, so a broker
/// error message cannot end the STATUS= assignment and inject another one (e.g. READY=1).
class Notifier {
  public:
    /// Longest STATUS= text sent; systemctl status shows one line anyway.
    static constexpr std::size_t status_bytes_max = 256;

    Notifier();

    /// True when started by systemd with a notification socket.
    bool enabled() const { return enabled_; }

    /// READY=1: recovery is done and the first broker connection was tried.
    void ready();

    /// STATUS=line: what the service is doing, shown by `systemctl status`.
    void status(std::string_view line);

    /// STOPPING=1: a graceful stop began (final checkpoint, log flush).
    void stopping();

    /// RELOADING=1 (with MONOTONIC_USEC): a SIGHUP reload began; call ready() when it is done,
    /// whether the new config was applied or refused.
    void reloading();

    /// EXTEND_TIMEOUT_USEC: asks for more start (or stop) time while a long recovery still makes
    /// progress; call it again before the extension runs out.
    void extend_timeout(std::chrono::microseconds more);

    /// WATCHDOG=1 if the watchdog is on and half an interval has passed since the last one.
    /// now_ms is a monotonic clock (steady_clock), not the event or ingest time. Returns whether a
    /// keep-alive was sent.
    bool watchdog(int64_t now_ms);

    /// WatchdogSec of the unit, when the watchdog is on for this process.
    std::optional<std::chrono::microseconds> watchdog_interval() const {
        return watchdog_interval_;
    }

    /// Notifications that could not be sent since start (for the health topic).
    uint64_t send_failures() const;

  private:
    void send(const char* state);

    bool enabled_ = false;
    std::optional<std::chrono::microseconds> watchdog_interval_;
    int64_t watchdog_half_interval_ms_ = 0;
    std::optional<int64_t> last_watchdog_ms_;
    // Written from several threads (status from the runtime, watchdog from the engine).
    std::atomic<uint64_t> send_failures_{0};
};

}  // namespace tidemark::firmware
