// What the broker can redeliver after a reconnect, and what only looks like it.
#include "adapters/mqtt/redelivery_filter.h"

#include <catch2/catch.hpp>
#include <string>

using tidemark::mqtt::RedeliveryFilter;

namespace {
const std::string topic = "sensors/dev-1/telemetry";
// Readings without a time stamp: the same bytes come back often.
const std::string warm = R"({"temp":21.5})";
const std::string cold = R"({"temp":18.0})";
}  // namespace

TEST_CASE("a never-read message flagged DUP whose bytes repeat a record of this connection is new",
          "[redelivery]") {
    RedeliveryFilter filter;
    filter.connection_started();
    filter.remember(1, topic, warm);
    filter.remember(2, topic, cold);
    // Sent by the broker on an earlier connection that ended before we read it: it comes back
    // with DUP and a packet id that no record has.
    CHECK_FALSE(filter.is_redelivery(3, topic, warm));
    CHECK_FALSE(filter.is_redelivery(4, topic, cold));
    // Not even with a packet id of a record of the current connection: the broker redelivers
    // only what was in flight when a connection started.
    CHECK_FALSE(filter.is_redelivery(1, topic, warm));
}

TEST_CASE("the previous connection's unacknowledged records are recognised once each, in order",
          "[redelivery]") {
    RedeliveryFilter filter;
    filter.connection_started();
    filter.remember(41, topic, warm);
    filter.remember(42, topic, warm);
    filter.remember(43, topic, cold);
    filter.connection_started();  // the link dropped before the broker had our last 2 PUBACKs
    CHECK(filter.is_redelivery(42, topic, warm));
    CHECK(filter.is_redelivery(43, topic, cold));
    // The run is over: a never-read message with the bytes and even the id of a record is new.
    CHECK_FALSE(filter.is_redelivery(44, topic, warm));
    CHECK_FALSE(filter.is_redelivery(41, topic, warm));
    CHECK(filter.candidates() == 0);
}

TEST_CASE("a DUP message that breaks the run, and every one after it, is new", "[redelivery]") {
    RedeliveryFilter filter;
    filter.connection_started();
    filter.remember(1, topic, warm);
    filter.remember(2, topic, cold);
    filter.remember(3, topic, warm);
    filter.connection_started();
    REQUIRE(filter.is_redelivery(1, topic, warm));
    // Same id, other bytes: not record 2, and the broker resends in order: the run is over.
    CHECK_FALSE(filter.is_redelivery(2, topic, warm));
    CHECK_FALSE(filter.is_redelivery(3, topic, warm));
}

TEST_CASE("a skipped redelivery whose PUBACK is lost again is skipped on the next connection",
          "[redelivery]") {
    RedeliveryFilter filter;
    filter.connection_started();
    filter.remember(7, topic, warm);
    filter.connection_started();
    REQUIRE(filter.is_redelivery(7, topic, warm));
    filter.remember(8, topic, cold);
    filter.connection_started();
    CHECK(filter.is_redelivery(7, topic, warm));
    CHECK(filter.is_redelivery(8, topic, cold));
    CHECK_FALSE(filter.is_redelivery(7, topic, warm));
}

TEST_CASE("records not yet redelivered survive a connection that ended before they came",
          "[redelivery]") {
    RedeliveryFilter filter;
    filter.connection_started();
    filter.remember(1, topic, warm);
    filter.remember(2, topic, cold);
    filter.connection_started();
    REQUIRE(filter.is_redelivery(1, topic, warm));
    filter.connection_started();  // cut again before packet 2 came back
    CHECK(filter.is_redelivery(1, topic, warm));
    CHECK(filter.is_redelivery(2, topic, cold));
    CHECK_FALSE(filter.is_redelivery(3, topic, cold));  // never read: new
}

