// The sink's tables against a real PostgreSQL 15: the revision guard, tombstones, versions by
// switch_ms, removals, typed views, rejected rows, the offset, refused batches and two writers.
// One server for the whole program; each test case writes a schema of its own.
#include "adapters/postgres/sink_store.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <thread>

#include "adapters/postgres/schema.h"
#include "tests/support/postgres.h"

using namespace tidemark;
using core::EmissionKind;

namespace {

test::Postgres& server() {
    static test::Postgres pg = test::Postgres::start();
    return pg;
}

std::string fresh_schema() {
    static std::atomic<int> n{0};
    return "t" + std::to_string(++n);
}

postgres::StoreOptions options(const std::string& schema) {
    postgres::StoreOptions o;
    o.conninfo = server().conninfo();
    o.schema = schema;
    return o;
}

std::unique_ptr<postgres::SinkStore> open_store(const std::string& schema) {
    auto store = postgres::SinkStore::open(options(schema));
    INFO((store ? "" : store.error().message));
    REQUIRE(store.has_value());
    return std::move(*store);
}

core::ReceivedResult result(std::string key, uint32_t revision, EmissionKind kind,
                            std::string values, std::string node = "gw-1",
                            std::string version = "v1", std::string pipeline = "temp") {
    core::ReceivedResult r;
    r.id = key + std::to_string(revision) + std::string(core::emission_kind_name(kind));
    r.node = std::move(node);
    r.pipeline = std::move(pipeline);
    r.version = std::move(version);
    r.key = std::move(key);
    r.window_start_ms = 1764400000000;
    r.window_end_ms = 1764400060000;
    r.revision = revision;
    r.kind = kind;
    r.closed_by = revision == 0 ? "watermark" : "late";
    r.values_json = std::move(values);
    r.watermark_ms = 1764400065000;
    return r;
}

core::ReceivedVersion version(std::string version, int64_t switch_ms,
                              std::vector<core::AggregateColumn> aggregates,
                              std::string node = "gw-1", std::string pipeline = "temp") {
    core::ReceivedVersion v;
    v.topic = "tidemark/" + node + "/" + pipeline + "/version";
    v.node = std::move(node);
    v.pipeline = std::move(pipeline);
    v.version = std::move(version);
    v.since_ms = 1764400000000;
    v.switch_ms = switch_ms;
    v.aggregates = std::move(aggregates);
    v.record_json = "{}";
    return v;
}

const std::vector<core::AggregateColumn> avg_n{{"avg", "mean"}, {"n", "count"}};

core::SinkBatch batch_of(std::vector<core::UpstreamRecord> records) {
    core::SinkBatchBuilder b;
    for (auto& r : records)
        b.add(std::move(r), "tidemark/gw-1/temp", "payload", 1764400000000, 0);
    return b.take();
}

uint64_t next_offset = 1;

postgres::CommitOutcome commit(postgres::SinkStore& store, std::vector<core::UpstreamRecord> r) {
    auto outcome = store.commit(batch_of(std::move(r)), {"sink-test", "spool-a", next_offset++});
    INFO((outcome ? "" : outcome.error().message));
    REQUIRE(outcome.has_value());
    return *outcome;
}

std::string q(const std::string& sql) {
    return server().scalar(sql);
}

}  // namespace

TEST_CASE("the schema is made once, and opening again changes nothing", "[postgres][sink]") {
    const std::string s = fresh_schema();
    auto first = open_store(s);
    CHECK(first->schema_version() == postgres::schema_version_latest());
    auto second = open_store(s);
    CHECK(second->schema_version() == postgres::schema_version_latest());
    CHECK(q("SELECT count(*) FROM " + s + ".schema_version") ==
          std::to_string(postgres::migrations(s).size()));
    for (const char* relation :
         {"results", "versions", "versions_removed", "side_output", "rejected", "sink_offsets",
          "current", "health", "late_windows", "late_window_totals"})
        CHECK(q("SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = '" +
                s + "' AND c.relname = '" + relation + "'") == "1");
    // A schema newer than this build is refused, not written.
    server().query("INSERT INTO " + s + ".schema_version (version) VALUES (99)");
    auto newer = postgres::SinkStore::open(options(s));
    REQUIRE_FALSE(newer.has_value());
    CHECK(newer.error().message.find("upgrade tidemark") != std::string::npos);
}

