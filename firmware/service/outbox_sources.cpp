#include "firmware/service/outbox_sources.h"

#include <string>
#include <vector>

#include "adapters/codec/record.h"
#include "adapters/codec/topic.h"

namespace tidemark::firmware {

namespace {

class OutboxSource : public mqtt::OutboxSource {
  public:
    OutboxSource(lmdb::Store& store, const config::Config& config)
        : store_(store),
          results_topic_(config.upstream->topic, config.node_id),
          version_topic_(without_key_level(config.upstream->topic) + "/version", config.node_id),
          late_topic_(without_key_level(config.upstream->topic) + "/late", config.node_id),
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
            std::string topic = r.health_record    ? health_topic_
                                : r.version_record ? version_topic_.expand(r.pipeline, "")
                                : r.late_record    ? late_topic_.expand(r.pipeline, "")
                                                   : results_topic_.expand(r.pipeline, r.key);
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

  private:
    // "tidemark/{node_id}/{pipeline}/{key}" -> "tidemark/{node_id}/{pipeline}".
    static std::string without_key_level(std::string t) {
        for (const std::string level : {"/{key}", "{key}/", "{key}"})
            if (auto at = t.find(level); at != std::string::npos) t.erase(at, level.size());
        return t;
    }

    // Read from the config once, at start: a reload changes none of them (service_reload.cpp
    // takes a reload's pipelines, backfill and log level only). Left per row: pipeline and key.
    lmdb::Store& store_;
    codec::TopicTemplate results_topic_;
    codec::TopicTemplate version_topic_;
    codec::TopicTemplate late_topic_;
    std::string health_topic_;
};

class SideSource : public mqtt::OutboxSource {
  public:
    SideSource(lmdb::Store& store, const config::Config& config)
        : store_(store), side_topic_(config.upstream->side_topic, config.node_id) {}
    Result<std::vector<mqtt::OutboundRow>> peek(uint64_t from_seq, size_t limit) override {
        auto rows = store_.side_peek(from_seq, limit);
        if (!rows) return fail(rows.error().message);
        std::vector<mqtt::OutboundRow> out;
        out.reserve(rows->size());
        for (auto& r : *rows) {
            // A row stored before side rows had columns names its pipeline and key in the
            // record; one that does not parse still goes, keyless.
            if (!r.columns_known) codec::side_record_columns(r.record, r.pipeline, r.key);
            out.push_back({r.seq, side_topic_.expand(r.pipeline, r.key), std::move(r.record)});
        }
        return out;
    }
    Result<void> delivered(std::span<const uint64_t> seqs) override {
        auto ok = store_.side_delete(seqs);
        if (!ok) return fail(ok.error().message);
        return {};
    }

  private:
    lmdb::Store& store_;
    codec::TopicTemplate side_topic_;
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
