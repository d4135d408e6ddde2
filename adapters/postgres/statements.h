// The statements one batch is written with (internal to adapters/postgres): built once, then
// run one by one or sent together in a pipeline (sink_store.cpp).
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "adapters/postgres/connection.h"
#include "core/sink_batch.h"

namespace tidemark::postgres {

/// One statement and the text of its parameters (each a whole column, for unnest).
struct Statement {
    std::string what;  ///< for error messages: "writing 1000 results"
    std::string sql;
    std::vector<std::string> texts;
    /// Views of `texts`: valid while this Statement lives and is not moved.
    std::vector<Param> params() const;
};

/// `schema` is quoted (Connection::identifier). nullopt: nothing to write.
std::optional<Statement> results_statement(const std::string& schema, const core::SinkBatch& b);
/// The tally guard: a row is replaced only by a higher too_late.
std::optional<Statement> late_statement(const std::string& schema, const core::SinkBatch& b);
std::optional<Statement> side_statement(const std::string& schema, const core::SinkBatch& b);
/// Gateways' health, one row per node: replaced only by a record with a later time.
std::optional<Statement> health_statement(const std::string& schema, const core::SinkBatch& b);
std::optional<Statement> rejected_statement(const std::string& schema,
                                            std::span<const core::RejectedMessage> rejected,
                                            const std::string& sink);
Statement mark_statement(const std::string& schema, const SpoolMark& mark);

/// Milliseconds since the epoch as timestamptz, exactly: bigint * interval goes through float8,
/// which is exact below 2^53 ms (the parser keeps times far inside that).
std::string ms_time(const std::string& column);

/// The JSON string of `s` (valid UTF-8 without NUL: the parser saw to that).
void append_json_text(std::string& out, std::string_view s);

}  // namespace tidemark::postgres
