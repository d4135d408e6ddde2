// `tidemark sink`: the upstream broker's results into PostgreSQL (DESIGN.md section 10).
#pragma once

#include "adapters/config/sink_config.h"
#include "core/clock.h"
#include "core/result.h"
#include "firmware/service/runtime.h"

namespace tidemark::firmware::sink {

/// Runs the sink until `signals.stop`.
///
/// Operation: opens the spool (spool.h), starts the writer (writer.h: spool to PostgreSQL,
/// reconnecting by itself), the health publisher (retained JSON on sink.health.topic, with
/// online/offline as last will) and ingest: mqtt::Ingest on the upstream broker (persistent
/// session, QoS1, retained messages taken: version records are retained), its handler the
/// spool's, so that a message is durable in the spool before its PUBACK. READY=1 after the
/// first connect attempt. The loop, on the caller's thread, every loop_interval_ms: the
/// spool's interval fsync, back-pressure (ingest stopped while the spool is past three
/// quarters of its bound, the broker keeping the session; started again below half), a retry
/// of ingest's first connect, and the watchdog keep-alive, sent only while the writer shows
/// signs of life (so that systemd restarts a writer stuck past writer_stall_ms). Stop: ingest
/// first (no message is held), then the spool is synced, the writer finishes its commit,
/// health says offline.
/// Limits: the spool's bound (spool.max_bytes); one batch in the writer.
Result<void> run_sink(const config::SinkConfig& config, Signals& signals, const core::Clock& clock);

inline constexpr int64_t loop_interval_ms = 50;
inline constexpr int64_t writer_stall_ms = 45'000;

}  // namespace tidemark::firmware::sink
