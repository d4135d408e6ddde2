#include "firmware/service/result_sinks.h"

#include <algorithm>
#include <cstdint>

#include <nlohmann/json.hpp>

#include "adapters/codec/record.h"
#include "adapters/codec/topic.h"
#include "core/emission.h"

namespace tidemark::firmware {

BatchSink::BatchSink(const config::Config& config)
    : config_(config), aggregate_names_(aggregate_names(config)) {}

void BatchSink::emit(const core::Emission& e) {
    lmdb::OutboxRow row;
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
    codec::encode_result(config_.node_id, row.pipeline, aggregate_names_[e.pipeline], e,
                         row.payload, config_.pipelines[e.pipeline].spec.version);
    rows.push_back(std::move(row));
}

void BatchSink::late_report(const core::LateReport& r) {
    const core::PipelineSpec& spec = config_.pipelines[r.pipeline].spec;
    lmdb::OutboxRow row;
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
    rows.push_back(std::move(row));
}

void BatchSink::side_output(const core::SideOutput& s) {
    std::string out;
    const std::string& pipeline = config_.pipelines[s.pipeline].spec.name;
    codec::encode_side_output(config_.node_id, pipeline, s, out);
    add_side(s.order, std::move(out), pipeline, s.key);
}

void BatchSink::malformed(uint32_t pipeline, const log::Record& record, std::string_view reason) {
    nlohmann::json j;
    j["node"] = config_.node_id;
    j["pipeline"] = config_.pipelines[pipeline].spec.name;
    j["malformed"] = std::string(reason);
    j["offset"] = record.offset;
    j["ingest_ms"] = record.ingest_ms;
    add_side(record.offset, j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
             config_.pipelines[pipeline].spec.name, "");
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

namespace {

class OutboxSource : public mqtt::OutboxSource {
  public:
    OutboxSource(lmdb::Store& store, const config::Config& config)
        : store_(store),
          config_(config),
          version_topic_(without_key_level(config.upstream->topic)),
          health_topic_(codec::expand_topic_template(config.health.topic, config.node_id, "", "")) {
    }
    Result<std::vector<mqtt::OutboundRow>> peek(uint64_t from_seq, size_t limit) override {
        auto rows = store_.outbox_peek(from_seq, limit);
        if (!rows) return fail(rows.error().message);
        std::vector<mqtt::OutboundRow> out;
        out.reserve(rows->size());
        for (auto& r : *rows) {
            // A version record: retained beside the results (DESIGN.md section 4), on the
            // pipeline's results topic (without a {key} level) + "/version"; a too-late tally
            // beside them, + "/late", not retained (each is a state of a count: the sink keeps
            // the highest). A health record (health.upstream): retained on health.topic, as on
            // the gateway broker, so that `tidemark status --broker` finds a fleet's where it
            // finds one gateway's.
            std::string topic =
                r.health_record ? health_topic_
                : r.version_record || r.late_record
                    ? codec::expand_topic_template(version_topic_, config_.node_id, r.pipeline,
                                                   "") +
                          (r.version_record ? "/version" : "/late")
                    : codec::expand_topic_template(config_.upstream->topic, config_.node_id,
                                                   r.pipeline, r.key);
            out.push_back({r.seq, std::move(topic), std::move(r.payload),
                           r.version_record || r.health_record});
        }
        return out;
    }
    Result<void> delivered(std::span<const uint64_t> seqs) override {
        auto ok = store_.outbox_delete(seqs);
        if (!ok) return fail(ok.error().message);
        return {};
    }
    void claimed(uint64_t seq_next) override { store_.set_claimed(seq_next); }

  private:
    // "tidemark/{node_id}/{pipeline}/{key}" -> "tidemark/{node_id}/{pipeline}".
    static std::string without_key_level(std::string t) {
        for (const std::string level : {"/{key}", "{key}/", "{key}"})
            if (auto at = t.find(level); at != std::string::npos) t.erase(at, level.size());
        return t;
    }

    lmdb::Store& store_;
    const config::Config& config_;
    std::string version_topic_;
    std::string health_topic_;
};

class SideSource : public mqtt::OutboxSource {
  public:
    SideSource(lmdb::Store& store, const config::Config& config) : store_(store), config_(config) {}
    Result<std::vector<mqtt::OutboundRow>> peek(uint64_t from_seq, size_t limit) override {
        auto rows = store_.side_peek(from_seq, limit);
        if (!rows) return fail(rows.error().message);
        std::vector<mqtt::OutboundRow> out;
        out.reserve(rows->size());
        for (auto& r : *rows) {
            if (!r.columns_known) columns_from_record(r);
            out.push_back({r.seq,
                           codec::expand_topic_template(config_.upstream->side_topic,
                                                        config_.node_id, r.pipeline, r.key),
                           std::move(r.record)});
        }
        return out;
    }
    Result<void> delivered(std::span<const uint64_t> seqs) override {
        auto ok = store_.side_delete(seqs);
        if (!ok) return fail(ok.error().message);
        return {};
    }
    void claimed(uint64_t) override {}  // side rows are never compacted

  private:
    // A row stored before side rows had columns names its pipeline and key in the record
    // (codec::encode_side_output, or BatchSink::malformed); one that does not parse still
    // goes, keyless.
    static void columns_from_record(lmdb::SideRow& r) {
        const auto j = nlohmann::json::parse(r.record, nullptr, /*allow_exceptions=*/false);
        if (!j.is_object()) return;
        if (auto it = j.find("pipeline"); it != j.end() && it->is_string())
            r.pipeline = it->get<std::string>();
        if (auto it = j.find("key"); it != j.end() && it->is_string())
            r.key = it->get<std::string>();
    }

    lmdb::Store& store_;
    const config::Config& config_;
};

}  // namespace

std::unique_ptr<mqtt::OutboxSource> make_outbox_source(lmdb::Store& store,
                                                       const config::Config& config) {
    return std::make_unique<OutboxSource>(store, config);
}

std::unique_ptr<mqtt::OutboxSource> make_side_source(lmdb::Store& store,
                                                     const config::Config& config) {
    return std::make_unique<SideSource>(store, config);
}

}  // namespace tidemark::firmware
