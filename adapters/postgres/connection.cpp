#include "adapters/postgres/connection.h"

#include <charconv>
#include <optional>

namespace tidemark::postgres {

namespace {

Error error_of(ErrorKind kind, std::string message) {
    return Error{std::move(message), static_cast<int>(kind)};
}

std::string trimmed(const char* text) {
    std::string s = text != nullptr ? text : "";
    while (!s.empty() && (s.back() == '\n' || s.back() == ' '))
        s.pop_back();
    for (char& c : s)
        if (c == '\n') c = ' ';
    return s;
}

}  // namespace

ErrorKind error_kind(std::string_view state) {
    if (state.size() != 5) return ErrorKind::connection;  // no answer from the server
    const std::string_view category = state.substr(0, 2);
    // 08: connection exception; 57P01..57P03: the server shuts down or is starting up.
    if (category == "08" || state == "57P01" || state == "57P02" || state == "57P03")
        return ErrorKind::connection;
    // 22: data exception (a value the type refuses), 23: integrity constraint, 54: program
    // limit (an index row too large): the same record fails every time.
    if (category == "22" || category == "23" || category == "54") return ErrorKind::refused;
    // Everything else is retried with an alarm: 40 (deadlock, serialization), 53 (disk full,
    // out of memory, too many connections), 57014 (statement timeout), 58 (I/O), and 42
    // (privileges, a table someone dropped): an operator can fix those, the data cannot.
    return ErrorKind::transient;
}

std::string printable_text(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    const auto* p = reinterpret_cast<const unsigned char*>(s.data());
    const std::size_t n = s.size();
    for (std::size_t i = 0; i < n;) {
        const unsigned char c = p[i];
        std::size_t length = c < 0x80                 ? 1
                             : c >= 0xC2 && c <= 0xDF ? 2
                             : c >= 0xE0 && c <= 0xEF ? 3
                             : c >= 0xF0 && c <= 0xF4 ? 4
                                                      : 0;
        bool valid = length > 0 && c != 0 && i + length <= n;
        for (std::size_t k = 1; valid && k < length; ++k)
            valid = (p[i + k] & 0xC0) == 0x80;
        if (valid && length == 3) {
            const unsigned char d = p[i + 1];
            valid = !(c == 0xE0 && d < 0xA0) && !(c == 0xED && d >= 0xA0);  // overlong, surrogate
        } else if (valid && length == 4) {
            const unsigned char d = p[i + 1];
            valid = !(c == 0xF0 && d < 0x90) && !(c == 0xF4 && d >= 0x90);  // overlong, > U+10FFFF
        }
        if (valid) {
            out.append(s.substr(i, length));
            i += length;
        } else {
            out += "\xEF\xBF\xBD";
            ++i;
        }
    }
    return out;
}

void ArrayText::add(std::string_view text) {
    if (text_.size() > 1) text_ += ',';
    text_ += '"';
    for (const char c : text) {
        if (c == '"' || c == '\\') text_ += '\\';
        text_ += c;
    }
    text_ += '"';
}

void ArrayText::add(int64_t value) {
    if (text_.size() > 1) text_ += ',';
    char digits[24];
    const auto end = std::to_chars(digits, digits + sizeof digits, value).ptr;
    text_.append(digits, end);
}

std::string ArrayText::take() {
    text_ += '}';
    std::string out = std::move(text_);
    text_ = "{";
    return out;
}

Result<std::unique_ptr<Connection>> Connection::open(const StoreOptions& options) {
    const std::string timeout = std::to_string(options.connect_timeout_s);
    // Later entries override earlier ones, and the expanded conninfo overrides what precedes it:
    // the operator's settings win over the defaults; the password file wins over the conninfo.
    std::vector<const char*> keys{
        "connect_timeout",  "keepalives",       "keepalives_idle", "keepalives_interval",
        "keepalives_count", "application_name", "dbname"};
    std::vector<const char*> values{
        timeout.c_str(),         "1", "30", "10", "3", options.application_name.c_str(),
        options.conninfo.c_str()};
    if (!options.password.empty()) {
        keys.push_back("password");
        values.push_back(options.password.c_str());
    }
    keys.push_back(nullptr);
    values.push_back(nullptr);
    PGconn* conn = PQconnectdbParams(keys.data(), values.data(), /*expand_dbname=*/1);
    if (conn == nullptr) return std::unexpected(error_of(ErrorKind::connection, "out of memory"));
    if (PQstatus(conn) != CONNECTION_OK) {
        std::string message = "cannot connect to PostgreSQL: " + trimmed(PQerrorMessage(conn));
        PQfinish(conn);
        return std::unexpected(error_of(ErrorKind::connection, std::move(message)));
    }
    std::unique_ptr<Connection> c(new Connection(conn));
    // synchronous_commit on: the spool deletes what the database says it committed, so a
    // commit must survive a server crash (with "off" the last commits can vanish). A session
    // setting, so a database or role default of "off" does not reach the sink.
    auto set = c->exec("setting up the session",
                       "SET synchronous_commit = on; SET client_encoding = 'UTF8'; "
                       "SET client_min_messages = warning; "
                       "SET statement_timeout = " +
                           std::to_string(options.statement_timeout_ms) +
                           "; SET lock_timeout = " + std::to_string(options.statement_timeout_ms));
    if (!set) return std::unexpected(set.error());
    return c;
}

Connection::~Connection() {
    PQfinish(conn_);
}

PGresult* Connection::run(const std::string& sql, std::span<const Param> params) {
    std::vector<const char*> values;
    std::vector<int> lengths, formats;
    values.reserve(params.size());
    for (const Param& p : params) {
        values.push_back(p.is_null ? nullptr : p.value.data());
        lengths.push_back(static_cast<int>(p.value.size()));
        formats.push_back(p.binary ? 1 : 0);
    }
    // Text parameters must be NUL-terminated: every caller passes std::string data.
    return PQexecParams(conn_, sql.c_str(), static_cast<int>(params.size()), nullptr, values.data(),
                        lengths.data(), formats.data(), /*resultFormat=*/0);
}

Error Connection::failure(std::string_view what, const PGresult* result) const {
    const char* state = result != nullptr ? PQresultErrorField(result, PG_DIAG_SQLSTATE) : nullptr;
    ErrorKind kind = error_kind(state != nullptr ? state : "");
    if (PQstatus(conn_) != CONNECTION_OK) kind = ErrorKind::connection;
    std::string message = std::string(what) + ": ";
    message += result != nullptr && PQresultErrorMessage(result)[0] != '\0'
                   ? trimmed(PQresultErrorMessage(result))
                   : trimmed(PQerrorMessage(conn_));
    if (state != nullptr) message += std::string(" (SQLSTATE ") + state + ")";
    return error_of(kind, std::move(message));
}

Result<void> Connection::exec(std::string_view what, const std::string& sql) {
    PGresult* r = PQexec(conn_, sql.c_str());
    const ExecStatusType status = PQresultStatus(r);
    if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
        Error e = failure(what, r);
        PQclear(r);
        return std::unexpected(std::move(e));
    }
    PQclear(r);
    return {};
}

