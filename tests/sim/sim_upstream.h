// The upstream broker and the forwarder, as the simulation plays them: it reads the appliance's
// outbox only while the link is up, the way adapters/mqtt/forwarder_rows.cpp does (peek from
// where it is, which claims the rows; publish; on PUBACK delete, in batches), and keeps
// everything the broker received, in order, duplicates included.
#pragma once

#include <cstdint>
#include <vector>

#include "adapters/lmdb/store.h"
#include "core/result.h"
#include "tests/sim/sim_types.h"

namespace tidemark::sim {

/// Operation: pump() is one forwarder turn: peek up to a batch of rows from its position, the
/// broker receives them; the link may drop part way (the rest of the batch was received but not
/// acknowledged: sent again after the reconnect); acknowledged rows are deleted now or at a
/// later turn (a crash before that sends them again). attach() is a new forwarder after a
/// start: it begins at the oldest row.
/// Limits: one store at a time; what it received grows with the run (bounded by the outbox's
/// rows, a few thousand a seed).
class Upstream {
  public:
    void attach(lmdb::Store* store);
    /// The appliance is gone (a crash): its acknowledged rows not deleted are sent again later.
    void detach();
    void set_up(bool up);
    bool up() const { return up_; }
    Result<void> pump(Rng& rng, size_t batch_max);
    /// Until the outbox is empty (the end of the run); the link is up.
    Result<void> drain(Rng& rng);
    const std::vector<Received>& received() const { return received_; }

  private:
    Result<void> flush_deletes();

    lmdb::Store* store_ = nullptr;
    bool up_ = true;
    uint64_t next_seq_ = 0;
    std::vector<uint64_t> acknowledged_;  // not yet deleted
    std::vector<Received> received_;
};

}  // namespace tidemark::sim
