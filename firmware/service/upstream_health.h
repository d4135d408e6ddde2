// health.upstream: the gateway's health record through the outbox to the upstream broker,
// latest only, so that one broker (and the sink's `health` table) shows a whole fleet.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "adapters/config/config.h"
#include "adapters/lmdb/store.h"
#include "core/clock.h"

namespace tidemark::firmware {

/// The outbox row of one health record: OutboxRow::health_record, with an id no result can have
/// (a hash of "health-record", the node and the outbox's seq_next, which no two rows share).
lmdb::OutboxRow health_outbox_row(std::string_view node, uint64_t seq_next, std::string record,
                                  int64_t now_wall_ms);

/// Operation: offer() appends the health record just built as a health row every
/// health.interval, and at once when the alarms changed (as the health topic gets it). The
/// store replaces the health row still waiting (lmdb::outbox_health_rows_max): an outage of any
/// length leaves one health record in the outbox, the latest. A record that would take the
/// outbox past upstream.outbox.max_bytes is not appended (counted in skipped): health never
/// costs a result its place, nor pauses ingest. A failed append is logged and counted the same
/// way; the next interval tries again.
/// Concurrency: the engine thread (it appends to the outbox as the engine host does).
/// Limits: one row in the outbox, one record's bytes.
class UpstreamHealth {
  public:
    /// `config` and `clock` must outlive it.
    UpstreamHealth(const config::Config& config, const core::Clock& clock);
    /// Whether offer() would append now.
    bool due(bool alarms_changed) const;
    /// Appends `record` when due; returns whether it did (the caller then wakes the forwarder).
    bool offer(lmdb::Store& store, const std::string& record, bool alarms_changed);
    uint64_t queued() const { return queued_; }
    uint64_t skipped() const { return skipped_; }

  private:
    const config::Config& config_;
    const core::Clock& clock_;
    std::optional<int64_t> offered_ms_;  // steady, the last offer that was due
    uint64_t queued_ = 0;
    uint64_t skipped_ = 0;
    bool failing_ = false;  // logged once per failing spell
};

}  // namespace tidemark::firmware