TEST_CASE("health keeps the newest record per node: an older one never replaces it",
          "[postgres][sink][health]") {
    const std::string s = fresh_schema();
    auto store = open_store(s);
    auto health = [](std::string node, int64_t time_ms) {
        return core::ReceivedHealth{
            "tidemark/" + node + "/health", node, time_ms,
            R"({"node":")" + node + R"(","time_ms":)" + std::to_string(time_ms) + "}"};
    };
    auto out = commit(*store, {health("gw-1", 2000), health("gw-2", 1000), health("gw-1", 1000)});
    CHECK(out.health_rows == 2);
    CHECK(out.health_older == 1);                  // the older gw-1 of the same batch
    out = commit(*store, {health("gw-1", 1500)});  // late and older: changes nothing
    CHECK(out.health_rows == 0);
    CHECK(out.health_older == 1);
    out = commit(*store, {health("gw-1", 2000)});  // redelivered: nothing either
    CHECK(out.health_rows == 0);
    out = commit(*store, {health("gw-1", 3000)});
    CHECK(out.health_rows == 1);
    CHECK(q("SELECT string_agg(node || ' ' || (record ->> 'time_ms'), ',' ORDER BY node) FROM " +
            s + ".health") == "gw-1 3000,gw-2 1000");
    CHECK(q("SELECT time = 'epoch'::timestamptz + interval '3 seconds' FROM " + s +
            ".health WHERE node = 'gw-1'") == "t");
}

TEST_CASE("the revision guard: duplicates, redeliveries and older revisions change nothing",
          "[postgres][sink]") {
    const std::string s = fresh_schema();
    auto store = open_store(s);
    commit(*store, {version("v1", 100, avg_n)});
    auto out = commit(*store, {result("dev-1", 1, EmissionKind::update, R"({"avg":2,"n":2})")});
    CHECK(out.rows_written == 1);
    out = commit(*store, {result("dev-1", 0, EmissionKind::final_result, R"({"avg":1,"n":1})")});
    CHECK(out.rows_written == 0);
    CHECK(out.rows_older == 1);
    out = commit(*store, {result("dev-1", 1, EmissionKind::update, R"({"avg":2,"n":2})")});
    CHECK(out.rows_older == 1);  // the same record again
    CHECK(q("SELECT revision || ' ' || kind || ' ' || (aggregates->>'n') FROM " + s + ".results") ==
          "1 update 2");
    CHECK(q("SELECT avg || ' ' || n FROM " + s + ".current_temp") == "2 2");
}

TEST_CASE(
    "a retract is a tombstone: it wins its tie, hides the window, and an older revision "
    "cannot bring the window back",
    "[postgres][sink]") {
    const std::string s = fresh_schema();
    auto store = open_store(s);
    commit(*store, {version("v1", 100, avg_n)});
    commit(*store, {result("sess", 0, EmissionKind::final_result, R"({"avg":1,"n":1})")});
    CHECK(q("SELECT count(*) FROM " + s + ".current") == "1");
    auto out = commit(*store, {result("sess", 0, EmissionKind::retract, R"({"avg":1,"n":1})")});
    CHECK(out.rows_written == 1);
    CHECK(q("SELECT kind FROM " + s + ".results") == "retract");
    CHECK(q("SELECT count(*) FROM " + s + ".current") == "0");
    CHECK(q("SELECT count(*) FROM " + s + ".current_temp") == "0");
    out = commit(*store, {result("sess", 0, EmissionKind::final_result, R"({"avg":1,"n":1})")});
    CHECK(out.rows_older == 1);
    CHECK(q("SELECT count(*) FROM " + s + ".current") == "0");
    // retract mode: a retract of 0 and the update of 1 in one batch, in either order.
    out = commit(*store, {result("sess", 1, EmissionKind::update, R"({"avg":5,"n":5})"),
                          result("sess", 0, EmissionKind::retract, R"({"avg":1,"n":1})")});
    CHECK(out.rows_written == 1);
    CHECK(out.rows_older == 1);
    CHECK(q("SELECT n FROM " + s + ".current_temp") == "5");
}

