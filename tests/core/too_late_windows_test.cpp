// The windows with the most too-late events (PipelineStats::too_late_top), which health and
// `tidemark inspect` list: their order, their bound, their counts, what the bounded table lets
// go when it is full, and that a restart changes none of it.
#include <catch2/catch.hpp>
#include <vector>

#include "tests/core/engine_harness.h"

using namespace tidemark;
using namespace tidemark::test;
using core::TooLateWindow;
using core::WindowType;

namespace {
constexpr int64_t minute = 60'000;
// The watermark sits here (delay 0) after the first event: every window before it is too late.
constexpr int64_t now_ms = 100'000 * minute;

// One-minute tumbling windows without allowed lateness, all events of one key (one partition):
// an event in minute m is too late for [m, m + 1) once the first event set the watermark.
class LateFeeder {
  public:
    LateFeeder() : driver(make_spec(WindowType::tumbling, minute)) {
        driver.feed({now_ms, "a", now_ms, 1});
    }
    // `n` too-late events in the window starting at minute `m`.
    void late(int64_t m, int n) {
        for (int i = 0; i < n; ++i)
            driver.feed({now_ms + ++ingest_step_, "a", m * minute + i, 1});
    }
    std::vector<TooLateWindow> top() const {
        const auto& s = driver.stats();
        return {s.too_late_top.begin(), s.too_late_top.begin() + s.too_late_top_size};
    }
    Driver driver;

  private:
    int64_t ingest_step_ = 0;
};

TooLateWindow window(int64_t m, uint64_t n) {
    return {m * minute, (m + 1) * minute, n};
}
}  // namespace

TEST_CASE("too-late windows are listed most first, then earliest first, at most five") {
    LateFeeder f;
    f.late(3, 5);
    f.late(1, 3);
    f.late(7, 3);
    f.late(2, 1);
    f.late(5, 4);
    f.late(9, 2);
    f.late(4, 3);
    // Window 2 passes window 9 with two more (ranks move as counts grow).
    f.late(2, 2);
    const auto& s = f.driver.stats();
    CHECK(s.too_late == 23);
    CHECK(core::too_late_windows_shown == 5);
    CHECK(f.top() == std::vector<TooLateWindow>{window(3, 5), window(5, 4), window(1, 3),
                                                window(2, 3), window(4, 3)});
    CHECK(s.too_late_windows_tracked == 7);
    CHECK(s.too_late_windows_dropped == 0);
}

TEST_CASE("too-late windows: fewer than five are all listed, none before any event") {
    LateFeeder f;
    CHECK(f.driver.stats().too_late_top_size == 0);
    f.late(8, 1);
    f.late(6, 1);
    CHECK(f.top() == std::vector<TooLateWindow>{window(6, 1), window(8, 1)});
}

TEST_CASE("a full too-late table never lets a window with many go for one with a single event") {
    LateFeeder f;
    // 256 windows (the table's bound), each with two too-late events; window 500 with many.
    f.late(500, 50);
    for (int64_t m = 1; m <= 255; ++m)
        f.late(m, 2);
    REQUIRE(f.driver.stats().too_late_windows_tracked == 256);
    // A new window has one event: every window kept has more, so it is not taken, and counted.
    f.late(1000, 1);
    CHECK(f.driver.stats().too_late_windows_tracked == 256);
    CHECK(f.driver.stats().too_late_windows_dropped == 1);
    CHECK(f.top() == std::vector<TooLateWindow>{window(500, 50), window(1, 2), window(2, 2),
                                                window(3, 2), window(4, 2)});
    // Windows with one event each: a new one takes the place of the earliest of them.
    f.late(600, 1);  // not taken either: still every window has two or more
    f.late(1, 1);    // window 1 now has 3, ahead of the other twos
    CHECK(f.driver.stats().too_late_windows_dropped == 2);
    CHECK(f.top() == std::vector<TooLateWindow>{window(500, 50), window(1, 3), window(2, 2),
                                                window(3, 2), window(4, 2)});
    const uint64_t too_late = f.driver.stats().too_late;
    CHECK(too_late == 50 + 255 * 2 + 1 + 1 + 1);
}

TEST_CASE("a full too-late table lets the earliest of its single-event windows go") {
    LateFeeder f;
    for (int64_t m = 1; m <= 254; ++m)
        f.late(m, 3);
    f.late(700, 1);
    f.late(800, 1);  // the table is full: 254 threes, windows 700 and 800 with one each
    f.late(900, 1);  // takes window 700's place (the earliest single)
    CHECK(f.driver.stats().too_late_windows_tracked == 256);
    CHECK(f.driver.stats().too_late_windows_dropped == 1);
    f.late(700, 1);  // back, and the earliest single itself: not taken
    CHECK(f.driver.stats().too_late_windows_dropped == 2);
    f.late(950, 1);  // takes window 800's place
    CHECK(f.driver.stats().too_late_windows_dropped == 3);
    f.late(950, 3);  // four: first
    f.late(900, 2);  // three: level with windows 1..254, after them (it is later)
    CHECK(f.top() == std::vector<TooLateWindow>{window(950, 4), window(1, 3), window(2, 3),
                                                window(3, 3), window(4, 3)});
    CHECK(f.driver.stats().too_late_windows_tracked == 256);
    CHECK(f.driver.stats().too_late_windows_dropped == 3);
}

TEST_CASE("the too-late windows survive a checkpoint and restore unchanged") {
    const auto spec = make_spec(WindowType::tumbling, minute);
    LateFeeder whole;
    LateFeeder cut;
    for (LateFeeder* f : {&whole, &cut}) {
        f->late(4, 2);
        f->late(2, 6);
        f->late(9, 2);
        f->late(1, 1);
    }
    MapWriter store;
    cut.driver.engine->checkpoint(store);
    Driver restored(spec);
    for (const auto& [k, v] : store.data)
        REQUIRE(restored.engine->restore_entry(k, v));
    REQUIRE(restored.engine->restore_finish());
    restored.order = cut.driver.order;
    const auto top_of = [](const core::PipelineStats& s) {
        return std::vector<TooLateWindow>{s.too_late_top.begin(),
                                          s.too_late_top.begin() + s.too_late_top_size};
    };
    CHECK(top_of(restored.stats()) == whole.top());
    CHECK(top_of(restored.stats()) ==
          std::vector<TooLateWindow>{window(2, 6), window(4, 2), window(9, 2), window(1, 1)});
    // More too-late events after the restart land on the restored counts.
    whole.late(9, 5);
    int64_t step = 1'000'000;
    for (int i = 0; i < 5; ++i)
        restored.feed({now_ms + ++step, "a", 9 * minute + i, 1});
    CHECK(top_of(restored.stats()) == whole.top());
    CHECK(whole.top().front() == window(9, 7));
    CHECK(restored.stats().too_late == whole.driver.stats().too_late);
}
