#include "adapters/postgres/statements.h"

#include <array>

namespace tidemark::postgres {

namespace {

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

template <size_t N>
std::vector<std::string> taken(std::array<ArrayText, N>& columns) {
    std::vector<std::string> out;
    for (auto& c : columns)
        out.push_back(c.take());
    return out;
}

}  // namespace

std::vector<Param> Statement::params() const {
    std::vector<Param> out;
    for (const auto& t : texts)
        out.push_back(Param{t});
    return out;
}

std::string ms_time(const std::string& column) {
    return "('epoch'::timestamptz + " + column + " * interval '1 millisecond')";
}

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

std::optional<Statement> results_statement(const std::string& s, const core::SinkBatch& batch) {
    if (batch.results.empty()) return std::nullopt;
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
    // The revision guard: a row is replaced only by a higher (revision, retract wins) rank.
    return Statement{
        "writing " + std::to_string(batch.results.size()) + " results",
        "INSERT INTO " + s +
            ".results AS r (node, pipeline, version, key, window_start, window_end, revision, "
            "kind, closed_by, aggregates, watermark, id) SELECT u.node, u.pipeline, u.version, "
            "u.key, " +
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
            "EXCLUDED.kind = 'retract' AND r.kind <> 'retract')",
        taken(columns)};
}

std::optional<Statement> late_statement(const std::string& s, const core::SinkBatch& batch) {
    if (batch.late.empty()) return std::nullopt;
    std::array<ArrayText, 9> columns;
    for (const core::ReceivedLate& l : batch.late) {
        columns[0].add(l.node);
        columns[1].add(l.pipeline);
        columns[2].add(l.version);
        columns[3].add(l.window_start_ms);
        columns[4].add(l.window_end_ms);
        columns[5].add(l.since_ms);
        columns[6].add(l.too_late);
        columns[7].add(l.as_of_ms);
        columns[8].add(l.id);
    }
    return Statement{
        "writing " + std::to_string(batch.late.size()) + " too-late tallies",
        "INSERT INTO " + s +
            ".late_windows AS l (node, pipeline, version, window_start, window_end, since, "
            "too_late, as_of, id, updated) SELECT u.node, u.pipeline, u.version, " +
            ms_time("u.ws") + ", " + ms_time("u.we") + ", " + ms_time("u.since") +
            ", u.too_late, " + ms_time("u.as_of") +
            ", u.id, now() FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], "
            "$5::bigint[], $6::bigint[], $7::bigint[], $8::bigint[], $9::text[]) AS u(node, "
            "pipeline, version, ws, we, since, too_late, as_of, id) "
            "ON CONFLICT (node, pipeline, version, window_start, window_end, since) DO UPDATE SET "
            "too_late = EXCLUDED.too_late, as_of = EXCLUDED.as_of, id = EXCLUDED.id, "
            "updated = EXCLUDED.updated WHERE EXCLUDED.too_late > l.too_late",
        taken(columns)};
}

std::optional<Statement> side_statement(const std::string& s, const core::SinkBatch& batch) {
    if (batch.side.empty()) return std::nullopt;
    std::array<ArrayText, 3> columns;
    for (const auto& side : batch.side) {
        columns[0].add(side.node);
        columns[1].add(side.pipeline);
        columns[2].add(side.record_json);
    }
    return Statement{"writing " + std::to_string(batch.side.size()) + " side output records",
                     "INSERT INTO " + s +
                         ".side_output (node, pipeline, digest, record, received) SELECT u.node, "
                         "u.pipeline, md5(u.record), u.record::jsonb, now() FROM unnest("
                         "$1::text[], $2::text[], $3::text[]) AS u(node, pipeline, record) "
                         "ON CONFLICT (node, pipeline, digest) DO NOTHING",
                     taken(columns)};
}

std::optional<Statement> health_statement(const std::string& s, const core::SinkBatch& batch) {
    if (batch.health.empty()) return std::nullopt;
    std::array<ArrayText, 4> columns;
    for (const auto& h : batch.health) {
        columns[0].add(h.node);
        columns[1].add(h.time_ms);
        columns[2].add(h.record_json);
        columns[3].add(h.topic);
    }
    // Latest per node: a redelivered or late older record (two sinks, a gateway's outbox sent
    // again after a reconnect) changes nothing, as the revision guard does for results.
    return Statement{"writing " + std::to_string(batch.health.size()) + " health records",
                     "INSERT INTO " + s +
                         ".health AS h (node, time, record, topic, received) SELECT u.node, " +
                         ms_time("u.time_ms") +
                         ", u.record::jsonb, u.topic, now() FROM unnest($1::text[], "
                         "$2::bigint[], $3::text[], $4::text[]) AS u(node, time_ms, record, "
                         "topic) ON CONFLICT (node) DO UPDATE SET time = EXCLUDED.time, record = "
                         "EXCLUDED.record, topic = EXCLUDED.topic, received = EXCLUDED.received "
                         "WHERE EXCLUDED.time > h.time",
                     taken(columns)};
}

std::optional<Statement> rejected_statement(const std::string& s,
                                            std::span<const core::RejectedMessage> rejected,
                                            const std::string& sink) {
    if (rejected.empty()) return std::nullopt;
    std::array<ArrayText, 5> columns;
    for (const auto& r : rejected) {
        columns[0].add(printable_text(r.topic));
        columns[1].add(hex(r.payload));
        columns[2].add(printable_text(r.reason));
        columns[3].add(r.receive_ms);
        columns[4].add(static_cast<int64_t>(r.spool_offset));
    }
    std::vector<std::string> texts = taken(columns);
    texts.push_back(sink);
    return Statement{"writing " + std::to_string(rejected.size()) + " rejected messages",
                     "INSERT INTO " + s +
                         ".rejected (topic, payload, reason, received, sink, spool_offset) SELECT "
                         "u.topic, decode(u.payload, 'hex'), u.reason, " +
                         ms_time("u.received") +
                         ", $6, u.spool_offset FROM unnest($1::text[], $2::text[], $3::text[], "
                         "$4::bigint[], $5::bigint[]) AS u(topic, payload, reason, received, "
                         "spool_offset)",
                     std::move(texts)};
}

Statement mark_statement(const std::string& s, const SpoolMark& mark) {
    return Statement{"writing the spool offset",
                     "INSERT INTO " + s +
                         ".sink_offsets (client_id, spool_id, spool_offset, updated) VALUES ($1, "
                         "$2, $3, now()) ON CONFLICT (client_id) DO UPDATE SET spool_id = "
                         "EXCLUDED.spool_id, spool_offset = EXCLUDED.spool_offset, updated = "
                         "EXCLUDED.updated",
                     {mark.client_id, mark.spool_id, std::to_string(mark.offset)}};
}

}  // namespace tidemark::postgres