TEST_CASE(
    "versions: the highest switch_ms wins, an empty record removes, a late redelivery "
    "does not bring a removed pipeline back",
    "[postgres][sink]") {
    const std::string s = fresh_schema();
    auto store = open_store(s);
    commit(*store,
           {result("dev-1", 0, EmissionKind::final_result, R"({"avg":1,"n":1})", "gw-1", "v1"),
            result("dev-1", 0, EmissionKind::final_result, R"({"avg":9,"n":9})", "gw-1", "v2")});
    // No version record yet: the pipeline is not in `current`.
    CHECK(q("SELECT count(*) FROM " + s + ".current") == "0");
    auto out = commit(*store, {version("v1", 100, avg_n)});
    CHECK(out.versions_changed == 1);
    CHECK(out.views_updated == 1);
    CHECK(q("SELECT version || ' ' || n FROM " + s + ".current_temp JOIN " + s +
            ".current USING (node, key, window_start, window_end)") == "v1 1");
    out = commit(*store, {version("v2", 200, avg_n)});
    CHECK(out.versions_changed == 1);
    CHECK(q("SELECT n FROM " + s + ".current_temp") == "9");
    out = commit(*store, {version("v1", 100, avg_n)});  // redelivered, older
    CHECK(out.versions_older == 1);
    CHECK(q("SELECT version FROM " + s + ".versions") == "v2");
    CHECK(q("SELECT n FROM " + s + ".current_temp") == "9");

    out = commit(*store, {core::VersionRemoved{"tidemark/gw-1/temp/version"}});
    CHECK(out.versions_removed == 1);
    CHECK(q("SELECT count(*) FROM " + s + ".versions") == "0");
    CHECK(q("SELECT count(*) FROM " + s + ".current") == "0");
    out = commit(*store, {version("v2", 200, avg_n)});  // the record before the removal
    CHECK(out.versions_older == 1);
    CHECK(q("SELECT count(*) FROM " + s + ".versions") == "0");
    out = commit(*store, {version("v3", 300, avg_n)});  // the pipeline added back
    CHECK(out.versions_changed == 1);
    CHECK(q("SELECT version FROM " + s + ".versions") == "v3");
    // A removal and an add in one batch keep their order.
    out = commit(*store,
                 {core::VersionRemoved{"tidemark/gw-1/temp/version"}, version("v4", 400, avg_n)});
    CHECK(q("SELECT version FROM " + s + ".versions") == "v4");
}

TEST_CASE("current_<pipeline> has a typed column per aggregate of any node's version",
          "[postgres][sink]") {
    const std::string s = fresh_schema();
    auto store = open_store(s);
    commit(*store,
           {version("v1", 100, {{"avg", "mean"}, {"n", "count"}}, "gw-1", "Room-Temp.1m"),
            version("v9", 100, {{"p95", "quantile"}, {"n", "count"}}, "gw-2", "Room-Temp.1m")});
    auto type_of = [&](const std::string& column) {
        return q(
            "SELECT format_type(a.atttypid, a.atttypmod) FROM pg_attribute a WHERE "
            "a.attrelid = '" +
            s + ".current_room_temp_1m'::regclass AND a.attname = '" + column + "'");
    };
    CHECK(type_of("node") == "text");
    CHECK(type_of("window_start") == "timestamp with time zone");
    CHECK(type_of("revision") == "integer");
    CHECK(type_of("avg") == "double precision");
    CHECK(type_of("n") == "bigint");
    CHECK(type_of("p95") == "double precision");
    CHECK(type_of("kind").empty());  // tombstones are hidden, kind is not shown
    commit(*store, {result("dev-1", 0, EmissionKind::final_result, R"({"avg":21.5,"n":60})", "gw-1",
                           "v1", "Room-Temp.1m"),
                    result("dev-2", 0, EmissionKind::final_result, R"({"p95":3.25,"n":7})", "gw-2",
                           "v9", "Room-Temp.1m")});
    CHECK(q("SELECT string_agg(node || ':' || coalesce(avg::text, '-') || ':' || n || ':' || "
            "coalesce(p95::text, '-'), ' ' ORDER BY node) FROM " +
            s + ".current_room_temp_1m") == "gw-1:21.5:60:- gw-2:-:7:3.25");
    // A version that makes n a mean: the column becomes double precision (DROP and CREATE).
    auto out = commit(*store, {version("v2", 200, {{"n", "mean"}}, "gw-1", "Room-Temp.1m")});
    CHECK(out.views_updated == 1);
    CHECK(type_of("n") == "double precision");
    CHECK(out.view_problems.empty());
    // A view PostgreSQL will not replace (a user's view depends on it) is reported, and the
    // data still goes in.
    server().query("CREATE VIEW " + s + ".dashboard AS SELECT n FROM " + s +
                   ".current_room_temp_1m");
    out = commit(*store, {version("v3", 300, {{"n", "count"}}, "gw-1", "Room-Temp.1m"),
                          version("v9b", 300, {{"n", "count"}}, "gw-2", "Room-Temp.1m")});
    CHECK(out.versions_changed == 2);
    REQUIRE(out.view_problems.size() == 1);
    CHECK(out.view_problems[0].find("current_room_temp_1m") != std::string::npos);
    CHECK(type_of("n") == "double precision");
}

