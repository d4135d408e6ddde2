// One libpq connection and the statements the adapter runs on it (internal to adapters/postgres:
// nothing outside sees a libpq type).
#pragma once

#include <libpq-fe.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "adapters/postgres/types.h"
#include "core/result.h"

namespace tidemark::postgres {

/// One statement parameter, sent as text unless `binary` (bytea).
struct Param {
    std::string_view value;
    bool is_null = false;
    bool binary = false;
};

using Row = std::vector<std::optional<std::string>>;

/// Operation: open() connects with PQconnectdbParams: the adapter's defaults (connect_timeout,
/// TCP keep-alives, application_name) first, then the operator's conninfo expanded over them,
/// then the password; then pins the session settings the sink's guarantees rest on
/// (synchronous_commit on: a commit the sink acts on must survive a server crash, since the
/// spool deletes what it holds once committed; UTF-8; the statement timeout). Every call
/// returns an Error whose code is an ErrorKind: connection (reconnect), transient (retry),
/// refused (the data); the message names the statement's purpose and PostgreSQL's words.
/// Concurrency: one thread at a time (libpq's rule for a PGconn).
/// Limits: results are read whole into memory: only small ones are asked for.
class Connection {
  public:
    static Result<std::unique_ptr<Connection>> open(const StoreOptions& options);
    ~Connection();
    Connection(const Connection&) = delete;
    Connection& operator=(const Connection&) = delete;

    /// Statements without parameters (several, separated by ';').
    Result<void> exec(std::string_view what, const std::string& sql);
    /// One statement; the rows it returns (none for most).
    Result<std::vector<Row>> query(std::string_view what, const std::string& sql,
                                   std::span<const Param> params = {});
    /// One statement; the number of rows it touched (PQcmdTuples).
    Result<uint64_t> command(std::string_view what, const std::string& sql,
                             std::span<const Param> params = {});

    /// Statements sent at once, answered at once (libpq's pipeline mode): one round trip for a
    /// whole transaction. send() queues one; finish() sends the sync and reads every answer:
    /// the rows each statement touched, in order. The first statement that fails makes
    /// PostgreSQL skip the rest up to the sync: its error is returned, and a transaction begun
    /// in the pipeline is left aborted (the caller rolls it back). Not nested, not mixed with the
    /// calls above until finish().
    Result<void> send(std::string_view what, const std::string& sql, std::span<const Param> params);
    Result<std::vector<uint64_t>> finish();

    /// `s` quoted as an SQL literal / identifier for this connection.
    std::string literal(std::string_view s) const;
    std::string identifier(std::string_view s) const;
    /// The server's version, e.g. 150018 for 15.18.
    int server_version() const;
    /// Whether the connection is gone (the caller should open a new one).
    bool broken() const;

  private:
    explicit Connection(PGconn* conn) : conn_(conn) {}
    PGresult* run(const std::string& sql, std::span<const Param> params);
    Error failure(std::string_view what, const PGresult* result) const;
    PGconn* conn_ = nullptr;
    std::vector<std::string> sent_;  // what each statement in the pipeline is for
};

/// The ErrorKind of a SQLSTATE (five characters; empty: no server answer).
ErrorKind error_kind(std::string_view sqlstate);

/// `s` with every byte that is not part of well-formed UTF-8, and every NUL, made U+FFFD: what
/// a text column takes from input the sink could not parse.
std::string printable_text(std::string_view s);

/// A PostgreSQL array literal built item by item ({"a","b"} or {1,2}), for unnest($1::T[]):
/// one parameter carries a whole column of a batch.
class ArrayText {
  public:
    void add(std::string_view text);  ///< quoted, '"' and '\\' escaped
    void add(int64_t value);
    /// The literal; the builder is empty again afterwards.
    std::string take();

  private:
    std::string text_ = "{";
};

}  // namespace tidemark::postgres
