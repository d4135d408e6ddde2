// late.report: every window's too-late tally reaches the consumer as a LateReport, cumulative,
// at most once per window per report interval of ingest time, the same in a run cut by a
// restart at any record as in the uncut run, within a bounded table whose overflow is counted.
#include <catch2/catch.hpp>
#include <tuple>
#include <vector>

#include "tests/core/engine_harness.h"

using namespace tidemark;
using namespace tidemark::test;
using core::WindowType;

namespace {
constexpr int64_t minute = 60'000;
constexpr int64_t every_ms = 10'000;
// The watermark sits here (delay 0) after the first event: every window before it is too late.
constexpr int64_t now_ms = 100'000 * minute;

core::PipelineSpec report_spec(WindowType type = WindowType::tumbling, int64_t advance_ms = 0) {
    auto spec = make_spec(type, minute, advance_ms);
    spec.version = "v1";
    spec.late.report = true;
    spec.late.report_every_ms = every_ms;
    return spec;
}

// (window start, end, since, count, as_of): what a consumer reads of a report.
using Seen = std::tuple<int64_t, int64_t, int64_t, uint64_t, int64_t>;
std::vector<Seen> seen(const std::vector<core::LateReport>& reports) {
    std::vector<Seen> out;
    for (const auto& r : reports)
        out.emplace_back(r.start_ms, r.end_ms, r.since_ms, r.too_late, r.as_of_ms);
    return out;
}

// A too-late event in the window starting at minute m, read at ingest time `ingest`.
Input late_at(int64_t ingest, int64_t m) {
    return {ingest, "a", m * minute + 7, 1};
}
}  // namespace

