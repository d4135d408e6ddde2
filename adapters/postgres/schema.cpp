#include "adapters/postgres/schema.h"

#include "adapters/postgres/connection.h"

namespace tidemark::postgres {

namespace {

// Version 1: the names of DESIGN.md section 10, and what the sink needs beside them.
// `@` stands for the schema. The statements are the ones docs/SINK.md shows, word for word.
constexpr std::string_view schema_v1 = R"sql(
CREATE TABLE @.results (
    node         text        NOT NULL,
    pipeline     text        NOT NULL,
    version      text        NOT NULL,
    key          text        NOT NULL,
    window_start timestamptz NOT NULL,
    window_end   timestamptz NOT NULL,
    revision     integer     NOT NULL,
    kind         text        NOT NULL CHECK (kind IN ('final', 'update', 'retract')),
    closed_by    text        NOT NULL,
    aggregates   jsonb       NOT NULL,
    watermark    timestamptz NOT NULL,
    id           text        NOT NULL,
    PRIMARY KEY (node, pipeline, version, key, window_start, window_end)
);
CREATE INDEX results_by_window ON @.results (pipeline, window_start);

CREATE TABLE @.versions (
    node            text        NOT NULL,
    pipeline        text        NOT NULL,
    version         text        NOT NULL,
    since           timestamptz NOT NULL,
    previous        text,
    switch_ms       bigint      NOT NULL,
    aggregates      jsonb       NOT NULL,
    aggregate_names text[]      NOT NULL,
    topic           text        NOT NULL,
    received        timestamptz NOT NULL,
    PRIMARY KEY (node, pipeline)
);
CREATE INDEX versions_by_topic ON @.versions (topic);

CREATE TABLE @.versions_removed (
    node      text        NOT NULL,
    pipeline  text        NOT NULL,
    switch_ms bigint      NOT NULL,
    topic     text        NOT NULL,
    removed   timestamptz NOT NULL,
    PRIMARY KEY (node, pipeline)
);

CREATE TABLE @.side_output (
    node     text        NOT NULL,
    pipeline text        NOT NULL,
    digest   text        NOT NULL,
    record   jsonb       NOT NULL,
    received timestamptz NOT NULL,
    PRIMARY KEY (node, pipeline, digest)
);

CREATE TABLE @.rejected (
    id           bigserial   PRIMARY KEY,
    topic        text        NOT NULL,
    payload      bytea       NOT NULL,
    reason       text        NOT NULL,
    received     timestamptz NOT NULL,
    sink         text        NOT NULL,
    spool_offset bigint      NOT NULL
);

CREATE TABLE @.sink_offsets (
    client_id    text        PRIMARY KEY,
    spool_id     text        NOT NULL,
    spool_offset bigint      NOT NULL,
    updated      timestamptz NOT NULL
);

CREATE FUNCTION @.as_count(value jsonb) RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN jsonb_typeof(value) = 'number'
                 AND value::numeric = trunc(value::numeric)
                 AND abs(value::numeric) <= 9223372036854775807
                THEN value::numeric::bigint END
$$;
CREATE FUNCTION @.as_double(value jsonb) RETURNS double precision
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN jsonb_typeof(value) = 'number' THEN value::numeric::double precision END
$$;

CREATE VIEW @.current AS
SELECT r.node, r.pipeline, r.version, r.key, r.window_start, r.window_end, r.revision,
       r.closed_by, r.aggregates, r.watermark, r.id
  FROM @.results r
  JOIN @.versions v ON v.node = r.node AND v.pipeline = r.pipeline AND v.version = r.version
 WHERE r.kind <> 'retract';
)sql";

// Version 2: gateways' health (health.upstream), the newest record per node. `time` is the
// record's time_ms (the gateway's clock), `received` the sink's commit time: a row whose
// `received` is old is a gateway that has stopped reporting.
constexpr std::string_view schema_v2 = R"sql(
CREATE TABLE @.health (
    node     text        PRIMARY KEY,
    time     timestamptz NOT NULL,
    record   jsonb       NOT NULL,
    topic    text        NOT NULL,
    received timestamptz NOT NULL
);
)sql";

