// The current_<pipeline> views: typed columns from the version records (sink_store.h).
#include <algorithm>
#include <array>

#include "adapters/postgres/connection.h"
#include "adapters/postgres/sink_store.h"

namespace tidemark::postgres {

namespace {

struct Column {
    std::string name;
    bool count = true;  // every version that names it says "count"
};

}  // namespace

Result<void> SinkStore::update_views(const std::vector<std::string>& pipelines,
                                     CommitOutcome& out) {
    if (pipelines.empty()) return {};
    // Two sinks changing one view at once: the second waits here until the first commits,
    // then reads the versions that commit left (read committed: each statement sees them).
    const std::string key = "tidemark-sink-views:" + schema_;
    const Param p{key};
    if (auto locked = connection_->query(
            "taking the view lock", "SELECT pg_advisory_xact_lock(hashtext($1))", std::span(&p, 1));
        !locked)
        return std::unexpected(locked.error());
    std::vector<std::string> unique = pipelines;
    std::sort(unique.begin(), unique.end());
    unique.erase(std::unique(unique.begin(), unique.end()), unique.end());
    for (const std::string& pipeline : unique)
        if (auto ok = update_view(pipeline, out); !ok) return ok;
    return {};
}

Result<void> SinkStore::update_view(const std::string& pipeline, CommitOutcome& out) {
    const auto view_name = core::pipeline_view_name(pipeline);
    TM_ASSERT(view_name.has_value());  // the parser refuses records of other names
    const Param p{pipeline};
    // Newest version first: its aggregates lead the column order.
    auto rows = connection_->query(
        "reading the versions of " + pipeline,
        "SELECT a.name, v.aggregates ->> a.name FROM " + s_ +
            ".versions v, unnest(v.aggregate_names) WITH ORDINALITY AS a(name, position) "
            "WHERE v.pipeline = $1 ORDER BY v.switch_ms DESC, v.node, a.position",
        std::span(&p, 1));
    if (!rows) return std::unexpected(rows.error());
    auto any = connection_->query("reading the versions of " + pipeline,
                                  "SELECT 1 FROM " + s_ + ".versions WHERE pipeline = $1 LIMIT 1",
                                  std::span(&p, 1));
    if (!any) return std::unexpected(any.error());
    if (any->empty()) return {};  // no version left: the view stays (it shows nothing now)
    std::vector<Column> columns;
    for (const Row& row : *rows) {
        const std::string name = row.at(0).value_or("");
        const bool count = row.at(1).value_or("") == "count";
        auto it = std::find_if(columns.begin(), columns.end(),
                               [&](const Column& c) { return c.name == name; });
        if (it == columns.end())
            columns.push_back({name, count});
        else
            it->count = it->count && count;
    }
    const std::string view = s_ + "." + connection_->identifier(*view_name);
    std::string body =
        " AS SELECT c.node, c.key, c.window_start, c.window_end, c.revision, c.closed_by";
    for (const Column& c : columns) {
        body += c.count ? ", " + s_ + ".as_count(c.aggregates -> "
                        : ", " + s_ + ".as_double(c.aggregates -> ";
        body += connection_->literal(c.name) + ") AS " + connection_->identifier(c.name);
    }
    body += " FROM " + s_ + ".current c WHERE c.pipeline = " + connection_->literal(pipeline);
    // CREATE OR REPLACE keeps whatever depends on the view, but may only add columns at the
    // end; a column that goes or changes type needs DROP and CREATE. Each try has a savepoint
    // of its own, so a refusal costs the view change and not the batch.
    const std::array<std::string, 2> attempts{
        "CREATE OR REPLACE VIEW " + view + body,
        "DROP VIEW IF EXISTS " + view + "; CREATE VIEW " + view + body};
    std::string last_error;
    for (const std::string& ddl : attempts) {
        if (auto ok = connection_->exec("a savepoint", "SAVEPOINT view"); !ok) return ok;
        auto made = connection_->exec("making the view " + view, ddl);
        if (made) {
            if (auto ok = connection_->exec("a savepoint", "RELEASE SAVEPOINT view"); !ok)
                return ok;
            ++out.views_updated;
            return {};
        }
        if (made.error().code == static_cast<int>(ErrorKind::connection)) return made;
        last_error = made.error().message;
        if (auto ok = connection_->exec("a savepoint", "ROLLBACK TO SAVEPOINT view"); !ok)
            return ok;
    }
    out.view_problems.push_back(last_error);
    return {};
}

}  // namespace tidemark::postgres