TEST_CASE("after a restart the seeded tail of the log matches any packet id, once per record",
          "[redelivery]") {
    RedeliveryFilter filter;
    // The runtime seeds the last candidates_max message records of the log, wherever the
    // checkpoint is: after a clean stop there are none after it.
    filter.seed(topic, cold);
    filter.seed(topic, warm);
    filter.connection_started();
    CHECK(filter.is_redelivery(17, topic, cold));
    CHECK(filter.is_redelivery(18, topic, warm));
    // The seeds are used up: a second message with the same bytes is new.
    CHECK_FALSE(filter.is_redelivery(19, topic, warm));
    filter.remember(19, topic, warm);
    // Records the new process takes are candidates only from the next connection on.
    filter.remember(20, topic, warm);
    CHECK_FALSE(filter.is_redelivery(21, topic, warm));
    filter.connection_started();
    CHECK(filter.is_redelivery(18, topic, warm));  // matched on connection 1, PUBACK lost again
    CHECK(filter.is_redelivery(19, topic, warm));
    CHECK(filter.is_redelivery(20, topic, warm));
}

TEST_CASE("a backlog of tens of thousands unacknowledged is recognised after a restart",
          "[redelivery]") {
    // mosquitto 2.0.11 sends a resumed session its whole backlog at once: after a kill -9 it
    // had read only the first PUBACKs of 20000 logged messages.
    const auto payload = [](std::size_t i) { return "{\"seq\":" + std::to_string(i) + "}"; };
    const std::size_t logged = 20000, acknowledged = 300, never_read = 5000;
    RedeliveryFilter filter;
    for (std::size_t i = 0; i < logged; ++i)
        filter.seed(topic, payload(i));
    filter.connection_started();
    std::size_t skipped = 0;
    for (std::size_t i = acknowledged; i < logged + never_read; ++i)
        if (filter.is_redelivery(static_cast<int>(i % 65535 + 1), topic, payload(i))) ++skipped;
    CHECK(skipped == logged - acknowledged);
}

TEST_CASE("repeated bytes: the run follows the log's order, a never-read message is new",
          "[redelivery]") {
    RedeliveryFilter filter;
    // warm warm cold warm: the broker had the first two PUBACKs.
    filter.seed(topic, warm);
    filter.seed(topic, warm);
    filter.seed(topic, cold);
    filter.seed(topic, warm);
    filter.connection_started();
    CHECK(filter.is_redelivery(3, topic, cold));
    CHECK(filter.is_redelivery(4, topic, warm));
    // Never read, same bytes as seeded records: after the run ended, new.
    CHECK_FALSE(filter.is_redelivery(5, topic, warm));
    CHECK_FALSE(filter.is_redelivery(6, topic, warm));
}

TEST_CASE("only the last candidates_max records are candidates", "[redelivery]") {
    RedeliveryFilter filter;
    const auto payload = [](std::size_t i) { return "{\"seq\":" + std::to_string(i) + "}"; };
    const std::size_t total = RedeliveryFilter::candidates_max + 10;
    filter.connection_started();
    for (std::size_t i = 0; i < total; ++i)
        filter.remember(static_cast<int>(i % 65535 + 1), topic, payload(i));
    filter.connection_started();
    CHECK(filter.candidates() == RedeliveryFilter::candidates_max);
    // The oldest fell out of the window: the broker cannot have more unacknowledged than that.
    CHECK_FALSE(filter.is_redelivery(1, topic, payload(0)));
    filter.connection_started();
    for (std::size_t i = 10; i < total; ++i)
        REQUIRE(filter.is_redelivery(static_cast<int>(i % 65535 + 1), topic, payload(i)));
}

TEST_CASE("topic and payload boundaries are part of the identity", "[redelivery]") {
    RedeliveryFilter filter;
    filter.connection_started();
    filter.remember(5, "ab", "c");
    filter.connection_started();
    CHECK_FALSE(filter.is_redelivery(5, "a", "bc"));
    CHECK(RedeliveryFilter::hash("ab", "c") != RedeliveryFilter::hash("a", "bc"));
}
