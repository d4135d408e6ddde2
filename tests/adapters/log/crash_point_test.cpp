// The after_log_append crash point kills the process right after an append returns: the
// records appended up to and including that one are in the log.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>

#include "firmware/crash_arm.h"
#include "log_test_support.h"

using namespace tidemark::log;
using namespace tidemark::log::test;

// Run in a fresh process (crash points read TIDEMARK_CRASH_AT once per process): appends ten
// records to $TM_LOG_CRASH_DIR. Hidden from normal runs by the "[.]" tag.
TEST_CASE("crash child: append ten records", "[.crash-child]") {
    const char* dir = std::getenv("TM_LOG_CRASH_DIR");
    if (dir == nullptr) return;
    tidemark::firmware::arm_crash_points_from_env();
    auto writer = LogWriter::open(options_for(dir, 200));
    if (!writer) ::_exit(2);
    for (int i = 0; i < 10; ++i) {
        (void)(*writer)->append(RecordType::message, i, "t",
                                payload_of(static_cast<size_t>(i), 64));
    }
    ::_exit(0);  // not reached if the crash point works
}

TEST_CASE("TIDEMARK_CRASH_AT=after_log_append:N kills at the Nth append", "[log][crash]") {
#if !defined(TIDEMARK_CRASH_POINTS)
    WARN("built without TIDEMARK_CRASH_POINTS: nothing to test");
#else
    TempDir tmp;
    std::string dir = tmp.sub("log");
    REQUIRE(run_crash_child("log_test", "[.crash-child]", "after_log_append:5", dir) == 137);
    auto records = read_all(dir);
    REQUIRE(records.size() == 5);
    REQUIRE(records.back().payload == payload_of(4, 64));
#endif
}
