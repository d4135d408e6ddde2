// The sink's schema (DESIGN.md section 10): its DDL, one migration per schema version, and the
// step that brings a database up to date. docs/SINK.md shows the same DDL (a fast test holds it
// to this file).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace tidemark::postgres {

class Connection;

struct Migration {
    int version = 0;
    std::string summary;
    std::string sql;  ///< statements separated by ';', for the schema given to migrations()
};

/// Every migration, oldest first, with `schema` (an identifier, as written in the config)
/// substituted.
std::vector<Migration> migrations(std::string_view schema);

/// The newest schema version this build writes.
int schema_version_latest();

/// Creates the schema when missing and applies the migrations it lacks, each in a transaction
/// of its own recorded in <schema>.schema_version, under an advisory lock so that two sinks
/// starting together migrate once. Returns the version the database is at. A database newer
/// than this build is refused (an older sink must not write a schema it does not know).
Result<int> migrate(Connection& connection, std::string_view schema);

}  // namespace tidemark::postgres
