// The appliance: ingest -> log -> engine -> outbox -> forwarder, with checkpoints and health.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "adapters/config/config.h"
#include "core/clock.h"
#include "core/result.h"

namespace tidemark::firmware {

struct RunOptions {
    std::string config_path;  // for SIGHUP reloads
};

/// Flags set from signal handlers; the run loop polls them.
struct Signals {
    std::atomic<bool> stop{false};
    std::atomic<bool> reload{false};
};

/// Runs the service until `signals.stop`: recovers (checkpoint + log replay), then ingests,
/// processes, checkpoints and forwards until told to stop; then stops ingest, drains what was
/// logged, takes a final checkpoint and disconnects.
///
/// Operation: three threads of its own (MQTT ingest callbacks, the ticker that appends idle
/// ticks and syncs the log, and the forwarder/health clients' threads) around the engine loop,
/// which runs on the caller's thread and is the only one that touches the engine and LMDB's
/// write transactions.
/// Limits: see DESIGN.md section 5; back-pressure on ingest when the log or the outbox cannot
/// take more.
/// `clock` is what everything in the service reads time through (main passes SystemClock).
Result<void> run_service(const config::Config& config, const RunOptions& options, Signals& signals,
                         const core::Clock& clock);

}  // namespace tidemark::firmware
