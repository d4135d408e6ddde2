// Pipeline versions in-process (DESIGN.md section 4): a changed pipeline backfills beside the
// live version and switches; its results are replay's; a crash during the backfill resumes it;
// a broken reload changes nothing; a removed pipeline's version record is cleared. Real log and
// LMDB, no broker (tests/integration/versions_test.cpp has the daemon and brokers).
#include <catch2/catch.hpp>
#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "adapters/config/config.h"
#include "adapters/lmdb/store.h"
#include "adapters/log/log_reader.h"
#include "adapters/log/log_writer.h"
#include "core/engine.h"
#include "firmware/clock.h"
#include "firmware/notify.h"
#include "firmware/service/processor.h"
#include "firmware/service/result_sinks.h"
#include "firmware/service/service_parts.h"
#include "firmware/service/versions.h"
#include "tests/firmware/service/parts_support.h"
#include "tests/support/broker.h"

using namespace tidemark;
using tidemark::test::open_parts;
using tidemark::test::TempDir;

namespace {

// fsync never: step() reads what was written. max_share 1: the backfill is not held back.
std::string config_json(const std::string& data_dir, const std::string& size,
                        const std::string& extra_pipeline = "") {
    return R"({"node_id": "gw", "data_dir": ")" + data_dir + R"(",
      "storage": {"fsync": "never"},
      "source": {"uri": "tcp://127.0.0.1:1883"},
      "backfill": {"max_share": 1, "max_live_delay": "50ms"},
      "pipelines": [{"name": "p", "topic": "t/+", "key": "topic:1",
        "timestamp": {"pointer": "/ts", "format": "epoch_ms"}, "fields": {"v": "/v"},
        "window": {"type": "tumbling", "size": ")" +
           size + R"("},
        "watermark": {"delay": "0s", "idle_timeout": "1h", "max_future": "1h"},
        "aggregates": {"n": {"fn": "count"}, "s": {"fn": "sum", "field": "v"}}})" +
           extra_pipeline + "]}";
}

config::Config load(const std::string& json) {
    auto c = config::parse_config(json, "/");
    INFO((c ? std::string() : config::format_errors(c.error())));
    REQUIRE(c);
    return *c;
}

// Seven devices, one message a second each, event time = ingest time.
void append_messages(firmware::ServiceParts& parts, int from, int to) {
    for (int i = from; i < to; ++i) {
        const int64_t ingest = 1'000'000 + i * 1'000;
        const std::string payload =
            R"({"ts": )" + std::to_string(ingest) + R"(, "v": )" + std::to_string(i) + "}";
        REQUIRE(parts.host().log().append(log::RecordType::message, ingest,
                                          "t/d" + std::to_string(i % 7), payload));
    }
}

void step_all(firmware::ServiceParts& parts) {
    for (;;) {
        auto n = parts.host().step(4096, /*drain=*/true);
        REQUIRE(n);
        if (*n == 0) return;
    }
}

// Backfill steps until no backfill is left (each step is bounded by max_live_delay).
void backfill_all(firmware::ServiceParts& parts) {
    for (int i = 0; i < 20'000 && parts.host().backfilling(); ++i) {
        auto n = parts.host().backfill_step(64);
        REQUIRE(n);
        if (*n == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    REQUIRE_FALSE(parts.host().backfilling());
}

std::vector<lmdb::OutboxRow> outbox(firmware::ServiceParts& parts) {
    auto rows = parts.host().store().outbox_peek(0, 1'000'000);
    REQUIRE(rows);
    return *rows;
}

// Payloads of one version's results, in outbox order.
std::vector<std::string> results_of(const std::vector<lmdb::OutboxRow>& rows,
                                    const std::string& version) {
    std::vector<std::string> out;
    for (const auto& r : rows)
        if (!r.version_record &&
            r.payload.find(R"("version":")" + version + '"') != std::string::npos)
            out.push_back(r.payload);
    return out;
}

// What `tidemark replay` of `config` gives over the log: the same Processor from empty state.
std::vector<std::string> replay(const config::Config& config) {
    auto processor = firmware::Processor::create(config);
    REQUIRE(processor);
    firmware::BatchSink sink(config);
    auto reader = log::LogReader::open(config.data_dir + "/log");
    REQUIRE(reader);
    log::Record rec;
    while (*(*reader)->next(rec))
        (*processor)->feed(rec, sink);
    std::vector<std::string> out;
    for (const auto& r : sink.rows)
        out.push_back(r.payload);
    return out;
}

}  // namespace

TEST_CASE("a changed pipeline backfills beside the live version, then switches", "[versions]") {
    TempDir dir;
    const config::Config before = load(config_json(dir.path(), "10s"));
    const config::Config after = load(config_json(dir.path(), "30s"));
    REQUIRE(before.pipelines[0].spec.version != after.pipelines[0].spec.version);
    const std::string v1 = before.pipelines[0].spec.version, v2 = after.pipelines[0].spec.version;
    {
        auto parts = open_parts(before);
        append_messages(*parts, 0, 300);
        step_all(*parts);
        REQUIRE(parts->host().checkpoint());
    }
    // Restart with the new definition: v1 keeps running live from its stored definition while
    // v2 backfills; live records keep coming.
    auto parts = open_parts(after);
    REQUIRE(parts->host().backfilling());
    append_messages(*parts, 300, 400);
    step_all(*parts);
    const size_t v1_before_switch = results_of(outbox(*parts), v1).size();
    CHECK(v1_before_switch > 0);
    backfill_all(*parts);
    append_messages(*parts, 400, 500);
    step_all(*parts);
    const auto rows = outbox(*parts);

    // v1 emitted nothing after the switch; v2's results are replay's, byte for byte.
    CHECK(results_of(rows, v1).size() == v1_before_switch);
    CHECK(results_of(rows, v2) == replay(after));
    CHECK_FALSE(results_of(rows, v2).empty());
    // The version records: v1's at its first start, v2's after v2's history and before its
    // first live result.
    std::vector<size_t> records;
    for (size_t i = 0; i < rows.size(); ++i)
        if (rows[i].version_record) records.push_back(i);
    REQUIRE(records.size() == 2);
    CHECK(rows[records[0]].payload.find(R"("version":")" + v1) != std::string::npos);
    const std::string& record = rows[records[1]].payload;
    CHECK(record.find(R"("version":")" + v2 + R"(","since_ms":1000000,"previous":")" + v1) !=
          std::string::npos);
    // DESIGN.md section 4: the node and pipeline it speaks for, the ingest time of the record
    // at which the switch happened (the newest record read before it: message 399; the first
    // start read none), and what
    // each value is, so that a sink can order two records and type its columns.
    const auto first = nlohmann::json::parse(rows[records[0]].payload);
    const auto second = nlohmann::json::parse(record);
    for (const auto* j : {&first, &second}) {
        CHECK(j->at("node") == before.node_id);
        CHECK(j->at("pipeline") == "p");
        CHECK(j->at("aggregates") == nlohmann::json::parse(R"({"n": "count", "s": "sum"})"));
    }
    CHECK(first.at("switch_ms") == 0);  // live from the store's first start, before any record
    CHECK(second.at("switch_ms") == 1'000'000 + 399 * 1'000);
    CHECK(second.at("switch_ms") > first.at("switch_ms"));
    size_t v2_after = 0;
    for (size_t i = records[1]; i < rows.size(); ++i)
        if (rows[i].payload.find(v2) != std::string::npos && !rows[i].version_record) ++v2_after;
    CHECK(v2_after > 0);
    CHECK(v2_after < results_of(rows, v2).size());
}

TEST_CASE("a crash during a backfill resumes it; the results are the uncrashed run's",
          "[versions]") {
    const auto run = [](bool crash) {
        TempDir dir;
        const config::Config before = load(config_json(dir.path(), "10s"));
        const config::Config after = load(config_json(dir.path(), "30s"));
        {
            auto parts = open_parts(before);
            append_messages(*parts, 0, 2000);
            step_all(*parts);
            REQUIRE(parts->host().checkpoint());
        }
        if (crash) {
            auto parts = open_parts(after);
            // Part of the backfill, a checkpoint, more of it, then the process dies.
            for (int i = 0; i < 3; ++i) {
                std::this_thread::sleep_for(std::chrono::milliseconds(2));
                REQUIRE(parts->host().backfill_step(100));
            }
            REQUIRE(parts->host().checkpoint());
            REQUIRE(parts->host().backfill_step(100));
            REQUIRE(parts->host().backfilling());
        }
        auto parts = open_parts(after);
        REQUIRE(parts->host().backfilling());
        backfill_all(*parts);
        append_messages(*parts, 2000, 2100);
        step_all(*parts);
        std::vector<std::string> payloads;
        for (const auto& r : outbox(*parts))
            payloads.push_back(r.payload);
        return payloads;
    };
    CHECK(run(true) == run(false));
}

TEST_CASE("a reload applies pipelines live; a broken one changes nothing", "[versions]") {
    TempDir dir;
    const std::string path = dir.path() + "/tidemark.json";
    const auto write = [&](const std::string& text) {
        FILE* f = std::fopen(path.c_str(), "w");
        REQUIRE(f);
        std::fputs(text.c_str(), f);
        std::fclose(f);
    };
    const config::Config before = load(config_json(dir.path(), "10s"));
    auto parts = open_parts(before);
    append_messages(*parts, 0, 100);
    step_all(*parts);
    firmware::Notifier notifier;

    write(R"({"node_id": "gw", "nonsense": 1})");
    CHECK_FALSE(parts->reload(path, notifier));
    CHECK_FALSE(parts->host().backfilling());
    parts->refresh_health(nullptr, nullptr);
    CHECK(parts->health_json().find(R"("last_reload":{"errors":[)") != std::string::npos);
    CHECK(parts->health_json().find(R"("ok":false)") != std::string::npos);

    // A second pipeline: it backfills the history, then runs live beside the first.
    const std::string second = R"(, {"name": "q", "topic": "t/+", "key": "topic:1",
        "window": {"type": "tumbling", "size": "20s"}, "aggregates": {"n": {"fn": "count"}}})";
    write(config_json(dir.path(), "10s", second));
    REQUIRE(parts->reload(path, notifier));
    CHECK(parts->host().backfilling());
    parts->refresh_health(nullptr, nullptr);
    CHECK(parts->health_json().find(R"("state":"running")") != std::string::npos);
    backfill_all(*parts);
    parts->refresh_health(nullptr, nullptr);
    CHECK(parts->health_json().find(R"("state":"switched")") != std::string::npos);
    CHECK(parts->health_json().find(R"("ok":true)") != std::string::npos);

    // Removed again: its version record is cleared (an empty retained record), after its rows.
    write(config_json(dir.path(), "10s"));
    REQUIRE(parts->reload(path, notifier));
    append_messages(*parts, 100, 110);
    step_all(*parts);
    const auto rows = outbox(*parts);
    REQUIRE_FALSE(rows.empty());
    // The last row of q is the empty record (the reload put it in the outbox with its plan).
    size_t last_q = rows.size();
    for (size_t i = 0; i < rows.size(); ++i)
        if (rows[i].pipeline == "q") last_q = i;
    REQUIRE(last_q < rows.size());
    CHECK(rows[last_q].version_record);
    CHECK(rows[last_q].payload.empty());
}

TEST_CASE("a reload that fails half way leaves pipelines, state and version records as they were",
          "[versions]") {
    // The reload removes q, then the restore of p fails on one damaged stored entry. Before
    // (issue 24, finding 5): the failed plan had already taken q out of the registry and queued
    // its state's erasure and an empty version record; the rollback then planned the old config
    // against that registry, so q backfilled from offset 0, its live state was dropped at the
    // next checkpoint and its version record cleared, while the reload was reported refused.
    TempDir dir;
    const std::string path = dir.path() + "/tidemark.json";
    const std::string second = R"(, {"name": "q", "topic": "t/+", "key": "topic:1",
        "window": {"type": "tumbling", "size": "20s"}, "aggregates": {"n": {"fn": "count"}}})";
    const config::Config before = load(config_json(dir.path(), "10s", second));
    auto parts = open_parts(before);
    append_messages(*parts, 0, 100);
    step_all(*parts);
    REQUIRE(parts->host().checkpoint());
    const auto registry = [&] {
        auto r = firmware::read_registry(parts->host().store());
        REQUIRE(r);
        REQUIRE(*r);
        return (*r)->encode();
    };
    const std::string registry_before = registry();
    const std::string q_prefix = core::Engine::state_prefix("q");
    const auto q_entries = [&] {
        size_t n = 0;
        REQUIRE(parts->host().store().for_each_state([&](std::string_view k, std::string_view) {
            n += k.starts_with(q_prefix);
            return tidemark::Result<void>{};
        }));
        return n;
    };
    const size_t q_before = q_entries();
    REQUIRE(q_before > 0);
    {
        // One of p's stored windows (not rewritten by the reload's checkpoint, as the
        // pipeline's meta record is), damaged under the committed checkpoint: 'K', the key
        // (u32 length, bytes), 'w', the start.
        std::string damaged;
        const std::string p_prefix = core::Engine::state_prefix("p");
        REQUIRE(parts->host().store().for_each_state([&](std::string_view k, std::string_view) {
            std::string_view rest = k.substr(std::min(k.size(), p_prefix.size()));
            if (damaged.empty() && k.starts_with(p_prefix) && rest.size() > 5 && rest[0] == 'K') {
                const size_t n = static_cast<uint8_t>(rest[1]);  // keys "d0".."d6": short
                if (rest.size() > 5 + n && rest[5 + n] == 'w') damaged = std::string(k);
            }
            return tidemark::Result<void>{};
        }));
        REQUIRE_FALSE(damaged.empty());
        auto meta = parts->host().store().load_checkpoint();
        REQUIRE(meta);
        REQUIRE(*meta);
        auto txn = parts->host().store().begin_checkpoint();
        REQUIRE(txn);
        (*txn)->put(damaged, "\xff");
        REQUIRE((*txn)->commit(**meta));
    }
    FILE* f = std::fopen(path.c_str(), "w");
    REQUIRE(f);
    std::fputs(config_json(dir.path(), "10s").c_str(), f);  // q removed
    std::fclose(f);
    const auto q_results = [&] {
        size_t n = 0;
        for (const auto& row : outbox(*parts))
            n += !row.version_record && row.pipeline == "q";
        return n;
    };
    const size_t q_results_before = q_results();
    firmware::Notifier notifier;
    CHECK_FALSE(parts->reload(path, notifier));

    CHECK_FALSE(parts->host().backfilling());
    append_messages(*parts, 100, 130);
    step_all(*parts);
    REQUIRE(parts->host().checkpoint());
    CHECK(q_entries() >= q_before);
    CHECK(registry() == registry_before);
    for (const auto& row : outbox(*parts))
        CHECK_FALSE((row.version_record && row.payload.empty()));  // no record cleared
    // q kept running live: it emitted results for the records after the reload.
    CHECK(q_results() > q_results_before);
}

TEST_CASE("a version run again never reuses an id of its earlier run", "[versions]") {
    // DESIGN.md section 4: v2 backfills, is abandoned for v1 (a revert), and is configured
    // again later; the pipeline q is removed and added back. Each new run has a label of its
    // own (the hash and a run number), so its results, partial when retention moved the log's
    // start, never take the ids of the complete ones already sent (issue 24, finding 6).
    TempDir dir;
    const std::string path = dir.path() + "/tidemark.json";
    const auto write = [&](const std::string& text) {
        FILE* f = std::fopen(path.c_str(), "w");
        REQUIRE(f);
        std::fputs(text.c_str(), f);
        std::fclose(f);
    };
    const std::string q = R"(, {"name": "q", "topic": "t/+", "key": "topic:1",
        "window": {"type": "tumbling", "size": "20s"}, "aggregates": {"n": {"fn": "count"}}})";
    const config::Config v1 = load(config_json(dir.path(), "10s", q));
    const config::Config v2 = load(config_json(dir.path(), "30s", q));
    const std::string h2 = v2.pipelines[0].spec.version;
    auto parts = open_parts(v1);
    firmware::Notifier notifier;
    append_messages(*parts, 0, 300);
    step_all(*parts);

    write(config_json(dir.path(), "30s", q));  // v2 backfills...
    REQUIRE(parts->reload(path, notifier));
    const auto h2_rows = [&] {
        size_t n = 0;
        for (const auto& row : outbox(*parts))
            n += row.payload.find(R"("version":")" + h2 + '"') != std::string::npos;
        return n;
    };
    for (int i = 0; i < 20'000 && parts->host().backfilling() && h2_rows() == 0; ++i) {
        REQUIRE(parts->host().backfill_step(16));
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    REQUIRE(parts->host().backfilling());
    REQUIRE(h2_rows() > 0);
    write(config_json(dir.path(), "10s", q));  // ... and is abandoned for v1
    REQUIRE(parts->reload(path, notifier));
    CHECK_FALSE(parts->host().backfilling());
    write(config_json(dir.path(), "10s"));  // q removed
    REQUIRE(parts->reload(path, notifier));
    append_messages(*parts, 300, 400);
    step_all(*parts);
    write(config_json(dir.path(), "30s", q));  // v2 again, q back
    REQUIRE(parts->reload(path, notifier));
    backfill_all(*parts);
    append_messages(*parts, 400, 450);
    step_all(*parts);

    const auto rows = outbox(*parts);
    std::map<uint64_t, std::string> content;  // id -> the row's payload
    std::set<std::string> p_versions, q_versions;
    for (const auto& row : rows) {
        if (row.version_record) continue;
        const auto j = nlohmann::json::parse(row.payload);
        (row.pipeline == "p" ? p_versions : q_versions).insert(j.at("version").get<std::string>());
        auto [it, added] = content.emplace(row.id, row.payload);
        if (!added) CHECK(it->second == row.payload);  // an id, one content
    }
    CHECK(p_versions.count(h2) == 1);
    CHECK(p_versions.count(h2 + ".1") == 1);
    CHECK(q_versions.size() == 2);  // its first run and the one after it came back
    for (const auto& v : q_versions)
        CHECK(firmware::is_run_of(v, v1.pipelines[1].spec.version));
}