// Version 3 (issue 29): each window's too-late tallies (late.report), and their sum per window.
constexpr std::string_view schema_v3 = R"sql(
CREATE TABLE @.late_windows (
    node         text        NOT NULL,
    pipeline     text        NOT NULL,
    version      text        NOT NULL,
    window_start timestamptz NOT NULL,
    window_end   timestamptz NOT NULL,
    since        timestamptz NOT NULL,
    too_late     bigint      NOT NULL CHECK (too_late > 0),
    as_of        timestamptz NOT NULL,
    id           text        NOT NULL,
    updated      timestamptz NOT NULL,
    PRIMARY KEY (node, pipeline, version, window_start, window_end, since)
);

CREATE VIEW @.late_window_totals AS
SELECT node, pipeline, version, window_start, window_end,
       sum(too_late)::bigint AS too_late, max(as_of) AS as_of, max(updated) AS updated
  FROM @.late_windows
 GROUP BY node, pipeline, version, window_start, window_end;
)sql";

std::string substituted(std::string_view sql, std::string_view schema) {
    std::string out;
    out.reserve(sql.size() + 64 * schema.size());
    for (const char c : sql) {
        if (c == '@')
            out += schema;
        else
            out += c;
    }
    return out;
}

}  // namespace

std::vector<Migration> migrations(std::string_view schema) {
    return {{1, "results, versions, side output, rejected, offsets; the view current",
             substituted(schema_v1, schema)},
            {2, "health: the newest health record per gateway", substituted(schema_v2, schema)},
            {3, "late_windows (too-late tallies); the view late_window_totals",
             substituted(schema_v3, schema)}};
}

int schema_version_latest() {
    return migrations("s").back().version;
}

Result<int> migrate(Connection& c, std::string_view schema) {
    const std::string s = c.identifier(schema);
    const std::string lock_key = "tidemark-sink-migrate:" + std::string(schema);
    const Param key{lock_key};
    if (auto locked = c.query("taking the migration lock", "SELECT pg_advisory_lock(hashtext($1))",
                              std::span(&key, 1));
        !locked)
        return std::unexpected(locked.error());
    auto run = [&]() -> Result<int> {
        if (auto ok = c.exec("creating the schema " + s,
                             "CREATE SCHEMA IF NOT EXISTS " + s + "; CREATE TABLE IF NOT EXISTS " +
                                 s + ".schema_version (version integer PRIMARY KEY, " +
                                 "applied timestamptz NOT NULL DEFAULT now(), summary text)");
            !ok)
            return std::unexpected(ok.error());
        auto rows = c.query("reading the schema version",
                            "SELECT coalesce(max(version), 0) FROM " + s + ".schema_version");
        if (!rows) return std::unexpected(rows.error());
        int version = std::stoi(rows->at(0).at(0).value_or("0"));
        if (version > schema_version_latest())
            return fail("the schema " + s + " is at version " + std::to_string(version) +
                        ", newer than this tidemark sink writes (" +
                        std::to_string(schema_version_latest()) + "): upgrade tidemark");
        for (const Migration& m : migrations(s)) {
            if (m.version <= version) continue;
            const std::string record =
                "INSERT INTO " + s + ".schema_version (version, summary) VALUES (" +
                std::to_string(m.version) + ", " + c.literal(m.summary) + ")";
            auto applied = c.exec("migrating " + s + " to version " + std::to_string(m.version),
                                  "BEGIN;\n" + m.sql + "\n" + record + ";\nCOMMIT");
            if (!applied) {
                static_cast<void>(c.exec("rolling back the migration", "ROLLBACK"));
                return std::unexpected(applied.error());
            }
            version = m.version;
        }
        return version;
    };
    auto version = run();
    static_cast<void>(c.query("releasing the migration lock",
                              "SELECT pg_advisory_unlock(hashtext($1))", std::span(&key, 1)));
    return version;
}

}  // namespace tidemark::postgres