TEST_CASE(
    "two pipelines whose names make one view name: the second version record is "
    "rejected",
    "[postgres][sink]") {
    const std::string s = fresh_schema();
    auto store = open_store(s);
    commit(*store, {version("v1", 100, avg_n, "gw-1", "a-b")});
    auto out = commit(*store, {version("v1", 100, avg_n, "gw-1", "a_b")});
    CHECK(out.versions_changed == 0);
    CHECK(out.rejected == 1);
    CHECK(q("SELECT reason FROM " + s + ".rejected").find("would share the view current_a_b") !=
          std::string::npos);
}

TEST_CASE("rejected messages keep topic, payload bytes, reason and time; side output once",
          "[postgres][sink]") {
    const std::string s = fresh_schema();
    auto store = open_store(s);
    core::SinkBatchBuilder b;
    b.add(core::Refusal{"not JSON"}, "tidemark/\xff/x", std::string("\x00\xff garbage", 10),
          1764400000123, 77);
    b.add(core::ReceivedSide{"gw-1", "temp", R"({"node":"gw-1","pipeline":"temp","reason":"x"})"},
          "t", "", 0, 0);
    b.add(core::ReceivedSide{"gw-1", "temp", R"({"node":"gw-1","pipeline":"temp","reason":"x"})"},
          "t", "", 0, 0);
    auto out = store->commit(b.take(), {"sink-test", "spool-a", 123});
    REQUIRE(out.has_value());
    CHECK(out->rejected == 1);
    CHECK(out->side_rows == 1);
    CHECK(q("SELECT topic FROM " + s + ".rejected") == "tidemark/\xef\xbf\xbd/x");
    CHECK(q("SELECT encode(payload, 'hex') FROM " + s + ".rejected") == "00ff2067617262616765");
    CHECK(q("SELECT reason || ' ' || spool_offset || ' ' || sink || ' ' || "
            "(extract(epoch FROM received) * 1000)::bigint FROM " +
            s + ".rejected") == "not JSON 77 sink-test 1764400000123");
    CHECK(q("SELECT record->>'reason' FROM " + s + ".side_output") == "x");
    auto mark = store->read_mark("sink-test");
    REQUIRE(mark.has_value());
    REQUIRE(mark->has_value());
    CHECK((*mark)->spool_id == "spool-a");
    CHECK((*mark)->offset == 123);
    auto none = store->read_mark("another-sink");
    REQUIRE(none.has_value());
    CHECK_FALSE(none->has_value());
}

TEST_CASE(
    "a batch PostgreSQL refuses goes part by part: the bad part is rejected, the rest and "
    "the offset commit",
    "[postgres][sink]") {
    const std::string s = fresh_schema();
    auto store = open_store(s);
    auto good = result("good", 0, EmissionKind::final_result, R"({"n":1})");
    auto bad = result("bad", 0, EmissionKind::final_result, "not json at all");  // jsonb refuses
    auto whole = batch_of({good, bad});
    auto refused = store->commit(whole, {"sink-test", "spool-a", 500});
    REQUIRE_FALSE(refused.has_value());
    CHECK(refused.error().code == static_cast<int>(postgres::ErrorKind::refused));
    CHECK(q("SELECT count(*) FROM " + s + ".results") == "0");  // rolled back
    std::vector<core::SinkBatch> parts{batch_of({good}), batch_of({bad})};
    parts[1].sources.push_back({"tidemark/gw-1/temp", "the bad payload", "", 5, 400});
    auto out = store->commit_parts(parts, {"sink-test", "spool-a", 500});
    INFO((out ? "" : out.error().message));
    REQUIRE(out.has_value());
    CHECK(out->rows_written == 1);
    CHECK(out->rejected == 1);
    CHECK(q("SELECT key FROM " + s + ".results") == "good");
    CHECK(q("SELECT reason FROM " + s + ".rejected").find("PostgreSQL refused it") !=
          std::string::npos);
    CHECK(q("SELECT spool_offset FROM " + s + ".sink_offsets") == "500");
}

