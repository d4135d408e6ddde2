// The engine host: the log, the engine (through the Processor) and the LMDB store, and the
// four things done with them: open, recover, step and checkpoint.
#pragma once

#include <cstdint>
#include <expected>
#include <functional>
#include <memory>
#include <string>

#include "adapters/config/config.h"
#include "adapters/lmdb/store.h"
#include "adapters/log/log_reader.h"
#include "adapters/log/log_writer.h"
#include "adapters/mqtt/forwarder.h"
#include "core/clock.h"
#include "core/result.h"
#include "firmware/service/alarms.h"
#include "firmware/service/backfill.h"
#include "firmware/service/processor.h"
#include "firmware/service/result_sinks.h"
#include "firmware/service/versions.h"

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

/// Results committed during recovery between two checkpoints of it. Every result's id stays in
/// the outbox's dedupe index until a checkpoint covers it, so a recovery over a long history
/// (a new pipeline at a store's first start over a retained log, or an old checkpoint) that
/// checkpointed only at its end grew that index by one entry a result: 259 M for 30 days of
/// one device-minute window per message, past any map. At this bound the index holds at most
/// two generations of ~0.26 M ids (~30 MB), one checkpoint per ~0.3 s of a fast replay.
inline constexpr uint64_t recovery_checkpoint_rows = uint64_t{1} << 18;

/// A backfill slice reads for at most backfill.max_live_delay / this (20 ms at the default
/// 200 ms): a live record arriving during a slice waits for the rest of it and its commit.
inline constexpr int backfill_read_slices_per_live_delay = 10;

/// What the last checkpoints took, for health.
struct CheckpointStats {
    uint64_t count = 0;       // committed by this process
    int64_t wall_ms = 0;      // of the last committed checkpoint (loaded ones too); 0 none
    int64_t duration_ms = 0;  // of the last committed checkpoint
    uint64_t log_offset = 0;  // of the last committed checkpoint
};

/// A running backfill, for health and inspect.
struct BackfillFigures {
    std::string pipeline;
    std::string version;
    uint64_t offset = 0;            // the next record it reads
    uint64_t end_offset = 0;        // the live position it catches up with
    uint64_t records = 0;           // read by this process
    double records_per_s = 0;       // over the wall time since it started in this process
    double busy_records_per_s = 0;  // over the time its slices took: reading and committing
    double cpu_records_per_s = 0;   // over the engine thread's CPU time in its slices
    double eta_s = -1;              // at the current share; -1 unknown
};

/// A version made live by this process (health's backfill state "switched").
struct SwitchFigures {
    std::string pipeline;
    std::string version;
    int64_t since_ms = 0;
};

/// Operation: open() opens the store under data_dir/state and the log under data_dir/log;
/// recover() restores the last checkpoint and replays the log after it; step() reads the next
/// records, feeds the engine and commits their emissions to the outbox in one transaction;
/// checkpoint() makes the log durable, then commits the changed state with the log offset.
/// When the outbox (pause_ingest), the map or the disk is full, the batch is kept in memory,
/// the outbox alarm is raised (it pauses ingest) and nothing is checkpointed past emissions
/// that are not in the outbox.
/// Concurrency: the engine thread only, but for log(): its appends are the LogAppender's (the
/// ingest callback, the ticker's idle ticks and the loop's clock markers, under the appender's
/// one lock) and its interval sync the Ticker's (see LogWriter); the host itself only reads
/// the log's offsets and syncs it before a checkpoint.
/// Pipeline versions (DESIGN.md section 4, versions.h): the live processor runs, for each
/// pipeline, the version the store names live (from its stored definition when the config has
/// moved on); each new version of the config runs as a BackfillRun from the oldest retained
/// record, stepped by backfill_step() within backfill.max_share, and switch_version() makes it
/// live in one checkpoint once it reaches the live position. recover(), reconfigure() and a
/// switch all end in load_from_store(): the plan from the stored registry and the wanted config,
/// then every processor restored from the committed state. So a restart and a reload do the
/// same, and a switch is a checkpoint and a restore, which the restore property covers.
/// Limits: one step's results in memory (step's records_max); the map and disk bounds are the
/// store's and the log's; while a pipeline backfills it keeps two versions' state.
class EngineHost {
  public:
    /// `config`, `clock` and `alarms` must outlive the host.
    static Result<std::unique_ptr<EngineHost>> open(const config::Config& config,
                                                    const core::Clock& clock, Alarms& alarms);

