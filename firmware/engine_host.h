// The engine host: the log, the engine (through the Processor) and the LMDB store, and the
// four things done with them: open, recover, step and checkpoint.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "adapters/config/config.h"
#include "adapters/lmdb/store.h"
#include "adapters/log/log_reader.h"
#include "adapters/log/log_writer.h"
#include "adapters/mqtt/forwarder.h"
#include "adapters/mqtt/redelivery_filter.h"
#include "core/clock.h"
#include "core/result.h"
#include "firmware/alarms.h"
#include "firmware/processor.h"
#include "firmware/result_sinks.h"

namespace tidemark::firmware {

/// The exit status for a config that the stored state cannot follow (EX_CONFIG): the unit's
/// RestartPreventExitStatus keeps systemd from restarting into the same refusal.
inline constexpr int exit_config_conflict = 78;

/// Side output rows dropped at once when the map is full: diagnostic rows go before results
/// do. The figure bounds one read transaction's copy (about 100 MB at 1 KiB a row, on a
/// gateway with 1 GiB); a map still full after it drops more on the next failed write.
inline constexpr size_t side_trim_rows_max = 100'000;

/// Records replayed between two commits of their emissions during recovery: the same bound as
/// a running step (runtime.cpp step_records_max), so that a replay holds no bigger batch in
/// memory than the service does.
inline constexpr uint64_t recovery_flush_records = 4096;

/// What the last checkpoints took, for health.
struct CheckpointStats {
    uint64_t count = 0;       // committed by this process
    int64_t wall_ms = 0;      // of the last committed checkpoint (loaded ones too); 0 none
    int64_t duration_ms = 0;  // of the last committed checkpoint
    uint64_t log_offset = 0;  // of the last committed checkpoint
};

/// Operation: open() opens the store under data_dir/state and the log under data_dir/log;
/// recover() restores the last checkpoint and replays the log after it; step() reads the next
/// records, feeds the engine and commits their emissions to the outbox in one transaction;
/// checkpoint() makes the log durable, then commits the changed state with the log offset.
/// When the outbox (pause_ingest), the map or the disk is full, the batch is kept in memory,
/// the outbox alarm is raised (it pauses ingest) and nothing is checkpointed past emissions
/// that are not in the outbox.
/// Concurrency: the engine thread only, but for log() (its append and sync are the ingest
/// thread's and the ticker's; see LogWriter) and the redelivery filter (the ingest callback's,
/// under runtime's append lock).
/// Limits: one step's results in memory (step's records_max); the map and disk bounds are the
/// store's and the log's.
class EngineHost {
  public:
    /// `config`, `clock` and `alarms` must outlive the host.
    static Result<std::unique_ptr<EngineHost>> open(const config::Config& config,
                                                    const core::Clock& clock, Alarms& alarms);

    /// See ServiceParts::recover.
    Result<uint64_t> recover(const std::function<bool()>& wait_for_room);
    Result<size_t> step(size_t records_max, bool drain);
    bool can_checkpoint() const { return sink_.rows.empty(); }
    Result<void> checkpoint();
    /// Log segments before the last checkpoint go now, whatever their age. Returns bytes freed.
    uint64_t trim_for_disk_full();

    /// Told of every commit to the outbox or side store, so that it sends at once; may be null.
    void set_forwarder(mqtt::Forwarder* forwarder) { forwarder_ = forwarder; }

    log::LogWriter& log() { return *writer_; }
    const log::LogWriter& log() const { return *writer_; }
    const log::LogReader& reader() const { return *reader_; }
    lmdb::Store& store() { return *store_; }
    Processor& processor() { return *processor_; }
    mqtt::RedeliveryFilter& redelivery_filter() { return filter_; }
    /// The next record the engine reads.
    uint64_t consumed_offset() const { return consumed_offset_; }
    const CheckpointStats& checkpoint_stats() const { return checkpoint_; }
    /// Side rows dropped by make_room (the map was full), since open.
    uint64_t side_rows_dropped() const { return side_rows_dropped_; }

  private:
    EngineHost(const config::Config& config, const core::Clock& clock, Alarms& alarms);
    Result<bool> flush();
    bool append_side();
    Result<uint64_t> restore_checkpoint();
    Result<void> seed_redelivery_filter();
    Result<void> drop_removed_pipelines();
    void make_room();
    void note_damage();

    const config::Config& config_;
    const core::Clock& clock_;
    Alarms& alarms_;
    BatchSink sink_;
    std::unique_ptr<lmdb::Store> store_;
    std::unique_ptr<log::LogWriter> writer_;
    std::unique_ptr<log::LogReader> reader_;
    std::unique_ptr<Processor> processor_;
    mqtt::RedeliveryFilter filter_;
    mqtt::Forwarder* forwarder_ = nullptr;

    uint64_t consumed_offset_ = 0;
    CheckpointStats checkpoint_;
    uint64_t pruned_below_seq_ = 0;  // outbox seq of the last committed checkpoint
    uint64_t damage_reported_ = 0;   // damaged regions of the reader already in the journal
    uint64_t side_rows_dropped_ = 0;
};

}  // namespace tidemark::firmware
