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
class BatchSink : public ProcessorSink {
  public:
    /// `config` must outlive the sink.
    explicit BatchSink(const config::Config& config);
    void emit(const core::Emission& e) override;
    void side_output(const core::SideOutput& s) override;
    void late_report(const core::LateReport& r) override;
    void malformed(uint32_t pipeline, const log::Record& record, std::string_view reason) override;

    std::vector<lmdb::OutboxRow> rows;
    std::vector<lmdb::SideRecord> side;

  private:
    void add_side(uint64_t log_offset, std::string record, std::string pipeline, std::string key);

    const config::Config& config_;
    std::vector<std::vector<std::string>> aggregate_names_;
    uint64_t side_offset_ = UINT64_MAX;
    uint32_t side_ordinal_ = 0;
    std::string encoded_;  // emit()'s encoding buffer, reused
};

}  // namespace tidemark::firmware
