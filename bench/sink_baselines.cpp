// bench_sink's records and baselines (sink_bench.h).
#include "bench/sink_bench.h"

#include <libpq-fe.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "adapters/codec/upstream_record.h"
#include "adapters/postgres/sink_store.h"

namespace tidemark::bench {

namespace {

PGconn* connect(const test::Postgres& pg) {
    PGconn* c = PQconnectdb(pg.conninfo().c_str());
    if (PQstatus(c) != CONNECTION_OK) {
        fail(std::string("connect: ") + PQerrorMessage(c));
    }
    return c;
}

void check(PGresult* r, PGconn* c, const char* what) {
    if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK &&
        PQresultStatus(r) != PGRES_PIPELINE_SYNC) {
        fail(std::string(what) + ": " + PQerrorMessage(c));
    }
    PQclear(r);
}

}  // namespace

// N distinct windows: 50 nodes x 40 keys x windows; `stamp` puts the publish time into
// "watermark" (filled at publish time when set).
std::string record(int i, int64_t watermark_ms) {
    const int node = i % 50, key = (i / 50) % 40, window = i / 2000;
    const int64_t start = 1764400000000 + int64_t{window} * 60000;
    char buffer[512];
    std::snprintf(buffer, sizeof buffer,
                  "{\"id\":\"%016x\",\"node\":\"gw-%02d\",\"pipeline\":\"room_temp_1m\","
                  "\"version\":\"3f2a9c01\",\"key\":\"dev-%03d\",\"window\":{\"start\":%lld,"
                  "\"end\":%lld},\"kind\":\"final\",\"revision\":0,\"closed_by\":\"watermark\","
                  "\"values\":{\"avg\":%.1f,\"n\":%d,\"p95\":%.1f},\"watermark\":%lld}",
                  i, node, key, static_cast<long long>(start),
                  static_cast<long long>(start + 60000), 20.0 + (i % 70) / 10.0, 60 + i % 5,
                  22.0 + (i % 30) / 10.0, static_cast<long long>(watermark_ms));
    return buffer;
}

std::string topic_of(int i) {
    char buffer[64];
    std::snprintf(buffer, sizeof buffer, "tidemark/gw-%02d/room_temp_1m", i % 50);
    return buffer;
}

void make_schema(const test::Postgres& pg, const std::string& schema) {
    postgres::StoreOptions o;
    o.conninfo = pg.conninfo();
    o.schema = schema;
    auto store = postgres::SinkStore::open(o);
    if (!store) {
        fail("schema " + schema + ": " + store.error().message);
    }
}

std::vector<Row> parse_rows(int n) {
    codec::UpstreamParser parser;
    std::vector<Row> rows;
    for (int i = 0; i < n; ++i) {
        auto parsed = parser.parse(topic_of(i), record(i, 1764400065000));
        const auto& r = std::get<core::ReceivedResult>(parsed);
        rows.push_back({r.node, r.pipeline, r.version, r.key, std::to_string(r.window_start_ms),
                        std::to_string(r.window_end_ms), std::to_string(r.revision),
                        std::string(core::emission_kind_name(r.kind)), r.closed_by, r.values_json,
                        std::to_string(r.watermark_ms), r.id});
    }
    return rows;
}

namespace {

const char* const set_clause =
    " ON CONFLICT (node, pipeline, version, key, window_start, window_end) DO UPDATE SET "
    "revision = EXCLUDED.revision, kind = EXCLUDED.kind, closed_by = EXCLUDED.closed_by, "
    "aggregates = EXCLUDED.aggregates, watermark = EXCLUDED.watermark, id = EXCLUDED.id "
    "WHERE EXCLUDED.revision > r.revision OR (EXCLUDED.revision = r.revision AND "
    "EXCLUDED.kind = 'retract' AND r.kind <> 'retract')";

std::string ms(const std::string& p) {
    return "('epoch'::timestamptz + " + p + "::bigint * interval '1 millisecond')";
}

}  // namespace

