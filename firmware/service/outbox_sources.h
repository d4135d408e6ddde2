// The forwarder's sources: the outbox and the side output as rows to publish, each with the
// upstream topic it is routed to: the source owns the topic of a row (the store keeps none; it
// is expanded here from upstream.topic, side_topic and health.topic at each peek).
#pragma once

#include <memory>

#include "adapters/config/config.h"
#include "adapters/lmdb/store.h"
#include "adapters/mqtt/forwarder.h"

namespace tidemark::firmware {

/// The outbox for the forwarder: each row on upstream.topic expanded with its pipeline and key;
/// version records and too-late tallies on that topic without its {key} level, + "/version"
/// (retained) and + "/late".
/// `store` and `config` must outlive it; calls come from the forwarder's thread (the store's
/// read and delete transactions are its own).
std::unique_ptr<mqtt::OutboxSource> make_outbox_source(lmdb::Store& store,
                                                       const config::Config& config);

/// Side output on upstream.side_topic, after the results (the forwarder reads it only when the
/// outbox has nothing to send). Same lifetime and threads as make_outbox_source.
std::unique_ptr<mqtt::OutboxSource> make_side_source(lmdb::Store& store,
                                                     const config::Config& config);

}  // namespace tidemark::firmware
