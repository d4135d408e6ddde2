// The soak's checker must see what it exists to see: a soak that reports 0 / 0 / 0 is worth
// something only if a missing window, a wrong value and a reused identity are each counted.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "tests/soak/checker.h"

namespace tidemark::soak {
namespace {

const std::vector<PipelineSpec> one_pipeline{{"p", 10, 0, KeyBy::device}};

std::string result(const std::string& id, const std::string& key, int64_t start,
                   const std::string& kind, int64_t revision, int64_t n, int64_t s, int64_t lo,
                   int64_t hi) {
    return "{\"id\":\"" + id + "\",\"node\":\"soak\",\"pipeline\":\"p\",\"key\":\"" + key +
           "\",\"window\":{\"start\":" + std::to_string(start) +
           ",\"end\":" + std::to_string(start + 10) + "},\"kind\":\"" + kind +
           "\",\"revision\":" + std::to_string(revision) +
           ",\"closed_by\":\"watermark\",\"values\":{\"n\":" + std::to_string(n) +
           ",\"s\":" + std::to_string(s) + ",\"lo\":" + std::to_string(lo) +
           ",\"hi\":" + std::to_string(hi) + "},\"watermark\":0}";
}

// Three events: two in dev-a's window [0,10), one in dev-b's window [10,20).
const std::vector<PublishedEvent> events{
    {"dev-a", "z0", 3, 5}, {"dev-a", "z1", 9, -2}, {"dev-b", "z0", 12, 7}};

UpstreamMessage on_topic(std::string payload) {
    return UpstreamMessage{"tidemark/soak/p", std::move(payload)};
}

}  // namespace

TEST_CASE("tumbling starts floor towards minus infinity", "[soak]") {
    CHECK(tumbling_start_ms(9, 10, 0) == 0);
    CHECK(tumbling_start_ms(10, 10, 0) == 10);
    CHECK(tumbling_start_ms(-1, 10, 0) == -10);
    CHECK(tumbling_start_ms(0, 10, 3) == -7);
}

TEST_CASE("the highest revision equal to the published events passes", "[soak]") {
    const std::vector<UpstreamMessage> upstream{
        on_topic(result("a0", "dev-a", 0, "final", 0, 1, 5, 5, 5)),
        on_topic(result("a1", "dev-a", 0, "update", 1, 2, 3, -2, 5)),
        on_topic(result("a1", "dev-a", 0, "update", 1, 2, 3, -2, 5)),  // resent: deduped
        on_topic(result("b0", "dev-b", 10, "final", 0, 1, 7, 7, 7)),
    };
    const Verdict v = check(one_pipeline, events, {}, upstream);
    CHECK(v.lost == 0);
    CHECK(v.wrong == 0);
    CHECK(v.duplicates_different_id == 0);
    CHECK(v.windows_expected == 2);
    CHECK(v.results_unique == 3);
}

TEST_CASE("a missing window, a lower count or a kept retract is lost", "[soak]") {
    SECTION("missing") {
        const Verdict v = check(one_pipeline, events, {},
                                {on_topic(result("a0", "dev-a", 0, "final", 0, 2, 3, -2, 5))});
        CHECK(v.lost == 1);
    }
    SECTION("lower count: an older revision is all that arrived") {
        const Verdict v = check(one_pipeline, events, {},
                                {on_topic(result("a0", "dev-a", 0, "final", 0, 1, 5, 5, 5)),
                                 on_topic(result("b0", "dev-b", 10, "final", 0, 1, 7, 7, 7))});
        CHECK(v.lost == 1);
        CHECK(v.wrong == 0);
    }
    SECTION("a retract wins a tie and leaves no value") {
        const Verdict v = check(one_pipeline, events, {},
                                {on_topic(result("a1", "dev-a", 0, "final", 0, 2, 3, -2, 5)),
                                 on_topic(result("ar", "dev-a", 0, "retract", 0, 2, 3, -2, 5)),
                                 on_topic(result("b0", "dev-b", 10, "final", 0, 1, 7, 7, 7))});
        CHECK(v.lost == 1);
    }
}

TEST_CASE("a different value, or a window nobody published into, is wrong", "[soak]") {
    SECTION("sum") {
        const Verdict v = check(one_pipeline, events, {},
                                {on_topic(result("a0", "dev-a", 0, "final", 0, 2, 4, -2, 5)),
                                 on_topic(result("b0", "dev-b", 10, "final", 0, 1, 7, 7, 7))});
        CHECK(v.wrong == 1);
        CHECK(v.lost == 0);
    }
    SECTION("count too high: an event counted twice") {
        const Verdict v = check(one_pipeline, events, {},
                                {on_topic(result("a0", "dev-a", 0, "final", 0, 3, 3, -2, 5)),
                                 on_topic(result("b0", "dev-b", 10, "final", 0, 1, 7, 7, 7))});
        CHECK(v.wrong == 1);
    }
    SECTION("a window of its own") {
        const Verdict v = check(one_pipeline, events, {},
                                {on_topic(result("a0", "dev-a", 0, "final", 0, 2, 3, -2, 5)),
                                 on_topic(result("b0", "dev-b", 10, "final", 0, 1, 7, 7, 7)),
                                 on_topic(result("c0", "dev-c", 0, "final", 0, 1, 1, 1, 1))});
        CHECK(v.wrong == 1);
    }
    SECTION("an unacknowledged publish leaves its window out") {
        const Verdict v = check(one_pipeline, events, {{"dev-b", "z0", 15, 1}},
                                {on_topic(result("a0", "dev-a", 0, "final", 0, 2, 3, -2, 5)),
                                 on_topic(result("b0", "dev-b", 10, "final", 0, 2, 8, 1, 7))});
        CHECK(v.wrong == 0);
        CHECK(v.lost == 0);
        CHECK(v.windows_uncertain == 1);
    }
}

TEST_CASE("one identity under two ids, or one id with two payloads, is a duplicate", "[soak]") {
    SECTION("two ids") {
        const Verdict v = check(one_pipeline, events, {},
                                {on_topic(result("a0", "dev-a", 0, "final", 0, 2, 3, -2, 5)),
                                 on_topic(result("a9", "dev-a", 0, "final", 0, 2, 3, -2, 5)),
                                 on_topic(result("b0", "dev-b", 10, "final", 0, 1, 7, 7, 7))});
        CHECK(v.duplicates_different_id == 1);
    }
    SECTION("two payloads") {
        const Verdict v = check(one_pipeline, events, {},
                                {on_topic(result("a0", "dev-a", 0, "final", 0, 2, 3, -2, 5)),
                                 on_topic(result("a0", "dev-a", 0, "final", 0, 2, 3, -2, 6)),
                                 on_topic(result("b0", "dev-b", 10, "final", 0, 1, 7, 7, 7))});
        CHECK(v.duplicates_different_id == 1);
    }
    SECTION("a final and its retract share a revision, not a kind") {
        const Verdict v = check(one_pipeline, events, {},
                                {on_topic(result("a0", "dev-a", 0, "final", 0, 1, 5, 5, 5)),
                                 on_topic(result("ar", "dev-a", 0, "retract", 0, 1, 5, 5, 5)),
                                 on_topic(result("a1", "dev-a", 0, "update", 1, 2, 3, -2, 5)),
                                 on_topic(result("b0", "dev-b", 10, "final", 0, 1, 7, 7, 7))});
        CHECK(v.duplicates_different_id == 0);
        CHECK(v.lost == 0);
        CHECK(v.wrong == 0);
    }
}

TEST_CASE("side output is counted apart, not as results", "[soak]") {
    const Verdict v = check(one_pipeline, events, {},
                            {on_topic(result("a0", "dev-a", 0, "final", 0, 2, 3, -2, 5)),
                             on_topic(result("b0", "dev-b", 10, "final", 0, 1, 7, 7, 7)),
                             UpstreamMessage{"tidemark/soak/p/side", "{\"reason\":\"too_late\"}"},
                             UpstreamMessage{"tidemark/soak/p/version", "{\"version\":\"x\"}"}});
    CHECK(v.side_records == 1);
    CHECK(v.unparsable == 0);
    CHECK(v.lost == 0);
}

}  // namespace tidemark::soak
