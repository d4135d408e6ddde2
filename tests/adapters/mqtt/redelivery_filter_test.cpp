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

TEST_CASE("the previous connection's last records are recognised once each, by id and bytes",
          "[redelivery]") {
    RedeliveryFilter filter;
    filter.connection_started();
    filter.remember(41, topic, warm);
    filter.remember(42, topic, warm);
    filter.remember(43, topic, cold);
    filter.connection_started();  // the link dropped before the broker had our PUBACKs
    CHECK(filter.is_redelivery(42, topic, warm));
    CHECK(filter.is_redelivery(43, topic, cold));
    // Same bytes but another packet id: a message we never read, not a redelivery.
    CHECK_FALSE(filter.is_redelivery(44, topic, warm));
    // Same packet id, other bytes: not that record either.
    CHECK_FALSE(filter.is_redelivery(41, topic, cold));
    CHECK(filter.is_redelivery(41, topic, warm));
    // Each candidate matches once: a second copy is not dropped.
    CHECK_FALSE(filter.is_redelivery(42, topic, warm));
    CHECK(filter.candidates() == 0);
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

TEST_CASE("candidates not yet redelivered survive a connection that ended before they came",
          "[redelivery]") {
    RedeliveryFilter filter;
    filter.connection_started();
    filter.remember(1, topic, warm);
    filter.remember(2, topic, cold);
    filter.connection_started();
    REQUIRE(filter.is_redelivery(1, topic, warm));
    filter.connection_started();  // cut again before packet 2 came back
    CHECK(filter.is_redelivery(2, topic, cold));
    CHECK(filter.is_redelivery(1, topic, warm));
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
    CHECK(filter.is_redelivery(17, topic, warm));
    CHECK(filter.is_redelivery(18, topic, cold));
    // The seeds are used up: a second message with the same bytes is new.
    CHECK_FALSE(filter.is_redelivery(19, topic, warm));
    // Records the new process takes are candidates only from the next connection on.
    filter.remember(20, topic, warm);
    CHECK_FALSE(filter.is_redelivery(21, topic, warm));
    filter.connection_started();
    CHECK(filter.is_redelivery(20, topic, warm));
    CHECK(filter.is_redelivery(17, topic, warm));  // matched on connection 1, PUBACK lost again
}

TEST_CASE("only the last candidates_max records are candidates", "[redelivery]") {
    RedeliveryFilter filter;
    const auto payload = [](std::size_t i) { return "{\"seq\":" + std::to_string(i) + "}"; };
    const std::size_t total = RedeliveryFilter::candidates_max + 10;
    filter.connection_started();
    for (std::size_t i = 0; i < total; ++i)
        filter.remember(static_cast<int>(i + 1), topic, payload(i));
    filter.connection_started();
    CHECK(filter.candidates() == RedeliveryFilter::candidates_max);
    // Older records were acknowledged long ago: the broker's in-flight window is smaller.
    for (std::size_t i = 0; i < 10; ++i)
        CHECK_FALSE(filter.is_redelivery(static_cast<int>(i + 1), topic, payload(i)));
    for (std::size_t i = 10; i < total; ++i)
        REQUIRE(filter.is_redelivery(static_cast<int>(i + 1), topic, payload(i)));
}

TEST_CASE("topic and payload boundaries are part of the identity", "[redelivery]") {
    RedeliveryFilter filter;
    filter.connection_started();
    filter.remember(5, "ab", "c");
    filter.connection_started();
    CHECK_FALSE(filter.is_redelivery(5, "a", "bc"));
    CHECK(RedeliveryFilter::hash("ab", "c") != RedeliveryFilter::hash("a", "bc"));
}