TEST_CASE("the version registry reads back what it wrote and refuses damage", "[versions]") {
    firmware::VersionRegistry r;
    firmware::VersionEntry& e = r.get("p");
    e.live_version = "0123abcd";
    e.live_definition = R"({"name":"p"})";
    e.backfill_version = "89abcdef";
    e.backfill_offset = 4096;
    e.record_pending = true;
    r.get("q").since_ms = -5;
    CHECK(r.start_run("p", "0123abcd") == "0123abcd");
    CHECK(r.start_run("p", "0123abcd") == "0123abcd.1");
    CHECK(r.start_run("q", "0123abcd") == "0123abcd");
    CHECK(r.start_run("p", "0123abcd") == "0123abcd.2");
    CHECK(firmware::is_run_of("0123abcd.2", "0123abcd"));
    CHECK_FALSE(firmware::is_run_of("0123abcd.2", "0123abce"));
    const std::string bytes = r.encode();
    auto back = firmware::VersionRegistry::decode(bytes);
    REQUIRE(back);
    REQUIRE(back->entries.size() == 2);
    CHECK(back->entries[0].backfill_offset == 4096);
    CHECK(back->entries[0].record_pending);
    CHECK(back->entries[1].since_ms == -5);
    CHECK(back->ran.size() == 2);
    CHECK(back->runs_numbered == 2);
    CHECK(back->start_run("q", "0123abcd") == "0123abcd.3");
    CHECK(back->encode() != bytes);
    back = firmware::VersionRegistry::decode(bytes);
    REQUIRE(back);
    CHECK(back->encode() == bytes);
    for (size_t cut = 0; cut < bytes.size(); ++cut)
        CHECK_FALSE(firmware::VersionRegistry::decode(bytes.substr(0, cut)));
}
