// One backfilling pipeline version: its own processor and log reader, behind the live position.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "adapters/config/config.h"
#include "adapters/log/log_reader.h"
#include "core/clock.h"
#include "core/result.h"
#include "firmware/service/processor.h"
#include "firmware/service/result_sinks.h"

namespace tidemark::firmware {

/// Operation: a Processor over a config of this one pipeline version (its state under
/// backfill_state_name, so it lives beside the live version's), fed by its own LogReader from
/// its offset up to the live engine's position: the code path of live and replay, so the
/// version's results are replay's. step() reads until the live position, a record budget or a
/// deadline; the host commits the sink's rows and, once the run is at the live position, makes
/// the version live (EngineHost::switch_version).
/// Concurrency: the engine thread only.
/// Limits: the pipeline's limits, as live; one step's rows in memory.
class BackfillRun {
  public:
    static Result<std::unique_ptr<BackfillRun>> create(const config::Config& base,
                                                       const config::PipelineConfig& pipeline,
                                                       const std::string& log_dir, uint64_t offset,
                                                       int64_t from_ms);

    /// Feeds records from offset() up to `end`, at most `records_max`, until `deadline_ms` of
    /// `clock`'s steady time (checked every few records). Returns records read.
    Result<size_t> step(uint64_t end, size_t records_max, int64_t deadline_ms,
                        const core::Clock& clock);

    const std::string& name() const { return pipeline_.spec.name; }
    const std::string& version() const { return pipeline_.spec.version; }
    const std::string& definition() const { return pipeline_.definition; }
    const std::string& state_name() const { return config_.pipelines[0].spec.state_name; }
    Processor& processor() { return *processor_; }
    BatchSink& sink() { return *sink_; }
    uint64_t offset() const { return offset_; }
    int64_t from_ms() const { return from_ms_; }
    /// The oldest event time it fed, over its restarts (INT64_MAX before any).
    int64_t since_ms() const { return since_ms_; }
    /// Steady time of its first step in this process (0 before).
    int64_t started_ms() const { return started_ms_; }
    void set_since_ms(int64_t ms) { since_ms_ = ms; }
    /// Whether it continues a backfill whose state is stored (else it starts afresh and stored
    /// entries of its state name are not its own).
    bool resumed() const { return resumed_; }
    void set_resumed(bool resumed) { resumed_ = resumed; }
    /// The offset it started from in this process.
    uint64_t first_offset() const { return first_offset_; }
    /// Records read by this process.
    uint64_t records() const { return records_; }
    /// The host's account of a slice: its steady time (reading and committing what it read)
    /// and the engine thread's CPU time in it.
    void add_slice(int64_t busy_ms, int64_t cpu_us) {
        busy_ms_ += busy_ms;
        cpu_us_ += cpu_us;
    }
    /// The sums of add_slice's figures.
    int64_t busy_ms() const { return busy_ms_; }
    int64_t cpu_us() const { return cpu_us_; }

  private:
    BackfillRun() = default;

    config::PipelineConfig pipeline_;
    config::Config config_;  // node_id and this one pipeline, under its state name
    std::unique_ptr<Processor> processor_;
    std::unique_ptr<BatchSink> sink_;
    std::unique_ptr<log::LogReader> reader_;
    uint64_t offset_ = 0;
    int64_t from_ms_ = INT64_MIN;
    int64_t since_ms_ = INT64_MAX;
    int64_t started_ms_ = 0;
    uint64_t first_offset_ = 0;
    uint64_t records_ = 0;
    int64_t busy_ms_ = 0;
    int64_t cpu_us_ = 0;
    bool resumed_ = false;
};

}  // namespace tidemark::firmware
