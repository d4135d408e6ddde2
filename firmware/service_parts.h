// The parts of the running service that the engine thread owns: store, log, processor, outbox
// batch, forwarder and health. Split from runtime.cpp so that the run loop reads as a loop.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "adapters/config/config.h"
#include "core/result.h"
#include "firmware/adapter_options.h"
#include "firmware/clock.h"

namespace tidemark::log {
class LogWriter;
}
namespace tidemark::lmdb {
class Store;
}
namespace tidemark::mqtt {
class Ingest;
class RedeliveryFilter;
struct BrokerOptions;
}  // namespace tidemark::mqtt

namespace tidemark::firmware {

class Notifier;

/// The exit status for a config that the stored state cannot follow (EX_CONFIG): the unit's
/// RestartPreventExitStatus keeps systemd from restarting into the same refusal.
inline constexpr int exit_config_conflict = 78;

/// Operation: open() opens the LMDB store under data_dir/state and the log under data_dir/log;
/// recover() restores the last checkpoint and replays the log after it; step() reads the next
/// records, feeds the engine and commits their emissions to the outbox in one transaction;
/// checkpoint() makes the log durable, then commits the changed state with the log offset.
/// When the outbox (pause_ingest), the map or the disk is full, the batch is kept in memory,
/// ingest is paused (retry_later: the broker keeps the messages) and an alarm is raised; nothing
/// is checkpointed past emissions that are not in the outbox.
/// Concurrency: everything but log(), redelivery_filter(), ingest_paused(),
/// count_redelivery_skipped(), append_failed() and the health snapshot runs on the engine
/// thread. The ingest callback uses those.
class ServiceParts {
  public:
    static Result<std::unique_ptr<ServiceParts>> open(const config::Config& config);
    ~ServiceParts();

    /// Loads the checkpoint and replays the log to its end. Returns records replayed. While the
    /// outbox, map or disk is full it calls `wait_for_room` (which waits a little, keeps the
    /// watchdog fed, and returns false to give up because the service is stopping) and tries
    /// again: a restart never turns a condition that draining fixes into a crash loop.
    /// State of pipelines no longer in the config is dropped; state of a changed pipeline is
    /// refused with Error::code exit_config_conflict.
    Result<uint64_t> recover(const std::function<bool()>& wait_for_room);
    uint64_t checkpoint_offset() const;
    /// Processes at most `records_max` records (up to the durable end, or the written end when
    /// draining on shutdown) and commits their emissions. Returns records processed.
    Result<size_t> step(size_t records_max, bool drain);
    /// False while emissions wait for room in the outbox.
    bool can_checkpoint() const;
    /// On failure the engine's changes stay marked for the next checkpoint, an alarm stays
    /// raised until one commits, and room is made (ids before the last good checkpoint, side
    /// output) when the map was full.
    Result<void> checkpoint();

    log::LogWriter& log();
    /// The open store, for tests and tools that act as the forwarder (engine thread only).
    lmdb::Store& store();
    mqtt::RedeliveryFilter& redelivery_filter();
    bool ingest_paused() const;
    void count_redelivery_skipped();
    void append_failed(const std::string& message);
    /// Clears the append alarm after a failure; cheap when there was none.
    void append_succeeded();

    /// The disk is full (a log append or an LMDB write said so): log segments before the last
    /// checkpoint go now, whatever their age (they are needed only by replay and backfill).
    /// Returns the bytes freed.
    uint64_t trim_for_disk_full();
    /// Whether a log append or the outbox reports a full disk.
    bool disk_full() const;
    /// Why the log can no longer be written (a failed fdatasync poisoned it), or none.
    std::optional<std::string> log_failure() const;
    /// Whether the engine, at the end of what it has read, takes the clock as trusted.
    bool engine_clock_trusted();
    /// Reads the host clock's state (for health) and returns whether to trust it now.
    bool refresh_clock();

    Result<void> start_forwarder();
    Result<void> start_health();
    void refresh_health(const mqtt::Ingest* ingest);
    std::string status_line() const;
    void reload(const std::string& config_path, Notifier& notifier);
    void stop_clients();

  private:
    struct Impl;
    explicit ServiceParts(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace tidemark::firmware
