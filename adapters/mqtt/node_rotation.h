// Which of a broker's addresses a client tries next (DESIGN.md section 11): the first first,
// then round the list after every refused or lost connection, with a count of failovers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "core/result.h"

namespace tidemark::mqtt {

/// Operation: current() is the address to try (or the one the link is up on): the first at the
/// start. A refused or failed attempt, and the loss of a connection that was up, move it to the
/// next address, round the list (move_on()); connected() says the link is up on current(). A
/// link up on another address than the one it was last up on is a failover: the count health
/// shows. A client stays on a node that works: once the first node is back, nothing moves there
/// until the current one fails.
/// Concurrency: one thread (the client's own); stats are copied out under the client's lock.
/// Limits: none of its own; the list is BrokerOptions::addresses (broker_addresses_max).
class NodeRotation {
  public:
    explicit NodeRotation(std::size_t addresses) : addresses_(addresses) {
        TM_ASSERT(addresses > 0);
    }

    std::size_t current() const { return current_; }
    /// The attempt on current() failed, or its connection was lost: the next one, round the list.
    void move_on() { current_ = (current_ + 1) % addresses_; }
    /// The link is up on current().
    void connected() {
        if (last_up_ && *last_up_ != current_) ++failovers_;
        last_up_ = current_;
    }
    /// Links made up on another address than the previous link's.
    uint64_t failovers() const { return failovers_; }

  private:
    std::size_t addresses_;
    std::size_t current_ = 0;
    std::optional<std::size_t> last_up_;
    uint64_t failovers_ = 0;
};

}  // namespace tidemark::mqtt
