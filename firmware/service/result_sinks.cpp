#include "firmware/service/result_sinks.h"

#include <algorithm>
#include <cstdint>

#include "adapters/codec/record.h"
#include "core/emission.h"

namespace tidemark::firmware {

BatchSink::BatchSink(const config::Config& config)
    : config_(config), encoders_(result_encoders(config)) {}

// A row is built where it stays, in `rows` (a backfill emits hundreds of thousands a second:
// issue 31), not built aside and moved in.
void BatchSink::emit(const core::Emission& e) {
    lmdb::OutboxRow& row = rows.emplace_back();
    row.id = e.id;
    row.pipeline = config_.pipelines[e.pipeline].spec.name;
    row.version = config_.pipelines[e.pipeline].spec.version;
    row.key = e.key;
    row.window_start_ms = e.start_ms;
    row.window_end_ms = e.end_ms;
    row.revision = e.revision;
    row.kind = e.kind;
    // Retract mode sends a retract of the previous revision before every update.
    row.after_retract =
        e.kind == core::EmissionKind::update &&
        config_.pipelines[e.pipeline].spec.late.corrections == core::Corrections::retract;
    // Encoded into the memory of an earlier row's payload (clear_rows() keeps it); without one,
    // into the sink's buffer, then copied once at its length. Built in the row's own new string,
    // the payload grew through four or five reallocations (issue 31: over a quarter of a
    // backfill's result encoding was malloc and free, against replay's one reused line).
    const bool reused = !spare_payloads_.empty();
    if (reused) {
        row.payload = std::move(spare_payloads_.back());
        spare_payloads_.pop_back();
        spare_bytes_ -= row.payload.capacity();
    }
    encoders_[e.pipeline].encode(e, reused ? row.payload : encoded_);
    if (reused) return;
    // With room for a later result a little longer (more digits), which would otherwise grow it.
    row.payload.reserve(encoded_.size() + payload_slack_bytes);
    row.payload.assign(encoded_);
}

void BatchSink::clear_rows() {
    for (lmdb::OutboxRow& row : rows) {
        const size_t bytes = row.payload.capacity();
        if (bytes > spare_payload_bytes_max || bytes < 32) continue;  // 32: not a short one's own
        if (spare_bytes_ + bytes > spare_bytes_max) break;
        spare_payloads_.push_back(std::move(row.payload));
        spare_bytes_ += bytes;
    }
    rows.clear();
}

void BatchSink::take_spares(BatchSink& other) {
    while (!other.spare_payloads_.empty()) {
        const size_t bytes = other.spare_payloads_.back().capacity();
        if (spare_bytes_ + bytes > spare_bytes_max) break;
        spare_payloads_.push_back(std::move(other.spare_payloads_.back()));
        other.spare_payloads_.pop_back();
        other.spare_bytes_ -= bytes;
        spare_bytes_ += bytes;
    }
    // What does not fit is freed: the two sinks together keep no more than one's bound.
    other.spare_payloads_.clear();
    other.spare_bytes_ = 0;
}

void BatchSink::late_report(const core::LateReport& r) {
    const core::PipelineSpec& spec = config_.pipelines[r.pipeline].spec;
    lmdb::OutboxRow& row = rows.emplace_back();
    row.id = r.id;
    row.pipeline = spec.name;
    row.version = spec.version;
    row.window_start_ms = r.start_ms;
    row.window_end_ms = r.end_ms;
    // The count ranks the tallies of one window for compaction (a higher one supersedes).
    row.revision = static_cast<uint32_t>(std::min<uint64_t>(r.too_late, UINT32_MAX));
    row.late_record = true;
    row.late_since_ms = r.since_ms;
    codec::encode_late_report(config_.node_id, spec.name, spec.version, r, row.payload);
}

void BatchSink::side_output(const core::SideOutput& s) {
    std::string out;
    const std::string& pipeline = config_.pipelines[s.pipeline].spec.name;
    codec::encode_side_output(config_.node_id, pipeline, s, out);
    add_side(s.order, std::move(out), pipeline, s.key);
}

void BatchSink::malformed(uint32_t pipeline, const log::Record& record, std::string_view reason) {
    std::string out;
    const std::string& name = config_.pipelines[pipeline].spec.name;
    codec::encode_malformed_side(config_.node_id, name, reason, record.offset, record.ingest_ms,
                                 out);
    add_side(record.offset, std::move(out), name, "");
}

// Side records are named by the log record that produced them and their rank among its side
// records: a replay after a crash regenerates the same names, which the store skips.
void BatchSink::add_side(uint64_t log_offset, std::string record, std::string pipeline,
                         std::string key) {
    if (log_offset != side_offset_) {
        side_offset_ = log_offset;
        side_ordinal_ = 0;
    }
    side.emplace_back(log_offset, side_ordinal_++, std::move(record), std::move(pipeline),
                      std::move(key));
}

}  // namespace tidemark::firmware