    /// Loads the checkpoint and replays the log to its end. Returns records replayed. While the
    /// outbox, map or disk is full it calls `wait_for_room` (which waits a little, keeps the
    /// watchdog fed, and returns false to give up because the service is stopping) and tries
    /// again: a restart never turns a condition that draining fixes into a crash loop.
    /// State of pipelines no longer in the config is dropped; state of a changed pipeline is
    /// refused with Error::code exit_config_conflict.
    Result<uint64_t> recover(const std::function<bool()>& wait_for_room);
    /// Results between two checkpoints of a recovery (recovery_checkpoint_rows; tests lower it).
    void set_recovery_checkpoint_rows(uint64_t rows) { recovery_checkpoint_rows_ = rows; }
    /// Processes at most `records_max` records (up to the durable end, or the written end when
    /// draining on shutdown) and commits their emissions. Returns records processed.
    Result<size_t> step(size_t records_max, bool drain);
    /// Backfill work within the share (a token bucket: max_share of the steady time in, each
    /// slice's CPU time out; a slice at most max_live_delay, reading at most a tenth of it); a
    /// run that reaches the live position switches. Returns records read.
    Result<size_t> backfill_step(size_t records_max);
    bool backfilling() const { return !backfills_.empty(); }
    /// Applies another config's pipelines and backfill settings: a checkpoint, then every
    /// processor planned and restored anew. Fails (and changes nothing) when the checkpoint
    /// cannot commit; the caller keeps the old config then.
    Result<void> reconfigure(const config::Config& wanted);
    /// False while emissions wait for room in the outbox.
    bool can_checkpoint() const { return sink_->rows.empty(); }
    /// On failure the engine's changes stay marked for the next checkpoint, an alarm stays
    /// raised until one commits, and room is made (ids before the last good checkpoint, side
    /// output) when the map was full.
    Result<void> checkpoint();
    /// The disk is full (a log append or an LMDB write said so): log segments before the last
    /// checkpoint go now, whatever their age (they are needed only by replay and backfill).
    /// Returns the bytes freed.
    uint64_t trim_for_disk_full();

    /// Told of every commit to the outbox or side store, so that it sends at once; may be null.
    void set_forwarder(mqtt::Forwarder* forwarder) { forwarder_ = forwarder; }

    log::LogWriter& log() { return *writer_; }
    const log::LogWriter& log() const { return *writer_; }
    const log::LogReader& reader() const { return *reader_; }
    lmdb::Store& store() { return *store_; }
    Processor& processor() { return *processor_; }
    /// The config the live processor runs: the wanted one's pipelines whose version is live,
    /// and previous versions (stored definitions) while their successors backfill.
    const config::Config& live_config() const { return live_config_; }
    std::vector<BackfillFigures> backfill_figures() const;
    const std::vector<SwitchFigures>& switches() const { return switches_; }
    const VersionRegistry& versions() const { return registry_; }
    /// The version of `pipeline` that runs live; empty when none does. Before recover() planned
    /// the versions, the one the store names (health's first record comes before recovery).
    std::string live_version(std::string_view pipeline) const;
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
    void make_room();
    void note_damage();
    // engine_host_versions.cpp
    Result<void> load_versions();
    Result<void> plan_versions();
    Result<void> load_from_store();
    std::expected<uint64_t, lmdb::StoreError> commit_state(
        const std::function<void(lmdb::CheckpointTxn&, VersionRegistry&)>& extra);
    Result<void> restore_entry(std::string_view key, std::string_view value);
    void write_versions(lmdb::CheckpointTxn& txn, VersionRegistry& next);
    Result<bool> switch_version(BackfillRun& run);
    void queue_version_record(const VersionEntry& entry);
    void queue_version_records();
    uint64_t retention_offset() const;
    int64_t live_ingest_ms() const;  // the newest record the live processor read; 0 none
    uint64_t prune_bound(uint64_t seq_next) const;
    void hold_resumed_backfill(VersionEntry& entry, uint64_t checkpoint_seq);
    Result<void> rewind_backfill(BackfillRun& run);

    config::Config config_;       // as wanted (reconfigure replaces it)
    config::Config live_config_;  // what processor_ runs
    const core::Clock& clock_;
    Alarms& alarms_;
    std::unique_ptr<BatchSink> sink_;
    std::unique_ptr<lmdb::Store> store_;
    std::unique_ptr<log::LogWriter> writer_;
    std::unique_ptr<log::LogReader> reader_;
    std::unique_ptr<Processor> processor_;
    std::vector<std::unique_ptr<BackfillRun>> backfills_;
    VersionRegistry registry_;
    // Written by the next checkpoint before the processors' state: what the last plan dropped
    // (abandoned backfills, removed pipelines).
    std::vector<std::string> erase_prefixes_;
    std::vector<std::string> erase_keys_;
    // Version records waiting for the outbox, after the rows of the step that made them.
    std::vector<lmdb::OutboxRow> version_rows_;
    std::vector<SwitchFigures> switches_;
    bool planned_ = false;
    // As open() found it (none: a store from before versions, or a new one): load_versions()
    // starts from it, live_version() answers from it before the plan.
    std::optional<VersionRegistry> stored_registry_;
    // A backfill whose slice found no room waits until then (steady ms), longer each time.
    int64_t backfill_resume_ms_ = 0;
    int64_t backfill_wait_ms_ = 0;
    uint64_t checkpoint_seq_next_ = 0;  // the outbox seq the last committed checkpoint recorded
    uint64_t recovery_checkpoint_rows_ = recovery_checkpoint_rows;
    double backfill_credit_ms_ = 0;
    double backfill_read_fraction_ = 0.5;  // of a slice, reading (the rest: its commit)
    int64_t backfill_refill_ms_ = 0;
    mqtt::Forwarder* forwarder_ = nullptr;

    uint64_t consumed_offset_ = 0;
    CheckpointStats checkpoint_;
    uint64_t pruned_below_seq_ = 0;  // outbox seq of the last committed checkpoint
    uint64_t damage_reported_ = 0;   // damaged regions of the reader already in the journal
    uint64_t side_rows_dropped_ = 0;
};

}  // namespace tidemark::firmware
