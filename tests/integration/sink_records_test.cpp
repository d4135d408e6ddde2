// Issue 27: what the sink does with each kind of upstream message, through the real binary, one
// broker and one PostgreSQL for the program, a schema per test case. A version switch moves
// `current` only when its version record arrives; an empty retained record removes the pipeline;
// poison messages end in `rejected` with their reason and the stream goes on; an oversized
// message is cut and rejected; a full spool pauses ingest and loses nothing; check-config reads
// sink configs with JSON pointers.
#include <catch2/catch.hpp>

#include <atomic>

#include "tests/integration/sink_support.h"

namespace tidemark::test {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;

Postgres& server() {
    static Postgres pg = Postgres::start();
    return pg;
}

Broker& broker() {
    static Broker b = Broker::start();
    return b;
}

// A sink of its own (client id, schema, spool), started.
struct Scene {
    explicit Scene(const std::string& name, uint64_t max_payload = 0,
                   const std::string& spool_max = "64MiB")
        : schema(name), dir("tidemark-sink-records") {
        auto cfg = sink_config(broker().uri(), server(), "sink-" + name, dir.path() + "/spool",
                               {"tidemark/#"});
        cfg["sink"]["postgres"]["schema"] = schema;
        cfg["sink"]["spool"]["max_bytes"] = spool_max;
        if (max_payload > 0)
            cfg["sink"]["source"]["max_payload"] = std::to_string(max_payload) + "B";
        sink = std::make_unique<SinkProcess>(dir.path(), cfg, broker().uri());
        sink->start();
        publisher = std::make_unique<TestClient>(TestClient::connect(broker().uri()));
    }
    ~Scene() {
        if (sink) sink->terminate();
    }
    std::string q(const std::string& sql) const { return server().scalar(sql); }
    // Waits until every message published so far is committed.
    void settle(uint64_t records) {
        sink->wait_health(
            [&](const json& h) {
                return h["commits"]["records"].get<uint64_t>() >= records &&
                       h["spool"]["backlog_bytes"] == 0;
            },
            30s, std::to_string(records) + " messages committed");
    }

    std::string schema;
    TempDir dir;
    std::unique_ptr<SinkProcess> sink;
    std::unique_ptr<TestClient> publisher;
};

const json aggregates = {{"avg", "mean"}, {"n", "count"}};

}  // namespace

TEST_CASE("a version switch moves current only when its version record arrives",
          "[integration][sink]") {
    Scene s("switch");
    // Retained version records on topics of their own, so that other test cases do not see them.
    const std::string topic = "tidemark/gw-switch/p";
    s.publisher->publish(topic + "/version", version_json("gw-switch", "p", "v1", 1000, aggregates),
                         1, true);
    for (int k = 0; k < 5; ++k)
        s.publisher->publish(topic, result_json("gw-switch", "p", "v1", "dev-" + std::to_string(k),
                                                0, 60000, 0, "final", {{"avg", 1.5}, {"n", 3}}));
    s.settle(6);
    CHECK(s.q("SELECT count(*) FROM switch.current WHERE version = 'v1'") == "5");

    // The new version's history arrives first (its backfill): in results, not in current.
    for (int k = 0; k < 5; ++k)
        s.publisher->publish(topic, result_json("gw-switch", "p", "v2", "dev-" + std::to_string(k),
                                                0, 60000, 0, "final", {{"avg", 2.5}, {"n", 7}}));
    s.settle(11);
    CHECK(s.q("SELECT count(*) FROM switch.results WHERE version = 'v2'") == "5");
    CHECK(s.q("SELECT count(*) FROM switch.current WHERE version = 'v1'") == "5");
    CHECK(s.q("SELECT count(*) FROM switch.current WHERE version = 'v2'") == "0");
    CHECK(s.q("SELECT sum(n) FROM switch.current_p") == "15");

    // Its version record: current moves in one step.
    s.publisher->publish(topic + "/version", version_json("gw-switch", "p", "v2", 2000, aggregates),
                         1, true);
    s.settle(12);
    CHECK(s.q("SELECT count(*) FROM switch.current WHERE version = 'v2'") == "5");
    CHECK(s.q("SELECT count(*) FROM switch.current WHERE version = 'v1'") == "0");
    CHECK(s.q("SELECT sum(n) FROM switch.current_p") == "35");

    // The older record again (a redelivery) changes nothing.
    s.publisher->publish(topic + "/version", version_json("gw-switch", "p", "v1", 1000, aggregates),
                         1, false);
    s.settle(13);
    CHECK(s.q("SELECT version FROM switch.versions") == "v2");

    // A restart gets the retained record again at its subscription: still nothing changes.
    s.sink->terminate();
    s.sink->start();
    s.sink->wait_committed(30s);
    CHECK(s.q("SELECT version FROM switch.versions") == "v2");

    // The gateway removes the pipeline: an empty retained record.
    s.publisher->publish(topic + "/version", "", 1, true);
    REQUIRE(eventually([&] { return s.q("SELECT count(*) FROM switch.versions") == "0"; }, 30s));
    CHECK(s.q("SELECT count(*) FROM switch.current") == "0");
    CHECK(s.q("SELECT count(*) FROM switch.results") == "10");  // the rows stay
}