// (a) One prepared upsert per row, pipelined, 1000 per transaction.
double bare_row_loop(const test::Postgres& pg, const std::string& schema,
                     const std::vector<Row>& rows) {
    make_schema(pg, schema);
    PGconn* c = connect(pg);
    const std::string sql = "INSERT INTO " + schema + ".results AS r VALUES ($1, $2, $3, $4, " +
                            ms("$5") + ", " + ms("$6") + ", $7, $8, $9, $10, " + ms("$11") +
                            ", $12)" + set_clause;
    check(PQprepare(c, "upsert", sql.c_str(), 12, nullptr), c, "prepare");
    const auto started = Steady::now();
    PQenterPipelineMode(c);
    for (size_t i = 0; i < rows.size(); i += 1000) {
        PQsendQueryParams(c, "BEGIN", 0, nullptr, nullptr, nullptr, nullptr, 0);
        for (size_t j = i; j < std::min(rows.size(), i + 1000); ++j) {
            const Row& r = rows[j];
            const char* v[12] = {r.node.c_str(),     r.pipeline.c_str(), r.version.c_str(),
                                 r.key.c_str(),      r.ws.c_str(),       r.we.c_str(),
                                 r.revision.c_str(), r.kind.c_str(),     r.closed_by.c_str(),
                                 r.values.c_str(),   r.wm.c_str(),       r.id.c_str()};
            PQsendQueryPrepared(c, "upsert", 12, v, nullptr, nullptr, 0);
        }
        PQsendQueryParams(c, "COMMIT", 0, nullptr, nullptr, nullptr, nullptr, 0);
        PQpipelineSync(c);
        // Each statement's result, a NULL after each, then the sync's marker.
        for (PGresult* res = PQgetResult(c);; res = PQgetResult(c)) {
            if (res == nullptr) continue;
            const bool synced = PQresultStatus(res) == PGRES_PIPELINE_SYNC;
            check(res, c, "upsert");
            if (synced) break;
        }
    }
    PQexitPipelineMode(c);
    const double s = seconds_since(started);
    PQfinish(c);
    return static_cast<double>(rows.size()) / s;
}

// (b) The sink's statement: one INSERT ... SELECT FROM unnest per 1000 rows.
double bare_unnest(const test::Postgres& pg, const std::string& schema,
                   const std::vector<Row>& rows) {
    make_schema(pg, schema);
    PGconn* c = connect(pg);
    const std::string sql =
        "INSERT INTO " + schema + ".results AS r SELECT u.node, u.pipeline, u.version, u.key, " +
        ms("u.ws") + ", " + ms("u.we") + ", u.revision, u.kind, u.closed_by, u.aggregates, " +
        ms("u.wm") +
        ", u.id FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], "
        "$6::bigint[], $7::integer[], $8::text[], $9::text[], $10::jsonb[], $11::bigint[], "
        "$12::text[]) AS u(node, pipeline, version, key, ws, we, revision, kind, closed_by, "
        "aggregates, wm, id)" +
        set_clause;
    auto quoted = [](std::string& out, const std::string& s) {
        out += '"';
        for (char ch : s) {
            if (ch == '"' || ch == '\\') out += '\\';
            out += ch;
        }
        out += '"';
    };
    const auto started = Steady::now();
    for (size_t i = 0; i < rows.size(); i += 1000) {
        std::string a[12];
        for (auto& s : a)
            s = "{";
        for (size_t j = i; j < std::min(rows.size(), i + 1000); ++j) {
            const Row& r = rows[j];
            const std::string* fields[12] = {&r.node,      &r.pipeline, &r.version,  &r.key,
                                             &r.ws,        &r.we,       &r.revision, &r.kind,
                                             &r.closed_by, &r.values,   &r.wm,       &r.id};
            for (int k = 0; k < 12; ++k) {
                if (j > i) a[k] += ',';
                quoted(a[k], *fields[k]);
            }
        }
        const char* v[12];
        for (int k = 0; k < 12; ++k) {
            a[k] += '}';
            v[k] = a[k].c_str();
        }
        check(PQexec(c, "BEGIN"), c, "begin");
        check(PQexecParams(c, sql.c_str(), 12, nullptr, v, nullptr, nullptr, 0), c, "upsert");
        check(PQexec(c, "COMMIT"), c, "commit");
    }
    const double s = seconds_since(started);
    PQfinish(c);
    return static_cast<double>(rows.size()) / s;
}

// (c) The sink's own PostgreSQL adapter on the same rows, batches of 1000 built beforehand:
// what the sink's writer costs the database, without the broker, the spool or the parser.
double store_loop(const test::Postgres& pg, const std::string& schema, int n) {
    make_schema(pg, schema);
    postgres::StoreOptions o;
    o.conninfo = pg.conninfo();
    o.schema = schema;
    auto store = postgres::SinkStore::open(o);
    codec::UpstreamParser parser;
    std::vector<core::SinkBatch> batches;
    for (int i = 0; i < n; i += 1000) {
        core::SinkBatchBuilder b;
        for (int j = i; j < std::min(n, i + 1000); ++j) {
            const std::string payload = record(j, 1764400065000);
            b.add(parser.parse(topic_of(j), payload), topic_of(j), payload, 0, 0);
        }
        batches.push_back(b.take());
    }
    const auto started = Steady::now();
    uint64_t offset = 0;
    for (const auto& batch : batches) {
        auto ok = (*store)->commit(batch, {"bench-store", "spool", ++offset});
        if (!ok) {
            fail("store: " + ok.error().message);
        }
    }
    return static_cast<double>(n) / seconds_since(started);
}

}  // namespace tidemark::bench
