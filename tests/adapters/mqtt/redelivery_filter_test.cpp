#include "adapters/mqtt/redelivery_filter.h"

#include <catch2/catch.hpp>
#include <string>

using tidemark::mqtt::RedeliveryFilter;

TEST_CASE("a redelivered record that was appended is recognised", "[redelivery]") {
    RedeliveryFilter filter;
    CHECK_FALSE(filter.seen("sensors/dev-1/telemetry", R"({"seq":1})"));
    filter.remember("sensors/dev-1/telemetry", R"({"seq":1})");
    CHECK(filter.seen("sensors/dev-1/telemetry", R"({"seq":1})"));
    // Same payload on another topic, or another payload on the same topic, is a new record.
    CHECK_FALSE(filter.seen("sensors/dev-2/telemetry", R"({"seq":1})"));
    CHECK_FALSE(filter.seen("sensors/dev-1/telemetry", R"({"seq":2})"));
}

TEST_CASE("topic and payload boundaries are part of the identity", "[redelivery]") {
    RedeliveryFilter filter;
    filter.remember("ab", "c");
    CHECK_FALSE(filter.seen("a", "bc"));
    CHECK(RedeliveryFilter::hash("ab", "c") != RedeliveryFilter::hash("a", "bc"));
}

TEST_CASE("the filter holds the last `capacity` records and no more", "[redelivery]") {
    RedeliveryFilter filter;
    const auto payload = [](std::size_t i) { return "{\"seq\":" + std::to_string(i) + "}"; };
    const std::size_t total = RedeliveryFilter::capacity + 10;
    for (std::size_t i = 0; i < total; ++i)
        filter.remember("t", payload(i));
    CHECK(filter.size() == RedeliveryFilter::capacity);
    // The oldest ten were evicted; everything after them is still recognised.
    for (std::size_t i = 0; i < 10; ++i)
        CHECK_FALSE(filter.seen("t", payload(i)));
    for (std::size_t i = 10; i < total; ++i)
        REQUIRE(filter.seen("t", payload(i)));
}
