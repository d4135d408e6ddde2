// What bench_sink's phases share: the records it publishes, and the baselines the sink is
// measured against (bare libpq loops, the sink's own adapter) on the same rows.
#pragma once

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/support/postgres.h"

namespace tidemark::bench {

using Steady = std::chrono::steady_clock;

/// A failure ends the benchmark through main's catch, so that the destructors stop the servers
/// and remove their directories (std::exit would leave them).
[[noreturn]] inline void fail(const std::string& message) {
    throw std::runtime_error(message);
}

inline double seconds_since(Steady::time_point t) {
    return std::chrono::duration<double>(Steady::now() - t).count();
}

/// Record i of the benchmark: distinct windows (50 nodes x 40 keys x i / 2000 windows), ~300
/// bytes, `watermark_ms` in its "watermark"; and the topic it goes on.
std::string record(int i, int64_t watermark_ms);
std::string topic_of(int i);

/// The sink's schema `schema`, made by its own migration (exits on failure).
void make_schema(const test::Postgres& pg, const std::string& schema);

/// Records [0, n) as the sink parses them, as text parameters.
struct Row {
    std::string node, pipeline, version, key, ws, we, revision, kind, closed_by, values, wm, id;
};
std::vector<Row> parse_rows(int n);

/// Rows/s of each baseline into a fresh `schema`, 1000 rows per transaction: one prepared
/// upsert per row in libpq's pipeline mode; the sink's unnest statement; the sink's adapter on
/// batches built beforehand.
double bare_row_loop(const test::Postgres& pg, const std::string& schema,
                     const std::vector<Row>& rows);
double bare_unnest(const test::Postgres& pg, const std::string& schema,
                   const std::vector<Row>& rows);
double store_loop(const test::Postgres& pg, const std::string& schema, int n);

}  // namespace tidemark::bench
