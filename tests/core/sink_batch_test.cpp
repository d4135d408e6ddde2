// A sink batch holds each window once, at its highest rank, whatever the order and repeats of
// what arrived: what one INSERT ... ON CONFLICT needs, and what the table would keep anyway.
#include "core/sink_batch.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <random>
#include <tuple>

using namespace tidemark;

namespace {

core::ReceivedResult result(std::string key, int64_t start, uint32_t revision,
                            core::EmissionKind kind, std::string values = "{\"n\":1}") {
    core::ReceivedResult r;
    r.id = key + "/" + std::to_string(start) + "/" + std::to_string(revision) +
           std::string(core::emission_kind_name(kind));
    r.node = "gw-1";
    r.pipeline = "p";
    r.version = "v1";
    r.key = std::move(key);
    r.window_start_ms = start;
    r.window_end_ms = start + 1000;
    r.revision = revision;
    r.kind = kind;
    r.closed_by = "watermark";
    r.values_json = std::move(values);
    return r;
}

using core::EmissionKind;

core::SinkBatch reduce(const std::vector<core::ReceivedResult>& in) {
    core::SinkBatchBuilder b;
    uint64_t offset = 0;
    for (const auto& r : in)
        b.add(r, "t", "", 0, offset++);
    return b.take();
}

// The consumer of DESIGN.md section 4, one record at a time: what the table converges to.
std::map<std::tuple<std::string, int64_t>, core::ReceivedResult> one_by_one(
    const std::vector<core::ReceivedResult>& in) {
    std::map<std::tuple<std::string, int64_t>, core::ReceivedResult> kept;
    for (const auto& r : in) {
        auto key = std::make_tuple(r.key, r.window_start_ms);
        auto it = kept.find(key);
        if (it == kept.end())
            kept.emplace(key, r);
        else if (core::outranks(r, it->second))
            it->second = r;
    }
    return kept;
}

}  // namespace

TEST_CASE("rank: a higher revision wins, a retract wins a tie, equal ranks replace nothing",
          "[sink]") {
    const auto final0 = result("k", 0, 0, EmissionKind::final_result);
    const auto update1 = result("k", 0, 1, EmissionKind::update);
    const auto retract0 = result("k", 0, 0, EmissionKind::retract);
    const auto retract1 = result("k", 0, 1, EmissionKind::retract);
    CHECK(core::outranks(update1, final0));
    CHECK_FALSE(core::outranks(final0, update1));
    CHECK(core::outranks(retract0, final0));
    CHECK_FALSE(core::outranks(final0, retract0));
    CHECK(core::outranks(update1, retract0));  // retract of 0, then the update of 1
    CHECK(core::outranks(retract1, update1));
    CHECK_FALSE(core::outranks(final0, final0));
    CHECK_FALSE(core::outranks(retract0, retract0));
}

TEST_CASE("a batch keeps each window once, at its highest rank, in window order", "[sink]") {
    const std::vector<core::ReceivedResult> in{
        result("b", 0, 0, EmissionKind::final_result),
        result("a", 0, 0, EmissionKind::final_result),
        result("b", 0, 0, EmissionKind::retract),
        result("b", 0, 1, EmissionKind::update, "{\"n\":2}"),
        result("a", 0, 0, EmissionKind::final_result),  // a duplicate
        result("a", 1000, 0, EmissionKind::final_result),
    };
    const core::SinkBatch batch = reduce(in);
    REQUIRE(batch.results.size() == 3);
    CHECK(batch.records == 6);
    CHECK(batch.results_superseded == 3);
    CHECK(batch.results[0].key == "a");
    CHECK(batch.results[0].window_start_ms == 0);
    CHECK(batch.results[1].key == "a");
    CHECK(batch.results[1].window_start_ms == 1000);
    CHECK(batch.results[2].key == "b");
    CHECK(batch.results[2].revision == 1);
    CHECK(batch.results[2].kind == EmissionKind::update);
}

TEST_CASE("a window's identity is node, pipeline, version, key, start and end", "[sink]") {
    auto base = result("k", 0, 0, EmissionKind::final_result);
    std::vector<core::ReceivedResult> in{base};
    auto other_node = base;
    other_node.node = "gw-2";
    auto other_version = base;
    other_version.version = "v2";
    auto other_pipeline = base;
    other_pipeline.pipeline = "q";
    auto other_end = base;
    other_end.window_end_ms += 1;
    in.insert(in.end(), {other_node, other_version, other_pipeline, other_end});
    CHECK(reduce(in).results.size() == 5);
}

TEST_CASE("the first of equal ranks is kept: a repeat never replaces the record it repeats",
          "[sink]") {
    auto first = result("k", 0, 2, EmissionKind::update, "{\"n\":1}");
    auto again = first;
    again.values_json = "{\"n\":99}";  // the same rank with other bytes: not a real gateway's
    const core::SinkBatch batch = reduce({first, again});
    REQUIRE(batch.results.size() == 1);
    CHECK(batch.results[0].values_json == "{\"n\":1}");
}