TEST_CASE("poison messages end in rejected with their reason, and the stream goes on",
          "[integration][sink]") {
    Scene s("poison", 2048);
    const std::string topic = "tidemark/gw-poison/p";
    s.publisher->publish(topic + "/version", version_json("gw-poison", "p", "v1", 1, aggregates), 1,
                         true);
    auto good = [&](int k) {
        s.publisher->publish(topic, result_json("gw-poison", "p", "v1", "dev-" + std::to_string(k),
                                                0, 60000, 0, "final", {{"avg", 1.0}, {"n", k}}));
    };
    const std::string valid = result_json("gw-poison", "p", "v1", "dev-x", 0, 60000, 0, "final",
                                          {{"avg", 1.0}, {"n", 1}});
    auto replace = [](std::string text, const std::string& from, const std::string& to) {
        const auto at = text.find(from);
        REQUIRE(at != std::string::npos);
        return text.replace(at, from.size(), to);
    };
    const std::vector<std::pair<std::string, std::string>> poison{
        {"not json", "not JSON"},
        {std::string("\xff\xfe\x00garbage", 10), "UTF-8"},
        {"[1,2,3]", "not a JSON object"},
        {R"({"hello":"world"})", "no tidemark record"},
        {replace(valid, R"("n":1)", R"("n":"one")"), "must be a number or null"},
        {replace(valid, R"("revision":0)", R"("revision":"0")"), "\"revision\""},
        {replace(valid, R"("kind":"final")", R"("kind":"maybe")"), "\"kind\""},
        {replace(valid, R"("pipeline":"p")", R"("pipeline":"p; DROP TABLE results")"),
         "cannot name the view"},
        {replace(valid, R"("key":"dev-x")", R"("key":"dev\u0000x")"), "NUL"},
        {std::string(4096, 'x'), "oversized"},
    };
    int published = 1;
    for (size_t i = 0; i < poison.size(); ++i) {
        good(static_cast<int>(i));
        s.publisher->publish(topic, poison[i].first);
        published += 2;
    }
    good(100);
    ++published;
    s.settle(static_cast<uint64_t>(published));
    CHECK(s.q("SELECT count(*) FROM poison.current") == std::to_string(poison.size() + 1));
    CHECK(s.q("SELECT count(*) FROM poison.rejected") == std::to_string(poison.size()));
    for (const auto& [payload, reason] : poison) {
        INFO("a poison message whose reason should say: " << reason);
        CHECK(s.q("SELECT count(*) FROM poison.rejected WHERE strpos(reason, " + std::string("'") +
                  reason + "') > 0 AND topic = '" + topic + "'") != "0");
    }
    // The bytes as they came (cut to 4 KiB for the oversized one).
    CHECK(s.q("SELECT encode(payload, 'hex') FROM poison.rejected WHERE reason LIKE '%UTF-8%'") ==
          "fffe0067617262616765");
    const auto health = s.sink->wait_committed(30s);
    CHECK(health["rejected"] == poison.size());
}

