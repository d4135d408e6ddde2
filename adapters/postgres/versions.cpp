// Version records into `versions` (sink_store.h): the highest switch_ms per (node, pipeline), a
// removal remembered in versions_removed, a pipeline whose view name is taken rejected.
#include <array>

#include "adapters/postgres/connection.h"
#include "adapters/postgres/sink_store.h"
#include "adapters/postgres/statements.h"

namespace tidemark::postgres {

Result<void> SinkStore::write_versions(const core::SinkBatch& batch, CommitOutcome& out,
                                       std::vector<std::string>& changed) {
    for (const core::VersionChange& change : batch.version_changes) {
        if (const auto* removed = std::get_if<core::VersionRemoved>(&change)) {
            const Param topic{removed->topic};
            auto rows = connection_->query(
                "removing the version of " + removed->topic,
                "WITH gone AS (DELETE FROM " + s_ +
                    ".versions WHERE topic = $1 RETURNING node, pipeline, switch_ms) "
                    "INSERT INTO " +
                    s_ +
                    ".versions_removed AS x (node, pipeline, switch_ms, topic, removed) "
                    "SELECT node, pipeline, switch_ms, $1, now() FROM gone "
                    "ON CONFLICT (node, pipeline) DO UPDATE SET switch_ms = "
                    "greatest(x.switch_ms, EXCLUDED.switch_ms), topic = EXCLUDED.topic, "
                    "removed = EXCLUDED.removed RETURNING pipeline",
                std::span(&topic, 1));
            if (!rows) return std::unexpected(rows.error());
            for (const Row& row : *rows) {
                ++out.versions_removed;
                changed.push_back(row.at(0).value_or(""));
            }
            continue;
        }
        const auto& v = std::get<core::ReceivedVersion>(change);
        const std::string view = core::pipeline_view_name(v.pipeline).value();
        const std::array<Param, 2> same_view{Param{v.pipeline}, Param{view}};
        auto taken = connection_->query(
            "checking the view name of " + v.pipeline,
            "SELECT pipeline FROM " + s_ +
                ".versions WHERE pipeline <> $1 AND 'current_' || lower(translate(pipeline, "
                "'-.', '__')) = $2 LIMIT 1",
            same_view);
        if (!taken) return std::unexpected(taken.error());
        if (!taken->empty()) {
            const std::string other = taken->front().at(0).value_or("");
            const core::RejectedMessage rejected{v.topic, v.record_json,
                                                 "version record: the pipelines '" + v.pipeline +
                                                     "' and '" + other + "' would share the view " +
                                                     view + ": rename one of them",
                                                 0, 0};
            if (auto ok = write_rejected(std::span(&rejected, 1), out); !ok) return ok;
            continue;
        }
        std::string aggregates = "{";
        ArrayText names;
        for (const auto& a : v.aggregates) {
            if (aggregates.size() > 1) aggregates += ',';
            append_json_text(aggregates, a.name);
            aggregates += ':';
            append_json_text(aggregates, a.fn);
            names.add(a.name);
        }
        aggregates += '}';
        const std::string since = std::to_string(v.since_ms);
        const std::string switch_ms = std::to_string(v.switch_ms);
        const std::string name_list = names.take();
        const std::array<Param, 9> params{
            Param{v.node},
            Param{v.pipeline},
            Param{v.version},
            Param{since},
            Param{v.previous ? std::string_view(*v.previous) : "", !v.previous.has_value()},
            Param{switch_ms},
            Param{aggregates},
            Param{name_list},
            Param{v.topic}};
        auto rows = connection_->query(
            "writing the version of " + v.node + "/" + v.pipeline,
            "INSERT INTO " + s_ +
                ".versions AS v (node, pipeline, version, since, previous, switch_ms, "
                "aggregates, aggregate_names, topic, received) "
                "SELECT $1, $2, $3, " +
                ms_time("$4::bigint") +
                ", $5, $6, $7::jsonb, $8::text[], $9, now() WHERE NOT EXISTS (SELECT 1 FROM " + s_ +
                ".versions_removed x WHERE x.node = $1 AND x.pipeline = $2 AND x.switch_ms >= "
                "$6) ON CONFLICT (node, pipeline) DO UPDATE SET version = EXCLUDED.version, "
                "since = EXCLUDED.since, previous = EXCLUDED.previous, switch_ms = "
                "EXCLUDED.switch_ms, aggregates = EXCLUDED.aggregates, aggregate_names = "
                "EXCLUDED.aggregate_names, topic = EXCLUDED.topic, received = EXCLUDED.received "
                "WHERE EXCLUDED.switch_ms > v.switch_ms RETURNING pipeline",
            params);
        if (!rows) return std::unexpected(rows.error());
        if (rows->empty()) {
            ++out.versions_older;
        } else {
            ++out.versions_changed;
            changed.push_back(v.pipeline);
        }
    }
    return {};
}

}  // namespace tidemark::postgres
