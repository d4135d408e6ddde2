// The forwarder's time decisions follow the clock it is given, not the host's.
#include "adapters/mqtt/forwarder_timing.h"

#include <catch2/catch.hpp>

#include "tests/support/manual_clock.h"

using tidemark::mqtt::LinkTimers;
using tidemark::test::ManualClock;

TEST_CASE("the ack timeout, delete interval and outbox look are decided by the given clock",
          "[forwarder]") {
    ManualClock clock;
    LinkTimers timers(clock, /*ack_timeout_ms=*/30'000, /*delete_interval_ms=*/50,
                      /*poll_interval_ms=*/1'000);
    timers.connecting();
    timers.connected();
    timers.looked();

    clock.advance(30'000);
    CHECK_FALSE(timers.ack_overdue());  // exactly the timeout: not yet
    CHECK(timers.look_due());
    clock.advance(1);
    CHECK(timers.ack_overdue());
    CHECK(timers.since_connected_ms() == 30'001);

    // An acknowledgement restarts the wait; so does a publish into an empty window.
    timers.acknowledged();
    CHECK_FALSE(timers.ack_overdue());
    clock.advance(20'000);
    timers.sent_into_empty_window();
    clock.advance(20'000);
    CHECK_FALSE(timers.ack_overdue());
    clock.advance(10'001);
    CHECK(timers.ack_overdue());

    // The first undeleted acknowledgement starts the delete interval.
    timers.first_undeleted();
    CHECK(timers.delete_due_in_ms() == 50);
    CHECK_FALSE(timers.delete_due());
    clock.advance(49);
    CHECK(timers.delete_due_in_ms() == 1);
    clock.advance(1);
    CHECK(timers.delete_due());
    CHECK(timers.delete_due_in_ms() == 0);

    // The wall clock stepping (NTP) moves none of them.
    timers.looked();
    clock.set_wall(0);
    CHECK_FALSE(timers.look_due());
}