TEST_CASE(
    "a window's too-late tally is reported once per interval, cumulative, only when it grew") {
    Driver d(report_spec());
    d.feed({now_ms, "a", now_ms, 1});  // sets the watermark
    // Interval [now, now + 10 s): three too-late events in minute 5, one in minute 2.
    d.feed(late_at(now_ms + 1'000, 5));
    d.feed(late_at(now_ms + 2'000, 5));
    d.feed(late_at(now_ms + 3'000, 2));
    d.feed(late_at(now_ms + 9'999, 5));
    CHECK(d.rec.late.empty());  // nothing before the interval ends
    d.tick(now_ms + 10'000);
    CHECK(seen(d.rec.late) ==
          std::vector<Seen>{{2 * minute, 3 * minute, now_ms + 3'000, 1, now_ms + 10'000},
                            {5 * minute, 6 * minute, now_ms + 1'000, 3, now_ms + 10'000}});
    // A quiet interval: nothing. Then minute 5 grows again: its cumulative count, alone.
    d.tick(now_ms + 25'000);
    CHECK(d.rec.late.size() == 2);
    d.feed(late_at(now_ms + 26'000, 5));
    d.feed(late_at(now_ms + 27'000, 5));
    d.tick(now_ms + 29'999);
    CHECK(d.rec.late.size() == 2);
    d.feed(late_at(now_ms + 31'000, 5));  // this record crosses the boundary at 30 s first
    REQUIRE(d.rec.late.size() == 3);
    CHECK(seen({d.rec.late[2]}) ==
          std::vector<Seen>{{5 * minute, 6 * minute, now_ms + 1'000, 5, now_ms + 31'000}});
    d.tick(now_ms + 40'000);
    REQUIRE(d.rec.late.size() == 4);
    CHECK(d.rec.late[3].too_late == 6);
    // Ids: one per tally state, distinct, and the function of the fields.
    CHECK(d.rec.late[2].id != d.rec.late[3].id);
    CHECK(d.rec.late[3].id == core::late_report_id(core::emission_id_seed("gw", "p", "v1"),
                                                   5 * minute, 6 * minute, now_ms + 1'000, 6));
    const auto& s = d.stats();
    CHECK(s.too_late == 7);
    CHECK(s.late_reports == 4);
    CHECK(s.late_tallies == 2);
    CHECK(s.too_late_unreported == 0);
    // No result record carries a report: the results are what they were.
    for (const auto& o : d.rec.out)
        CHECK(o.e.start_ms >= now_ms - minute);
}

TEST_CASE("without late.report no tally is kept or reported") {
    auto spec = report_spec();
    spec.late.report = false;
    Driver d(spec);
    d.feed({now_ms, "a", now_ms, 1});
    d.feed(late_at(now_ms + 1'000, 5));
    d.tick(now_ms + 60'000);
    CHECK(d.rec.late.empty());
    CHECK(d.stats().too_late == 1);
    CHECK(d.stats().late_tallies == 0);
}

TEST_CASE("hopping: a window an event was too late for is tallied, the others updated") {
    // 2-minute windows every minute, no lateness: at watermark `now`, an event in minute m
    // is too late for both its windows unless the later one is still open.
    auto spec = report_spec(WindowType::hopping, minute);
    spec.window.size_ms = 2 * minute;
    spec.late.allowed_lateness_ms = minute;
    Driver h(spec);
    h.feed({now_ms, "a", now_ms, 1});
    // Minute (now - 2m): windows [now-3m, now-m) (past lateness) and [now-2m, now) (inside).
    const int64_t m = now_ms / minute - 2;
    h.feed({now_ms + 1'000, "a", m * minute + 5, 1});
    h.tick(now_ms + 10'000);
    CHECK(seen(h.rec.late) == std::vector<Seen>{{(m - 1) * minute, (m + 1) * minute, now_ms + 1'000,
                                                 1, now_ms + 10'000}});
    CHECK(h.stats().too_late_partial == 1);
}

TEST_CASE("reports are the same when the run is cut by a restart at any record") {
    const auto spec = report_spec();
    std::vector<Input> inputs{{now_ms, "a", now_ms, 1}};
    int64_t ingest = now_ms;
    for (int i = 0; i < 40; ++i) {
        ingest += 1'700 + (i % 3) * 900;
        inputs.push_back(late_at(ingest, 1 + (i * 7) % 5));
        if (i % 6 == 0) inputs.push_back({ingest, "b", now_ms + i, 2});  // on time
    }
    Driver whole(spec);
    whole.feed_all(inputs);
    whole.tick(ingest + 20'000);
    REQUIRE(whole.rec.late.size() > 10);
    for (size_t cut = 1; cut < inputs.size(); ++cut) {
        Driver first(spec);
        for (size_t i = 0; i < cut; ++i)
            first.feed(inputs[i]);
        MapWriter store;
        first.engine->checkpoint(store);
        Driver restored(spec);
        for (const auto& [k, v] : store.data)
            REQUIRE(restored.engine->restore_entry(k, v));
        REQUIRE(restored.engine->restore_finish());
        restored.order = first.order;
        for (size_t i = cut; i < inputs.size(); ++i)
            restored.feed(inputs[i]);
        restored.tick(ingest + 20'000);
        std::vector<core::LateReport> both = first.rec.late;
        both.insert(both.end(), restored.rec.late.begin(), restored.rec.late.end());
        INFO("cut before record " << cut);
        REQUIRE(seen(both) == seen(whole.rec.late));
        for (size_t i = 0; i < both.size(); ++i)
            CHECK(both[i].id == whole.rec.late[i].id);
        CHECK(restored.stats().late_reports == whole.stats().late_reports);
    }
}

TEST_CASE("a checkpoint that did not commit writes the tallies again") {
    Driver d(report_spec());
    d.feed({now_ms, "a", now_ms, 1});
    MapWriter store;
    d.engine->checkpoint(store);
    d.feed(late_at(now_ms + 1'000, 5));
    MapWriter lost;
    d.engine->checkpoint(lost);  // holds the tally; its transaction fails
    d.engine->checkpoint_failed();
    d.engine->checkpoint(store);
    Driver restored(report_spec());
    for (const auto& [k, v] : store.data)
        REQUIRE(restored.engine->restore_entry(k, v));
    REQUIRE(restored.engine->restore_finish());
    restored.tick(now_ms + 10'000);
    CHECK(seen(restored.rec.late) ==
          std::vector<Seen>{{5 * minute, 6 * minute, now_ms + 1'000, 1, now_ms + 10'000}});
}

TEST_CASE(
    "a full tally table lets the quietest reported window go, and counts what it cannot hold") {
    Driver d(report_spec());
    d.feed({now_ms, "a", now_ms, 1});
    int64_t ingest = now_ms;
    // 256 windows (the bound) with one too-late event each, in one interval: all pending.
    for (int64_t m = 1; m <= 256; ++m)
        d.feed(late_at(++ingest, m));
    CHECK(d.stats().late_tallies == 256);
    // A 257th window in the same interval: no tally is reported yet, so none can go.
    d.feed(late_at(++ingest, 1000));
    CHECK(d.stats().too_late_unreported == 1);
    CHECK(d.stats().late_tallies == 256);
    d.tick(now_ms + 10'000);
    CHECK(d.rec.late.size() == 256);
    // Window 5 gets another event (it is no longer the quietest); window 1000 comes back:
    // it takes the place of window 1 (the quietest reported), with its own since.
    d.feed(late_at(now_ms + 11'000, 5));
    d.feed(late_at(now_ms + 12'000, 1000));
    CHECK(d.stats().late_tallies == 256);
    // Window 1 again: a new tally (window 2's place), since 13 s, which the consumer adds to
    // the one it holds.
    d.feed(late_at(now_ms + 13'000, 1));
    d.tick(now_ms + 20'000);
    CHECK(seen({d.rec.late.begin() + 256, d.rec.late.end()}) ==
          std::vector<Seen>{{1 * minute, 2 * minute, now_ms + 13'000, 1, now_ms + 20'000},
                            {5 * minute, 6 * minute, now_ms + 5, 2, now_ms + 20'000},
                            {1000 * minute, 1001 * minute, now_ms + 12'000, 1, now_ms + 20'000}});
    CHECK(d.rec.late.front().start_ms == 1 * minute);
    CHECK(d.rec.late.front().since_ms == now_ms + 1);
    CHECK(d.stats().too_late_unreported == 1);
}
