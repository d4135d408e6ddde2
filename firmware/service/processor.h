// Log records in, engine emissions out: the one path that live runs, recovery and replay share.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "adapters/codec/record.h"
#include "adapters/config/config.h"
#include "adapters/log/log_reader.h"
#include "adapters/log/record.h"
#include "core/emission.h"
#include "core/engine.h"
#include "core/result.h"

namespace tidemark::firmware {

/// The topic of a tick record that says the gateway's clock stopped (or started) being
/// synchronised from that record on; replay sees the same changes at the same records.
inline constexpr std::string_view clock_unsynchronised_tick = "clock:unsynchronised";
inline constexpr std::string_view clock_synchronised_tick = "clock:synchronised";
/// The topic of a tick record that says ingest listens again after a silence of ours
/// (Engine::resume): the first record of every broker connection.
inline constexpr std::string_view ingest_resumed_tick = "ingest:resumed";

/// Counters of what could not be turned into events, per pipeline.
struct DecodeCounters {
    uint64_t malformed = 0;       // matched the pipeline's topic but could not be decoded
    uint64_t fields_missing = 0;  // events with a field absent or not a number (kept, NaN)
};

/// The aggregate names of each pipeline, in config order: what encode_result() labels values by.
std::vector<std::vector<std::string>> aggregate_names(const config::Config& config);
/// Each pipeline's result encoder (node, name, aggregate names, version), in config order.
std::vector<codec::ResultEncoder> result_encoders(const config::Config& config);

/// Which records of the log feed_until() feeds: those whose ingest time is in
/// [from_ingest_ms, to_ingest_ms). Records before from_ingest_ms are read and passed over
/// (a backfill's backfill.from, replay --from); the first at or after to_ingest_ms, when there
/// is one, ends the feed unfed and uncounted, with the reader past it and maybe past some after
/// it, read in the same batch (replay --to: the caller reads no more).
struct FeedFilter {
    int64_t from_ingest_ms = INT64_MIN;
    std::optional<int64_t> to_ingest_ms;
};

/// What one feed_until() call read.
struct FeedResult {
    size_t records_read = 0;  // fed or passed over by the filter
    size_t records_fed = 0;
    uint64_t next_offset = 0;  // the next_offset of the last record read; 0 when none was
    bool reached_to = false;   // stopped at a record at or after FeedFilter::to_ingest_ms
    Result<void> status;       // the reader's error when one stopped the feed
};

/// Receives, besides emissions, the records a pipeline could not decode, with the reason.
class ProcessorSink : public core::EmissionSink {
  public:
    virtual void malformed(uint32_t pipeline, const log::Record& record,
                           std::string_view reason) = 0;
};

/// Decodes each log record for every pipeline whose topic filter matches and feeds the engine.
///
/// Operation: ticks only advance the clock; a message's payload is parsed once (simdjson, no
/// allocation in steady state) and every pipeline whose topic filter matches it decodes its
/// event from that one document and processes it; a record logged as malformed (oversized
/// payloads) is counted for every pipeline it matches. Because replay uses this same class over
/// the same records, replay gives the same emissions as the live run.
/// Concurrency: single-threaded, like the engine it owns.
/// Limits: the engine's; one parser (codec::PayloadParser: under 1 MiB kept, and during one
/// large payload about codec::parser_bytes_per_payload_byte x its size, freed after the record)
/// and one decode scratch, for all pipelines.
class Processor {
  public:
    /// `state_tag` tells the stored decode counters of several processors apart (a backfill's:
    /// its state name); empty for the live one, whose key predates versions.
    static Result<std::unique_ptr<Processor>> create(const config::Config& config,
                                                     std::string_view state_tag = {});
    ~Processor();

    void feed(const log::Record& record, ProcessorSink& sink);
    /// The one log pump of the live step, recovery, a backfill and `tidemark replay`: reads
    /// records from `reader`'s position, below `end_offset` and at most `records_max` of them,
    /// and feeds those `filter` lets through. Stops early at the end of what is written (or a
    /// record FeedFilter::to_ingest_ms ends on) or at a read error (FeedResult::status), which
    /// leaves what was read before it fed and counted.
    FeedResult feed_until(log::LogReader& reader, uint64_t end_offset, size_t records_max,
                          ProcessorSink& sink, const FeedFilter& filter = {});
    /// The last checkpoint's transaction did not commit: the next checkpoint writes it again.
    void checkpoint_failed() { engine_->checkpoint_failed(); }

    core::Engine& engine() { return *engine_; }
    const config::Config& config() const { return config_; }
    const std::vector<DecodeCounters>& decode_counters() const { return counters_; }
    /// Replaces one pipeline's counters (a switch hands the new version's to the live one).
    void set_decode_counters(uint32_t pipeline, DecodeCounters counters) {
        counters_.at(pipeline) = counters;
    }
    /// The oldest event time this processor fed to a pipeline (as decoded, before clamping),
    /// INT64_MAX before any: what a version record's since_ms covers. Not stored.
    int64_t min_event_ms(uint32_t pipeline) const { return min_event_ms_[pipeline]; }
    /// The ingest time of the newest record the engine has read (restored with its state);
    /// 0 before any.
    int64_t newest_ingest_ms() const;
    /// Records logged as malformed by ingest (oversized), over all pipelines.
    uint64_t malformed_records() const { return malformed_records_; }
    /// Payloads parsed: one per message record that some pipeline matches, however many do.
    uint64_t payload_parses() const;
    /// What the parser keeps between records (codec::PayloadParser::capacity_bytes).
    size_t parser_capacity_bytes() const;

    /// Writes the engine's changed state and the decode counters.
    void checkpoint(core::StateWriter& writer);
    /// The key the decode counters of a processor with `state_tag` are stored under.
    static std::string counters_key_for(std::string_view state_tag);
    /// The key its decode counters are stored under; every other key it writes is the engine's.
    const std::string& counters_key() const { return counters_key_; }
    /// Restores one stored entry (engine state or its decode counters); then restore_finish().
    Result<void> restore_entry(std::string_view key, std::string_view value);
    Result<void> restore_finish();

  private:
    struct Impl;
    /// feed_until's hints for record `j` of its batch and the three before it (see Impl).
    void prefetch_ahead(size_t j);
    Processor(config::Config config, std::unique_ptr<core::Engine> engine,
              std::unique_ptr<Impl> impl);
    config::Config config_;
    std::unique_ptr<core::Engine> engine_;
    std::unique_ptr<Impl> impl_;
    std::vector<DecodeCounters> counters_;
    std::vector<int64_t> min_event_ms_;
    uint64_t malformed_records_ = 0;
    std::string counters_key_;
};

}  // namespace tidemark::firmware
