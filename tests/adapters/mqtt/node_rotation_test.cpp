// Which node a client tries next (node_rotation.h): the first first, round the list after each
// refused or lost connection, a failover counted only when a link comes up on another node
// than the previous link's, and no move back to a recovered first node while the current works.
#include <catch2/catch.hpp>

#include "adapters/mqtt/node_rotation.h"

using tidemark::mqtt::NodeRotation;

TEST_CASE("the rotation goes round the list and counts failovers", "[mqtt][rotation]") {
    NodeRotation r(3);
    CHECK(r.current() == 0);
    r.connected();  // the first link: not a failover
    CHECK(r.failovers() == 0);
    r.move_on();  // node 0 died
    CHECK(r.current() == 1);
    r.move_on();  // node 1 refused
    CHECK(r.current() == 2);
    r.connected();
    CHECK(r.failovers() == 1);
    r.move_on();  // node 2 died: round the list
    CHECK(r.current() == 0);
    r.connected();
    CHECK(r.failovers() == 2);
    r.move_on();  // lost, then back on the same node after going round: no failover
    r.move_on();
    r.move_on();
    CHECK(r.current() == 0);
    r.connected();
    CHECK(r.failovers() == 2);
}

TEST_CASE("one address: every reconnect is on it, never a failover", "[mqtt][rotation]") {
    NodeRotation r(1);
    r.connected();
    for (int i = 0; i < 5; ++i) {
        r.move_on();
        CHECK(r.current() == 0);
        r.connected();
    }
    CHECK(r.failovers() == 0);
}
