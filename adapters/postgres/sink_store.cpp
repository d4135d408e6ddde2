#include "adapters/postgres/sink_store.h"

#include <algorithm>
#include <array>

#include "adapters/postgres/connection.h"
#include "adapters/postgres/schema.h"

namespace tidemark::postgres {

namespace {

// Milliseconds since the epoch as timestamptz, exactly: bigint * interval goes through float8,
// which is exact below 2^53 ms (the parser keeps times far inside that).
std::string ms_time(const std::string& column) {
    return "('epoch'::timestamptz + " + column + " * interval '1 millisecond')";
}

std::string hex(std::string_view bytes) {
    static constexpr char digits[] = "0123456789abcdef";
    std::string out;
    out.reserve(bytes.size() * 2);
    for (const char c : bytes) {
        const auto b = static_cast<unsigned char>(c);
        out += digits[b >> 4];
        out += digits[b & 15];
    }
    return out;
}

// The JSON string of `s` (valid UTF-8 without NUL: the parser saw to that).
void append_json_text(std::string& out, std::string_view s) {
    static constexpr char digits[] = "0123456789abcdef";
    out += '"';
    for (const char c : s) {
        const auto b = static_cast<unsigned char>(c);
        if (c == '"' || c == '\\') {
            out += '\\';
            out += c;
        } else if (b < 0x20) {
            out += "\\u00";
            out += digits[b >> 4];
            out += digits[b & 15];
        } else {
            out += c;
        }
    }
    out += '"';
}

Error with_kind(ErrorKind kind, std::string message) {
    return Error{std::move(message), static_cast<int>(kind)};
}

}  // namespace

void CommitOutcome::add(const CommitOutcome& o) {
    rows_written += o.rows_written;
    rows_older += o.rows_older;
    versions_changed += o.versions_changed;
    versions_older += o.versions_older;
    versions_removed += o.versions_removed;
    side_rows += o.side_rows;
    rejected += o.rejected;
    views_updated += o.views_updated;
    view_problems.insert(view_problems.end(), o.view_problems.begin(), o.view_problems.end());
}

SinkStore::SinkStore(std::unique_ptr<Connection> connection, std::string schema, int schema_version)
    : connection_(std::move(connection)),
      schema_(std::move(schema)),
      s_(connection_->identifier(schema_)),
      schema_version_(schema_version) {}

SinkStore::~SinkStore() = default;

Result<std::unique_ptr<SinkStore>> SinkStore::open(const StoreOptions& options) {
    auto connection = Connection::open(options);
    if (!connection) return std::unexpected(connection.error());
    auto version = migrate(**connection, options.schema);
    if (!version) return std::unexpected(version.error());
    return std::unique_ptr<SinkStore>(
        new SinkStore(std::move(*connection), options.schema, *version));
}

int SinkStore::server_version() const {
    return connection_->server_version();
}

bool SinkStore::broken() const {
    return connection_->broken();
}

Result<std::optional<SpoolMark>> SinkStore::read_mark(std::string_view client_id) {
    const std::string id(client_id);
    const Param p{id};
    auto rows = connection_->query(
        "reading the spool offset",
        "SELECT spool_id, spool_offset FROM " + s_ + ".sink_offsets WHERE client_id = $1",
        std::span(&p, 1));
    if (!rows) return std::unexpected(rows.error());
    if (rows->empty()) return std::optional<SpoolMark>();
    const Row& row = rows->front();
    return SpoolMark{id, row.at(0).value_or(""), std::stoull(row.at(1).value_or("0"))};
}

Result<CommitOutcome> SinkStore::finish(Result<CommitOutcome> outcome) {
    if (outcome) {
        if (auto committed = connection_->exec("committing", "COMMIT"); !committed)
            return std::unexpected(committed.error());
        return outcome;
    }
    if (!connection_->broken()) static_cast<void>(connection_->exec("rolling back", "ROLLBACK"));
    return outcome;
}

Result<CommitOutcome> SinkStore::commit(const core::SinkBatch& batch, const SpoolMark& mark) {
    client_ = mark.client_id;
    if (auto begun = connection_->exec("beginning a transaction", "BEGIN"); !begun)
        return std::unexpected(begun.error());
    return finish([&]() -> Result<CommitOutcome> {
        CommitOutcome out;
        if (auto ok = write(batch, out); !ok) return std::unexpected(ok.error());
        if (auto ok = write_mark(mark); !ok) return std::unexpected(ok.error());
        return out;
    }());
}

Result<CommitOutcome> SinkStore::commit_parts(std::span<const core::SinkBatch> parts,
                                              const SpoolMark& mark) {
    client_ = mark.client_id;
    if (auto begun = connection_->exec("beginning a transaction", "BEGIN"); !begun)
        return std::unexpected(begun.error());
    return finish([&]() -> Result<CommitOutcome> {
        CommitOutcome out;
        for (const core::SinkBatch& part : parts) {
            if (auto ok = connection_->exec("a savepoint", "SAVEPOINT part"); !ok)
                return std::unexpected(ok.error());
            CommitOutcome written;
            auto ok = write(part, written);
            if (ok) {
                if (auto released = connection_->exec("a savepoint", "RELEASE SAVEPOINT part");
                    !released)
                    return std::unexpected(released.error());
                out.add(written);
                continue;
            }
            if (ok.error().code != static_cast<int>(ErrorKind::refused))
                return std::unexpected(ok.error());
            if (auto back = connection_->exec("a savepoint", "ROLLBACK TO SAVEPOINT part"); !back)
                return std::unexpected(back.error());
            std::vector<core::RejectedMessage> rejected = part.sources;
            for (auto& r : rejected)
                r.reason = "PostgreSQL refused it: " + ok.error().message;
            if (auto written_rejected = write_rejected(rejected, out); !written_rejected)
                return std::unexpected(written_rejected.error());
        }
        if (auto ok = write_mark(mark); !ok) return std::unexpected(ok.error());
        return out;
    }());
}

Result<void> SinkStore::write(const core::SinkBatch& batch, CommitOutcome& out) {
    if (auto ok = write_results(batch, out); !ok) return ok;
    std::vector<std::string> changed;
    if (auto ok = write_versions(batch, out, changed); !ok) return ok;
    if (auto ok = write_side(batch, out); !ok) return ok;
    if (auto ok = write_rejected(batch.rejected, out); !ok) return ok;
    return update_views(changed, out);
}

Result<void> SinkStore::write_results(const core::SinkBatch& batch, CommitOutcome& out) {
    out.rows_older += batch.results_superseded;
    if (batch.results.empty()) return {};
    std::array<ArrayText, 12> columns;
    for (const core::ReceivedResult& r : batch.results) {
        columns[0].add(r.node);
        columns[1].add(r.pipeline);
        columns[2].add(r.version);
        columns[3].add(r.key);
        columns[4].add(r.window_start_ms);
        columns[5].add(r.window_end_ms);
        columns[6].add(static_cast<int64_t>(r.revision));
        columns[7].add(core::emission_kind_name(r.kind));
        columns[8].add(r.closed_by);
        columns[9].add(r.values_json);
        columns[10].add(r.watermark_ms);
        columns[11].add(r.id);
    }
    std::array<std::string, 12> text;
    std::array<Param, 12> params;
    for (std::size_t i = 0; i < columns.size(); ++i) {
        text[i] = columns[i].take();
        params[i] = Param{text[i]};
    }
    const std::string sql =
        "INSERT INTO " + s_ +
        ".results AS r (node, pipeline, version, key, window_start, window_end, revision, kind, "
        "closed_by, aggregates, watermark, id) "
        "SELECT u.node, u.pipeline, u.version, u.key, " +
        ms_time("u.ws") + ", " + ms_time("u.we") +
        ", u.revision, u.kind, u.closed_by, u.aggregates, " + ms_time("u.wm") +
        ", u.id FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], "
        "$6::bigint[], $7::integer[], $8::text[], $9::text[], $10::jsonb[], $11::bigint[], "
        "$12::text[]) AS u(node, pipeline, version, key, ws, we, revision, kind, closed_by, "
        "aggregates, wm, id) "
        "ON CONFLICT (node, pipeline, version, key, window_start, window_end) DO UPDATE SET "
        "revision = EXCLUDED.revision, kind = EXCLUDED.kind, closed_by = EXCLUDED.closed_by, "
        "aggregates = EXCLUDED.aggregates, watermark = EXCLUDED.watermark, id = EXCLUDED.id "
        "WHERE EXCLUDED.revision > r.revision OR (EXCLUDED.revision = r.revision AND "
        "EXCLUDED.kind = 'retract' AND r.kind <> 'retract')";
    auto touched = connection_->command(
        "writing " + std::to_string(batch.results.size()) + " results", sql, params);
    if (!touched) return std::unexpected(touched.error());
    TM_ASSERT(*touched <= batch.results.size());
    out.rows_written += *touched;
    out.rows_older += batch.results.size() - *touched;
    return {};
}

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

Result<void> SinkStore::write_side(const core::SinkBatch& batch, CommitOutcome& out) {
    if (batch.side.empty()) return {};
    ArrayText nodes, pipelines, records;
    for (const auto& side : batch.side) {
        nodes.add(side.node);
        pipelines.add(side.pipeline);
        records.add(side.record_json);
    }
    const std::array<std::string, 3> text{nodes.take(), pipelines.take(), records.take()};
    const std::array<Param, 3> params{Param{text[0]}, Param{text[1]}, Param{text[2]}};
    auto touched = connection_->command(
        "writing " + std::to_string(batch.side.size()) + " side output records",
        "INSERT INTO " + s_ +
            ".side_output (node, pipeline, digest, record, received) SELECT u.node, "
            "u.pipeline, md5(u.record), u.record::jsonb, now() FROM unnest($1::text[], "
            "$2::text[], $3::text[]) AS u(node, pipeline, record) "
            "ON CONFLICT (node, pipeline, digest) DO NOTHING",
        params);
    if (!touched) return std::unexpected(touched.error());
    out.side_rows += *touched;
    return {};
}

Result<void> SinkStore::write_rejected(std::span<const core::RejectedMessage> rejected,
                                       CommitOutcome& out) {
    if (rejected.empty()) return {};
    ArrayText topics, payloads, reasons, received, offsets;
    for (const auto& r : rejected) {
        topics.add(printable_text(r.topic));
        payloads.add(hex(r.payload));
        reasons.add(printable_text(r.reason));
        received.add(r.receive_ms);
        offsets.add(static_cast<int64_t>(r.spool_offset));
    }
    const std::array<std::string, 5> text{topics.take(), payloads.take(), reasons.take(),
                                          received.take(), offsets.take()};
    const std::array<Param, 6> params{Param{text[0]}, Param{text[1]}, Param{text[2]},
                                      Param{text[3]}, Param{client_}, Param{text[4]}};
    auto touched = connection_->command(
        "writing " + std::to_string(rejected.size()) + " rejected messages",
        "INSERT INTO " + s_ +
            ".rejected (topic, payload, reason, received, sink, spool_offset) SELECT u.topic, "
            "decode(u.payload, 'hex'), u.reason, " +
            ms_time("u.received") +
            ", $5, u.spool_offset FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], "
            "$6::bigint[]) AS u(topic, payload, reason, received, spool_offset)",
        params);
    if (!touched) {
        // Only the sink's own text goes here, made printable: a refusal would be a bug, and
        // rejecting the rejection would loop. Retry it as transient; the alarm shows it.
        Error e = touched.error();
        if (e.code == static_cast<int>(ErrorKind::refused))
            return std::unexpected(with_kind(ErrorKind::transient, e.message));
        return std::unexpected(std::move(e));
    }
    out.rejected += *touched;
    return {};
}

Result<void> SinkStore::write_mark(const SpoolMark& mark) {
    const std::string offset = std::to_string(mark.offset);
    const std::array<Param, 3> params{Param{mark.client_id}, Param{mark.spool_id}, Param{offset}};
    auto touched = connection_->command(
        "writing the spool offset",
        "INSERT INTO " + s_ +
            ".sink_offsets (client_id, spool_id, spool_offset, updated) VALUES ($1, $2, $3, "
            "now()) ON CONFLICT (client_id) DO UPDATE SET spool_id = EXCLUDED.spool_id, "
            "spool_offset = EXCLUDED.spool_offset, updated = EXCLUDED.updated",
        params);
    if (!touched) return std::unexpected(touched.error());
    return {};
}

}  // namespace tidemark::postgres
