// Where the engine's results go: BatchSink collects one step's emissions as outbox rows and its
// side output as side rows (outbox_sources.h hands them to the forwarder).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "adapters/config/config.h"
#include "adapters/lmdb/store.h"
#include "firmware/service/processor.h"

namespace tidemark::firmware {

/// Operation: emissions and too-late tallies become outbox rows (the JSON record as sent
/// upstream, with its columns);
/// too-late events and undecodable records become side rows named by the log record that
/// produced them. The engine host moves `rows` and `side` into the store after each step.
/// Concurrency: engine thread only.
/// Limits: holds one step's results (step_records_max records' worth); the caller empties it.
/// Keeps the memory of emptied payloads for the rows to come: at most spare_bytes_max (2 MiB) in
/// all, none larger than spare_payload_bytes_max.
class BatchSink : public ProcessorSink {
  public:
    /// Payload memory clear_rows() keeps, by capacity: most of a backfill slice's rows when the
    /// windows of 10 k keys close in it (some 290 bytes each in bench_backfill, so about 7,000;
    /// 2,048 payloads, the bound before, left four in five of them to malloc). Bounded for
    /// CONFIG.md's memory sum; no payload larger than spare_payload_bytes_max.
    static constexpr size_t spare_bytes_max = size_t{2} << 20;
    static constexpr size_t spare_payload_bytes_max = 512;
    /// Room a new payload gets past its bytes, for the results that will reuse its memory.
    static constexpr size_t payload_slack_bytes = 32;

    /// `config` must outlive the sink.
    explicit BatchSink(const config::Config& config);
    void emit(const core::Emission& e) override;
    void side_output(const core::SideOutput& s) override;
    void late_report(const core::LateReport& r) override;
    void malformed(uint32_t pipeline, const log::Record& record, std::string_view reason) override;

    /// Empties `rows` once the store has them, keeping their payloads' memory for the next
    /// results: a backfill emits hundreds of thousands a second, and a payload allocated and
    /// freed for each of them interleaved with the windows' own allocations (issue 31).
    void clear_rows();
    /// Takes the payload memory `other` kept, up to this sink's bound, and frees the rest: a
    /// backfill run's sink emits the rows the live sink stores and clears.
    void take_spares(BatchSink& other);
    /// The memory the spare payloads hold (their capacities), at most spare_bytes_max.
    size_t spare_bytes() const { return spare_bytes_; }

    std::vector<lmdb::OutboxRow> rows;
    std::vector<lmdb::SideRecord> side;

  private:
    void add_side(uint64_t log_offset, std::string record, std::string pipeline, std::string key);

    const config::Config& config_;
    std::vector<codec::ResultEncoder> encoders_;  // by pipeline
    uint64_t side_offset_ = UINT64_MAX;
    uint32_t side_ordinal_ = 0;
    std::string encoded_;                      // emit()'s encoding buffer, reused
    std::vector<std::string> spare_payloads_;  // emptied payloads, their memory kept
    size_t spare_bytes_ = 0;                   // their capacities' sum
};

}  // namespace tidemark::firmware