Result<std::vector<Row>> Connection::query(std::string_view what, const std::string& sql,
                                           std::span<const Param> params) {
    PGresult* r = run(sql, params);
    const ExecStatusType status = PQresultStatus(r);
    if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
        Error e = failure(what, r);
        PQclear(r);
        return std::unexpected(std::move(e));
    }
    std::vector<Row> rows(static_cast<std::size_t>(PQntuples(r)));
    const int columns = PQnfields(r);
    for (std::size_t i = 0; i < rows.size(); ++i) {
        for (int j = 0; j < columns; ++j) {
            const int row = static_cast<int>(i);
            if (PQgetisnull(r, row, j))
                rows[i].emplace_back(std::nullopt);
            else
                rows[i].emplace_back(std::string(PQgetvalue(r, row, j),
                                                 static_cast<std::size_t>(PQgetlength(r, row, j))));
        }
    }
    PQclear(r);
    return rows;
}

Result<uint64_t> Connection::command(std::string_view what, const std::string& sql,
                                     std::span<const Param> params) {
    PGresult* r = run(sql, params);
    const ExecStatusType status = PQresultStatus(r);
    if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
        Error e = failure(what, r);
        PQclear(r);
        return std::unexpected(std::move(e));
    }
    uint64_t touched = 0;
    const char* text = PQcmdTuples(r);
    std::from_chars(text, text + std::char_traits<char>::length(text), touched);
    PQclear(r);
    return touched;
}

