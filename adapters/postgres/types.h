// Values the PostgreSQL adapter takes and returns (the sink's tables: DESIGN.md section 10).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tidemark::postgres {

/// How to reach the database. The conninfo is libpq's ("host=... dbname=... user=..." or a
/// postgresql:// URI); the adapter adds keep-alives, a connect timeout and an application
/// name before it (so that the operator's own settings win), and the password after it.
struct StoreOptions {
    std::string conninfo;
    std::string password;  ///< from password_file; empty: libpq's own (~/.pgpass, trust, ...)
    std::string schema = "tidemark";  ///< an SQL identifier (the config checks it)
    std::string application_name = "tidemark-sink";
    int connect_timeout_s = 10;
    /// Every statement's limit: a lock held by someone else, or a server that stopped
    /// answering, ends in an error the sink retries, never in a writer stuck for good.
    int statement_timeout_ms = 15'000;
};

/// How far a sink's spool is in the database: the spool (by its id, which changes when the
/// spool is made anew) and the offset of the first record not yet committed.
struct SpoolMark {
    std::string client_id;
    std::string spool_id;
    uint64_t offset = 0;
};

/// What one commit did.
struct CommitOutcome {
    uint64_t rows_written = 0;      ///< results inserted or replaced
    uint64_t rows_older = 0;        ///< results the revision guard refused (in the table)
    uint64_t versions_changed = 0;  ///< version rows inserted or replaced
    uint64_t versions_older = 0;    ///< version records refused (not a higher switch_ms)
    uint64_t versions_removed = 0;  ///< version rows deleted by an empty retained record
    uint64_t side_rows = 0;         ///< side output rows inserted (repeats are skipped)
    uint64_t health_rows = 0;       ///< health rows inserted or replaced (a newer record)
    uint64_t health_older = 0;      ///< health records older than the row (or the batch) had
    uint64_t late_rows = 0;         ///< too-late tallies inserted or raised
    uint64_t late_older = 0;        ///< tallies refused: not a higher count (in the table)
    uint64_t rejected = 0;          ///< rows written to `rejected`
    uint64_t views_updated = 0;     ///< current_<pipeline> views created or replaced
    /// Views the database would not let the sink change (a user's view depends on one, say):
    /// each names the view and PostgreSQL's reason. The data is committed all the same.
    std::vector<std::string> view_problems;

    void add(const CommitOutcome& other);
};

/// Error::code of the adapter's failures: what the caller should do about them.
enum class ErrorKind : int {
    connection = 1,  ///< the connection is gone or unusable: reconnect (with backoff)
    transient = 2,   ///< the server refused for now (deadlock, disk full, timeout): retry
    refused = 3,     ///< the data: a value PostgreSQL will never take; find the record
};

}  // namespace tidemark::postgres
