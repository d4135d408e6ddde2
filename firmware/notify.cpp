#include "firmware/notify.h"

#include <systemd/sd-daemon.h>

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <string>

#include "core/result.h"

namespace tidemark::firmware {

Notifier::Notifier() {
    const char* socket_path = std::getenv("NOTIFY_SOCKET");
    enabled_ = socket_path != nullptr && socket_path[0] != '\0';
    if (!enabled_) return;
    // unset_environment=0: the variables stay for the whole process, which spawns no children;
    // sd_watchdog_enabled checks WATCHDOG_PID, so a stray child would not send keep-alives anyway.
    uint64_t interval_us = 0;
    if (sd_watchdog_enabled(0, &interval_us) > 0 && interval_us > 0) {
        watchdog_interval_ = std::chrono::microseconds(static_cast<int64_t>(interval_us));
        watchdog_half_interval_ms_ = static_cast<int64_t>(interval_us / 2000);
    }
}

void Notifier::ready() {
    send("READY=1");
}

void Notifier::status(std::string_view line) {
    std::string state = "STATUS=";
    const std::string_view kept = line.substr(0, std::min(line.size(), status_bytes_max));
    state.append(kept);
    // One line: a newline would start a new assignment in the datagram.
    std::replace_if(
        state.begin(), state.end(), [](char c) { return c == '\n' || c == '\r' || c == '\0'; },
        ' ');
    send(state.c_str());
}

void Notifier::stopping() {
    send("STOPPING=1");
}

void Notifier::reloading() {
    // systemd >= 253 (Type=notify-reload) wants MONOTONIC_USEC with RELOADING=1 to tell this
    // reload from an older one; 252 (Debian 12) ignores it.
    timespec now{};
    clock_gettime(CLOCK_MONOTONIC, &now);
    const int64_t now_us = static_cast<int64_t>(now.tv_sec) * 1'000'000 + now.tv_nsec / 1000;
    const std::string state = "RELOADING=1\nMONOTONIC_USEC=" + std::to_string(now_us);
    send(state.c_str());
}

void Notifier::extend_timeout(std::chrono::microseconds more) {
    TM_ASSERT(more.count() > 0);
    const std::string state = "EXTEND_TIMEOUT_USEC=" + std::to_string(more.count());
    send(state.c_str());
}

bool Notifier::watchdog(int64_t now_ms) {
    if (!watchdog_interval_) return false;
    // A clock that went back (it should not: the caller passes a monotonic clock) sends: a spare
    // keep-alive is harmless, a missing one restarts the service.
    const bool due = !last_watchdog_ms_ || now_ms < *last_watchdog_ms_ ||
                     now_ms - *last_watchdog_ms_ >= watchdog_half_interval_ms_;
    if (!due) return false;
    last_watchdog_ms_ = now_ms;
    send("WATCHDOG=1");
    return true;
}

uint64_t Notifier::send_failures() const {
    return send_failures_.load(std::memory_order_relaxed);
}

void Notifier::send(const char* state) {
    if (!enabled_) return;
    // sd_notify returns 0 when NOTIFY_SOCKET vanished and < 0 on a failed send.
    if (sd_notify(0, state) <= 0) send_failures_.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace tidemark::firmware