Result<void> Connection::send(std::string_view what, const std::string& sql,
                              std::span<const Param> params) {
    if (sent_.empty() && PQenterPipelineMode(conn_) != 1)
        return std::unexpected(failure("entering pipeline mode", nullptr));
    std::vector<const char*> values;
    std::vector<int> lengths, formats;
    for (const Param& p : params) {
        values.push_back(p.is_null ? nullptr : p.value.data());
        lengths.push_back(static_cast<int>(p.value.size()));
        formats.push_back(p.binary ? 1 : 0);
    }
    // libpq copies the statement and its parameters into its buffer here.
    if (PQsendQueryParams(conn_, sql.c_str(), static_cast<int>(params.size()), nullptr,
                          values.data(), lengths.data(), formats.data(), 0) != 1) {
        Error e = failure(what, nullptr);
        sent_.clear();
        PQexitPipelineMode(conn_);
        return std::unexpected(std::move(e));
    }
    sent_.emplace_back(what);
    return {};
}

Result<std::vector<uint64_t>> Connection::finish() {
    TM_ASSERT(!sent_.empty());
    const std::vector<std::string> sent = std::move(sent_);
    sent_.clear();
    if (PQpipelineSync(conn_) != 1) {
        Error e = failure("sending the pipeline", nullptr);
        PQexitPipelineMode(conn_);
        return std::unexpected(std::move(e));
    }
    std::vector<uint64_t> touched;
    std::optional<Error> first_error;
    // Each statement: its result, then NULL; then the sync's own result.
    for (size_t i = 0; i <= sent.size();) {
        PGresult* r = PQgetResult(conn_);
        if (r == nullptr) {
            if (PQstatus(conn_) != CONNECTION_OK) {
                if (!first_error) first_error = failure("reading the pipeline's answers", nullptr);
                break;
            }
            continue;
        }
        const ExecStatusType status = PQresultStatus(r);
        if (status == PGRES_PIPELINE_SYNC) {
            PQclear(r);
            break;
        }
        if (status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK) {
            uint64_t n = 0;
            const char* text = PQcmdTuples(r);
            std::from_chars(text, text + std::char_traits<char>::length(text), n);
            touched.push_back(n);
        } else if (status != PGRES_PIPELINE_ABORTED && !first_error) {
            first_error = failure(i < sent.size() ? sent[i] : "the pipeline", r);
        }
        PQclear(r);
        ++i;
    }
    PQexitPipelineMode(conn_);
    if (first_error) return std::unexpected(std::move(*first_error));
    return touched;
}

std::string Connection::literal(std::string_view s) const {
    char* quoted = PQescapeLiteral(conn_, s.data(), s.size());
    TM_ASSERT(quoted != nullptr);  // only on out of memory or invalid encoding (never ours)
    std::string out(quoted);
    PQfreemem(quoted);
    return out;
}

std::string Connection::identifier(std::string_view s) const {
    char* quoted = PQescapeIdentifier(conn_, s.data(), s.size());
    TM_ASSERT(quoted != nullptr);
    std::string out(quoted);
    PQfreemem(quoted);
    return out;
}

int Connection::server_version() const {
    return PQserverVersion(conn_);
}

bool Connection::broken() const {
    return PQstatus(conn_) != CONNECTION_OK;
}

}  // namespace tidemark::postgres