TEST_CASE("two sinks writing the same windows at once: no deadlock, the highest rank stays",
          "[postgres][sink]") {
    const std::string s = fresh_schema();
    auto a = open_store(s);
    auto b = open_store(s);
    commit(*a, {version("v1", 100, avg_n)});
    constexpr int keys = 200, rounds = 10;
    std::atomic<int> failures{0};
    auto writer = [&](postgres::SinkStore& store, const std::string& client, bool reversed) {
        for (int round = 0; round < rounds; ++round) {
            std::vector<core::UpstreamRecord> records;
            for (int k = 0; k < keys; ++k) {
                const int key = reversed ? keys - 1 - k : k;
                records.push_back(result("k" + std::to_string(key), round, EmissionKind::update,
                                         R"({"n":)" + std::to_string(round) + "}"));
            }
            if (!store.commit(batch_of(std::move(records)),
                              {client, "spool", static_cast<uint64_t>(round)}))
                ++failures;
        }
    };
    std::thread ta([&] { writer(*a, "sink-a", false); });
    std::thread tb([&] { writer(*b, "sink-b", true); });
    ta.join();
    tb.join();
    CHECK(failures == 0);
    CHECK(q("SELECT count(*) FROM " + s +
            ".results WHERE revision = " + std::to_string(rounds - 1)) == std::to_string(keys));
}

namespace {
core::ReceivedLate tally(int64_t since_ms, int64_t count, std::string node = "gw-1") {
    core::ReceivedLate l;
    l.id = "late-" + std::to_string(since_ms) + "-" + std::to_string(count);
    l.node = std::move(node);
    l.pipeline = "temp";
    l.version = "v1";
    l.window_start_ms = 1764400000000;
    l.window_end_ms = 1764400060000;
    l.since_ms = since_ms;
    l.too_late = count;
    l.as_of_ms = since_ms + 1000 * count;
    return l;
}
}  // namespace

TEST_CASE("too-late tallies: the highest count stays, a window's tallies add up",
          "[postgres][sink]") {
    const std::string s = fresh_schema();
    auto store = open_store(s);
    auto out = commit(*store, {tally(1764400100000, 3)});
    CHECK(out.late_rows == 1);
    out = commit(*store, {tally(1764400100000, 5)});
    CHECK(out.late_rows == 1);
    // A redelivery of an older count, and the same record again: nothing changes.
    out = commit(*store, {tally(1764400100000, 4), tally(1764400100000, 5)});
    CHECK(out.late_rows == 0);
    CHECK(out.late_older == 1);  // the batch kept 5 of the two, which the table already holds
    CHECK(q("SELECT too_late || ' ' || id || ' ' || (extract(epoch FROM as_of) * 1000)::bigint "
            "FROM " +
            s + ".late_windows") == "5 late-1764400100000-5 1764400105000");
    // A second tally of the window (the gateway let the first go), and another node's.
    commit(*store, {tally(1764400900000, 2), tally(1764400100000, 9, "gw-2")});
    CHECK(q("SELECT too_late FROM " + s + ".late_window_totals WHERE node = 'gw-1'") == "7");
    CHECK(q("SELECT too_late FROM " + s + ".late_window_totals WHERE node = 'gw-2'") == "9");
    CHECK(q("SELECT (extract(epoch FROM window_start) * 1000)::bigint || ' ' || "
            "(extract(epoch FROM since) * 1000)::bigint FROM " +
            s + ".late_windows WHERE node = 'gw-2'") == "1764400000000 1764400100000");
}

TEST_CASE("a schema at version 1 gets the health and too-late tables on open, its rows kept",
          "[postgres][sink]") {
    const std::string s = fresh_schema();
    // A schema as a version 1 sink left it: made by this one, versions 2 and 3 taken back out.
    open_store(s).reset();
    server().query("DROP VIEW " + s + ".late_window_totals; DROP TABLE " + s +
                   ".late_windows; DROP TABLE " + s + ".health; DELETE FROM " + s +
                   ".schema_version WHERE version >= 2");
    server().query("INSERT INTO " + s + ".sink_offsets VALUES ('old', 'spool', 7, now())");
    REQUIRE(q("SELECT max(version) FROM " + s + ".schema_version") == "1");
    auto store = open_store(s);
    CHECK(store->schema_version() == postgres::schema_version_latest());
    CHECK(q("SELECT spool_offset FROM " + s + ".sink_offsets") == "7");
    CHECK(commit(*store, {tally(1764400100000, 2)}).late_rows == 1);
}
