#include "adapters/postgres/sink_store.h"

#include <algorithm>

#include "adapters/postgres/connection.h"
#include "adapters/postgres/schema.h"
#include "adapters/postgres/statements.h"

namespace tidemark::postgres {

namespace {

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
    health_rows += o.health_rows;
    health_older += o.health_older;
    late_rows += o.late_rows;
    late_older += o.late_older;
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
    if (auto started = start_commit(batch, mark); !started) return std::unexpected(started.error());
    return finish_commit();
}

Result<void> SinkStore::start_commit(const core::SinkBatch& batch, const SpoolMark& mark) {
    TM_ASSERT(!in_flight_);
    client_ = mark.client_id;
    InFlight f;
    if (!batch.version_changes.empty()) {
        // Version records depend on each other's answers (RETURNING, the view name check):
        // statement by statement, now.
        f.outcome = [&]() -> Result<CommitOutcome> {
            if (auto begun = connection_->exec("beginning a transaction", "BEGIN"); !begun)
                return std::unexpected(begun.error());
            return finish([&]() -> Result<CommitOutcome> {
                CommitOutcome out;
                if (auto ok = write(batch, out); !ok) return std::unexpected(ok.error());
                if (auto ok = write_mark(mark); !ok) return std::unexpected(ok.error());
                return out;
            }());
        }();
        in_flight_ = std::move(f);
        return {};
    }
    // Everything else goes in one round trip: BEGIN, the rows, the offset, COMMIT.
    f.pipelined = true;
    f.results = batch.results.size();
    f.outcome = CommitOutcome{};
    f.outcome->rows_older = batch.results_superseded;
    f.outcome->health_older = batch.health_superseded;
    f.health = batch.health.size();
    std::vector<Statement> statements;
    statements.push_back({"beginning a transaction", "BEGIN", {}});
    if (auto st = results_statement(s_, batch)) {
        f.results_at = static_cast<int>(statements.size());
        statements.push_back(std::move(*st));
    }
    f.late = batch.late.size();
    if (auto st = late_statement(s_, batch)) {
        f.late_at = static_cast<int>(statements.size());
        statements.push_back(std::move(*st));
    }
    if (auto st = side_statement(s_, batch)) {
        f.side_at = static_cast<int>(statements.size());
        statements.push_back(std::move(*st));
    }
    if (auto st = health_statement(s_, batch)) {
        f.health_at = static_cast<int>(statements.size());
        statements.push_back(std::move(*st));
    }
    if (auto st = rejected_statement(s_, batch.rejected, client_)) {
        f.rejected_at = static_cast<int>(statements.size());
        statements.push_back(std::move(*st));
    }
    statements.push_back(mark_statement(s_, mark));
    statements.push_back({"committing", "COMMIT", {}});
    for (const Statement& st : statements) {
        const std::vector<Param> params = st.params();
        if (auto sent = connection_->send(st.what, st.sql, params); !sent) return sent;
    }
    in_flight_ = std::move(f);
    return {};
}

Result<CommitOutcome> SinkStore::finish_commit() {
    TM_ASSERT(in_flight_.has_value());
    InFlight f = std::move(*in_flight_);
    in_flight_.reset();
    if (!f.pipelined) return std::move(f.outcome);
    auto touched = connection_->finish();
    if (!touched) {
        // The transaction the pipeline began is aborted (or gone with the connection).
        if (!connection_->broken())
            static_cast<void>(connection_->exec("rolling back", "ROLLBACK"));
        return std::unexpected(touched.error());
    }
    CommitOutcome& out = *f.outcome;
    auto at = [&](int index) -> uint64_t {
        return index >= 0 && static_cast<size_t>(index) < touched->size() ? (*touched)[index] : 0;
    };
    if (f.results_at >= 0) {
        const uint64_t written = at(f.results_at);
        TM_ASSERT(written <= f.results);
        out.rows_written = written;
        out.rows_older += f.results - written;
    }
    if (f.late_at >= 0) {
        const uint64_t written = at(f.late_at);
        TM_ASSERT(written <= f.late);
        out.late_rows = written;
        out.late_older = f.late - written;
    }
    out.side_rows = at(f.side_at);
    if (f.health_at >= 0) {
        const uint64_t written = at(f.health_at);
        TM_ASSERT(written <= f.health);
        out.health_rows = written;
        out.health_older += f.health - written;
    }
    out.rejected = at(f.rejected_at);
    return std::move(f.outcome);
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
    out.rows_older += batch.results_superseded;
    if (auto st = results_statement(s_, batch)) {
        auto touched = connection_->command(st->what, st->sql, st->params());
        if (!touched) return std::unexpected(touched.error());
        TM_ASSERT(*touched <= batch.results.size());
        out.rows_written += *touched;
        out.rows_older += batch.results.size() - *touched;
    }
    if (auto st = late_statement(s_, batch)) {
        auto touched = connection_->command(st->what, st->sql, st->params());
        if (!touched) return std::unexpected(touched.error());
        TM_ASSERT(*touched <= batch.late.size());
        out.late_rows += *touched;
        out.late_older += batch.late.size() - *touched;
    }
    std::vector<std::string> changed;
    if (auto ok = write_versions(batch, out, changed); !ok) return ok;
    if (auto st = side_statement(s_, batch)) {
        auto touched = connection_->command(st->what, st->sql, st->params());
        if (!touched) return std::unexpected(touched.error());
        out.side_rows += *touched;
    }
    out.health_older += batch.health_superseded;
    if (auto st = health_statement(s_, batch)) {
        auto touched = connection_->command(st->what, st->sql, st->params());
        if (!touched) return std::unexpected(touched.error());
        TM_ASSERT(*touched <= batch.health.size());
        out.health_rows += *touched;
        out.health_older += batch.health.size() - *touched;
    }
    if (auto ok = write_rejected(batch.rejected, out); !ok) return ok;
    return update_views(changed, out);
}

Result<void> SinkStore::write_rejected(std::span<const core::RejectedMessage> rejected,
                                       CommitOutcome& out) {
    auto st = rejected_statement(s_, rejected, client_);
    if (!st) return {};
    auto touched = connection_->command(st->what, st->sql, st->params());
    if (!touched) {
        // Only the sink's own text goes here, made printable: a refusal would be a bug, and
        // rejecting the rejection would loop. Retried as transient; the alarm shows it.
        Error e = touched.error();
        if (e.code == static_cast<int>(ErrorKind::refused))
            return std::unexpected(with_kind(ErrorKind::transient, e.message));
        return std::unexpected(std::move(e));
    }
    out.rejected += *touched;
    return {};
}

Result<void> SinkStore::write_mark(const SpoolMark& mark) {
    const Statement st = mark_statement(s_, mark);
    auto touched = connection_->command(st.what, st.sql, st.params());
    if (!touched) return std::unexpected(touched.error());
    return {};
}

}  // namespace tidemark::postgres