TEST_CASE("shuffled and doubled, a batch reduces to what the records one by one leave", "[sink]") {
    std::mt19937 rng(27);
    std::vector<core::ReceivedResult> in;
    for (int key = 0; key < 20; ++key) {
        for (int64_t w = 0; w < 4; ++w) {
            const int revisions = static_cast<int>(rng() % 4);
            in.push_back(
                result("k" + std::to_string(key), w * 1000, 0, EmissionKind::final_result));
            for (int r = 1; r <= revisions; ++r) {
                if (rng() % 2)
                    in.push_back(
                        result("k" + std::to_string(key), w * 1000, r - 1, EmissionKind::retract));
                in.push_back(result("k" + std::to_string(key), w * 1000, r, EmissionKind::update,
                                    "{\"n\":" + std::to_string(r) + "}"));
            }
        }
    }
    const auto expected = one_by_one(in);
    for (int round = 0; round < 20; ++round) {
        std::vector<core::ReceivedResult> doubled = in;
        doubled.insert(doubled.end(), in.begin(), in.end());
        std::shuffle(doubled.begin(), doubled.end(), rng);
        const core::SinkBatch batch = reduce(doubled);
        REQUIRE(batch.results.size() == expected.size());
        CHECK(batch.results_superseded == doubled.size() - expected.size());
        for (const auto& r : batch.results) {
            const auto& want = expected.at(std::make_tuple(r.key, r.window_start_ms));
            CHECK(r.revision == want.revision);
            CHECK(r.kind == want.kind);
        }
    }
}

TEST_CASE("version records, side output and refusals keep their order and their bytes", "[sink]") {
    core::SinkBatchBuilder b;
    core::ReceivedVersion v1;
    v1.pipeline = "p";
    v1.switch_ms = 5;
    b.add(v1, "tidemark/gw/p/version", "{...}", 1, 10);
    b.add(core::VersionRemoved{"tidemark/gw/p/version"}, "tidemark/gw/p/version", "", 2, 20);
    b.add(core::Refusal{"not JSON"}, "tidemark/gw/p", "garbage", 3, 30);
    b.add(core::ReceivedSide{"gw", "p", "{\"reason\":\"too late\"}"}, "t", "", 4, 40);
    const core::SinkBatch batch = b.take();
    CHECK(batch.records == 4);
    REQUIRE(batch.version_changes.size() == 2);
    CHECK(std::holds_alternative<core::ReceivedVersion>(batch.version_changes[0]));
    CHECK(std::holds_alternative<core::VersionRemoved>(batch.version_changes[1]));
    REQUIRE(batch.rejected.size() == 1);
    CHECK(batch.rejected[0].topic == "tidemark/gw/p");
    CHECK(batch.rejected[0].payload == "garbage");
    CHECK(batch.rejected[0].reason == "not JSON");
    CHECK(batch.rejected[0].receive_ms == 3);
    CHECK(batch.rejected[0].spool_offset == 30);
    CHECK(batch.side.size() == 1);
    CHECK(b.records() == 0);  // take() empties the builder
}

TEST_CASE("health keeps the newest record per node, the first of equal times", "[sink][health]") {
    core::SinkBatchBuilder b;
    auto health = [&](std::string node, int64_t time_ms, std::string json) {
        b.add(core::ReceivedHealth{"tidemark/" + node + "/health", node, time_ms, std::move(json)},
              "t", "", 0, 0);
    };
    health("gw-b", 20, "b20");
    health("gw-a", 30, "a30");
    health("gw-a", 10, "a10");  // older, arrived later: a redelivery
    health("gw-b", 20, "b20-again");
    health("gw-a", 40, "a40");
    const core::SinkBatch batch = b.take();
    REQUIRE(batch.health.size() == 2);
    CHECK(batch.health[0].node == "gw-a");
    CHECK(batch.health[0].record_json == "a40");
    CHECK(batch.health[1].node == "gw-b");
    CHECK(batch.health[1].record_json == "b20");
    CHECK(batch.health_superseded == 3);
    CHECK(batch.results.empty());
}

TEST_CASE("a pipeline's view name is an identifier, or there is none", "[sink]") {
    CHECK(core::pipeline_view_name("room_temp_1m") == "current_room_temp_1m");
    CHECK(core::pipeline_view_name("Room-Temp.1m") == "current_room_temp_1m");
    CHECK(core::pipeline_view_name("1m") == "current_1m");
    CHECK_FALSE(core::pipeline_view_name(""));
    CHECK_FALSE(core::pipeline_view_name("a b"));
    CHECK_FALSE(core::pipeline_view_name("x\"; DROP TABLE results; --"));
    CHECK_FALSE(core::pipeline_view_name("t\xc3\xa9"));
    CHECK(core::pipeline_view_name(std::string(55, 'a')).value().size() == 63);
    CHECK_FALSE(core::pipeline_view_name(std::string(56, 'a')));
    CHECK(core::aggregate_column_problem("avg").empty());
    CHECK(core::aggregate_column_problem("P 95 \"quoted\"").empty());
    CHECK_FALSE(core::aggregate_column_problem("key").empty());
    CHECK_FALSE(core::aggregate_column_problem("window_start").empty());
    CHECK_FALSE(core::aggregate_column_problem(std::string(64, 'n')).empty());
}

TEST_CASE("a batch keeps each too-late tally once, at its highest count, in tally order") {
    const auto tally = [](int64_t start, int64_t since, int64_t count) {
        core::ReceivedLate l;
        l.node = "gw-1";
        l.pipeline = "p";
        l.version = "v1";
        l.window_start_ms = start;
        l.window_end_ms = start + 1000;
        l.since_ms = since;
        l.too_late = count;
        l.id = std::to_string(start) + "/" + std::to_string(since) + "/" + std::to_string(count);
        return l;
    };
    core::SinkBatchBuilder b;
    uint64_t offset = 0;
    for (const auto& l : {tally(2000, 5, 3), tally(0, 5, 2), tally(2000, 5, 7), tally(2000, 5, 7),
                          tally(0, 9, 1), tally(2000, 5, 4)})
        b.add(l, "t/late", "", 0, offset++);
    const core::SinkBatch batch = b.take();
    CHECK(batch.records == 6);
    CHECK(batch.results.empty());
    std::vector<std::string> ids;
    for (const auto& l : batch.late)
        ids.push_back(l.id);
    CHECK(ids == std::vector<std::string>{"0/5/2", "0/9/1", "2000/5/7"});
}