TEST_CASE("a full spool pauses ingest, the broker keeps the rest, and nothing is lost",
          "[integration][sink]") {
    // The smallest spool (16 MiB): paused at three quarters, about 6000 of these 2 KiB records.
    Scene s("spoolfull", 0, "16MiB");
    const std::string topic = "tidemark/gw-full/p";
    s.publisher->publish(topic + "/version", version_json("gw-full", "p", "v1", 1, aggregates), 1,
                         true);
    s.settle(1);
    server().stop();  // PostgreSQL away: everything waits in the spool, then at the broker
    const std::string long_key(2000, 'k');
    constexpr int records = 9000;
    auto publish_all = [&] {
        for (int i = 0; i < records; ++i)
            s.publisher->publish(
                topic, result_json("gw-full", "p", "v1", long_key + std::to_string(i), 0, 60000, 0,
                                   "final", {{"avg", 1.0}, {"n", i}}));
    };
    publish_all();
    const auto full = s.sink->wait_health(
        [](const json& h) {
            for (const auto& a : h["alarms"])
                if (a == "spool_full") return h["broker"]["paused"] == true;
            return false;
        },
        60s, "the alarm spool_full with ingest paused");
    CHECK(full["spool"]["backlog_bytes"].get<uint64_t>() >= (12ULL << 20));
    CHECK(full["spool"]["backlog_bytes"].get<uint64_t>() <= (16ULL << 20));
    server().start_again();
    REQUIRE(eventually(
        [&] { return s.q("SELECT count(*) FROM spoolfull.results") == std::to_string(records); },
        120s));
    const auto after = s.sink->wait_committed(60s);
    CHECK(after["broker"]["pauses"].get<int>() >= 1);
    CHECK(after["broker"]["paused"] == false);
    CHECK(s.q("SELECT count(*) FROM spoolfull.current") == std::to_string(records));
}

TEST_CASE("check-config reads a sink config and names each error by its JSON pointer",
          "[integration][sink]") {
    TempDir dir("tidemark-sink-check");
    const std::string good = write_config(
        dir.path(), "sink.json",
        {{"sink",
          {{"source", {{"uri", "tcp://127.0.0.1:1883"}}},
           {"postgres", {{"conninfo", "host=127.0.0.1 dbname=telemetry user=tidemark"}}}}}});
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{"check-config", good},
          std::vector<std::string>{"sink", "check-config", good}}) {
        const auto r = run_tidemark(args);
        INFO(r.out << r.err);
        CHECK(r.exit_code == 0);
        CHECK(r.out.find(": ok (sink tidemark-sink") != std::string::npos);
    }
    const std::string bad = write_config(
        dir.path(), "bad.json",
        {{"sink",
          {{"source", {{"uri", "tcp://127.0.0.1:1883"}, {"topic", "tidemark/#"}}},
           {"postgres", {{"conninfo", "dbname=x password=secret"}, {"schema", "Bad Schema"}}},
           {"batch", {{"max_rows", 0}}}}}});
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{"check-config", bad},
          std::vector<std::string>{"sink", "check-config", bad}}) {
        const auto r = run_tidemark(args);
        INFO(r.out << r.err);
        CHECK(r.exit_code == 1);
        CHECK(r.err.find("/sink/source/topic: unknown key \"topic\"") != std::string::npos);
        CHECK(r.err.find("(did you mean \"topics\"?)") != std::string::npos);
        CHECK(r.err.find("/sink/postgres/conninfo: passwords are not accepted") !=
              std::string::npos);
        CHECK(r.err.find("/sink/postgres/schema:") != std::string::npos);
        CHECK(r.err.find("/sink/batch/max_rows:") != std::string::npos);
    }
    // `tidemark sink` with a config that does not load says why and exits 2.
    const auto run = run_tidemark({"sink", "--config", bad});
    CHECK(run.exit_code == 2);
    CHECK(run.err.find("/sink/batch/max_rows:") != std::string::npos);
}

}  // namespace tidemark::test
