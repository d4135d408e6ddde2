#include "firmware/clock.h"

#include <sys/timex.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <fstream>

#include "core/result.h"

namespace tidemark::firmware {

int64_t SystemClock::wall_ms() const {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

int64_t SystemClock::steady_ms() const {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

int64_t SystemClock::thread_cpu_us() const {
    timespec t{};
    const int rc = ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    TM_ASSERT(rc == 0);  // the calling thread's own clock: a valid id, a valid pointer
    return int64_t{t.tv_sec} * 1'000'000 + t.tv_nsec / 1000;
}

namespace {

bool exists(const char* path) {
    return ::access(path, F_OK) == 0;
}

// The service that would synchronise the clock, by the runtime files each keeps while running.
std::string sync_service() {
    if (exists("/run/systemd/timesync")) return "systemd-timesyncd";
    if (exists("/run/chrony") || exists("/run/chrony/chronyd.pid")) return "chronyd";
    if (exists("/run/ntpd.pid") || exists("/var/run/ntpd.pid") || exists("/run/ntp.conf.dhcp"))
        return "ntpd";
    return "";
}

}  // namespace

ClockStatus read_clock_status(config::ClockTrust trust) {
    ClockStatus s;
    s.sync_service = sync_service();
    if (const char* override_path = std::getenv("TIDEMARK_CLOCK_STATUS")) {
        std::ifstream in(override_path);
        std::string word;
        in >> word;
        s.kernel_readable = true;
        s.kernel_synchronised = word == "synchronised";
        if (s.sync_service.empty()) s.sync_service = "test";
    } else {
        struct timex tx {};
        tx.modes = 0;  // read only: needs no privilege (the unit allows this one call)
        const int state = ::adjtimex(&tx);
        if (state >= 0) {
            s.kernel_readable = true;
            s.kernel_synchronised = state != TIME_ERROR && (tx.status & STA_UNSYNC) == 0;
        } else {
            s.kernel_synchronised = exists("/run/systemd/timesync/synchronized");
        }
    }
    switch (trust) {
        case config::ClockTrust::always:
            s.trusted = true;
            break;
        case config::ClockTrust::synchronised:
            s.trusted = s.kernel_synchronised;
            break;
        case config::ClockTrust::automatic:
            s.trusted = s.kernel_synchronised || s.sync_service.empty();
            break;
    }
    return s;
}

}  // namespace tidemark::firmware
