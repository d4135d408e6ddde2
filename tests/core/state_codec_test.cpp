// The stored form of window state: the compact encoding (store format 5) and the upgrade of a
// store written in the fixed one (format 4 and before).
#include <catch2/catch.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/bytes.h"
#include "engine_harness.h"
#include "legacy_state_format4.h"

using namespace tidemark;
using namespace tidemark::test;

namespace {

// The scenes legacy_state_format4.h was written from: retract mode, so that fired windows keep
// the values a retract cancels (tumbling: in the key's meta record; sessions: in the window's).
core::PipelineSpec tumbling_spec() {
    auto s = make_spec(core::WindowType::tumbling, 60'000);
    s.name = "t";
    s.late.allowed_lateness_ms = 120'000;
    s.late.corrections = core::Corrections::retract;
    return s;
}
core::PipelineSpec session_spec() {
    auto s = make_spec(core::WindowType::session, 10'000, 100'000);
    s.name = "s";
    s.late.allowed_lateness_ms = 120'000;
    s.late.corrections = core::Corrections::retract;
    return s;
}
std::vector<Input> part_a() {
    return {{1000, "a", 1000, 1.5},     {2000, "b", 2000, 2.25}, {61000, "a", 61000, 3},
            {62000, "a", 30000, 4.125}, {70000, "b", 65000, -7}, {121000, "a", 121000, 0.1},
            {125000, "b", 50000, 8}};
}
// Late updates of windows that fired before the checkpoint, new windows, and the end.
std::vector<Input> part_b() {
    return {{129000, "b", 2000, 9},  // joins a fired session without moving it: retract + update
            {130000, "a", 35000, 5},  {131000, "b", 2500, 1},      {132000, "b", 55000, 0.5},
            {140000, "a", 140000, 2}, {150000, "c", 150000, 3.75}, {151000, "a", 125000, 6}};
}

using Records = std::vector<std::pair<std::string, std::string>>;

std::string run_from(const core::PipelineSpec& spec, const Records& records) {
    Driver d(spec);
    for (const auto& [k, v] : records)
        REQUIRE(d.engine->restore_entry(k, v));
    auto finished = d.engine->restore_finish();
    if (!finished) FAIL(finished.error().message);
    d.feed_all(part_b());
    d.finish();
    return d.rec.text();
}

bool is_window(std::string_view key, char type) {
    // prefix (0x01, length-prefixed name), 'K', length-prefixed key, type, 8-byte start
    std::string_view rest = key.substr(1);
    std::string_view name, k;
    if (!core::bytes::get_str(rest, name) || rest.empty() || rest[0] != 'K') return false;
    rest.remove_prefix(1);
    return core::bytes::get_str(rest, k) && rest.size() == 9 && rest[0] == type;
}

// A key's meta record: prefix, 'K', length-prefixed key, 'm'.
bool is_key_meta(std::string_view key) {
    std::string_view rest = key.substr(1);
    std::string_view name, k;
    if (!core::bytes::get_str(rest, name) || rest.empty() || rest[0] != 'K') return false;
    rest.remove_prefix(1);
    return core::bytes::get_str(rest, k) && rest == "m";
}

std::string stored_partition(std::string_view meta) {
    std::string_view part;
    REQUIRE(core::bytes::get_str(meta, part));
    return std::string(part);
}

// A key meta record written again: partition, fired_through, the fired windows (start, end,
// revision, values), as the engine's format 5 writes it.
struct FiredWindow {
    int64_t start, end;
    uint32_t revision;
    std::vector<std::optional<double>> values;
};
std::string key_meta(std::string_view partition, int64_t fired_through,
                     const std::vector<FiredWindow>& fired) {
    std::string v;
    core::bytes::put_str(v, partition);
    core::bytes::put_i64(v, fired_through);
    core::bytes::put_u32(v, static_cast<uint32_t>(fired.size()));
    for (const auto& f : fired) {
        core::bytes::put_i64(v, f.start);
        core::bytes::put_i64(v, f.end);
        core::bytes::put_u32(v, f.revision);
        core::bytes::put_u32(v, static_cast<uint32_t>(f.values.size()));
        for (const auto& x : f.values) {
            v.push_back(x ? 1 : 0);
            core::bytes::put_f64(v, x ? *x : 0.0);
        }
    }
    return v;
}

size_t window_bytes(const Records& records, char type) {
    size_t n = 0;
    for (const auto& [k, v] : records)
        if (is_window(k, type)) n += v.size();
    return n;
}

}  // namespace

TEST_CASE("a format 4 store's windows are restored, then rewritten compactly", "[engine]") {
    const auto spec = GENERATE(tumbling_spec(), session_spec());
    const Records& legacy = spec.name == "t" ? legacy_tumbling_records : legacy_session_records;
    INFO(spec.name);

    // The uncut run, cut after part_a: what the restored runs must emit.
    Driver uncut(spec);
    uncut.feed_all(part_a());
    const std::string before = uncut.rec.text();
    uncut.feed_all(part_b());
    uncut.finish();
    const std::string expected = uncut.rec.text().substr(before.size());
    REQUIRE(expected.find("retract") != std::string::npos);  // the stored values are used

    CHECK(run_from(spec, legacy) == expected);

    // The first checkpoint after the restore replaces every old record with a compact one.
    Driver restored(spec);
    MapWriter store;
    for (const auto& [k, v] : legacy) {
        REQUIRE(restored.engine->restore_entry(k, v));
        store.data[k] = v;
    }
    REQUIRE(restored.engine->restore_finish());
    restored.engine->checkpoint(store);
    const Records upgraded(store.data.begin(), store.data.end());
    CHECK(window_bytes(upgraded, 'u') == 0);
    size_t old_windows = 0, new_windows = 0;
    for (const auto& [k, v] : legacy)
        old_windows += is_window(k, 'u');
    for (const auto& [k, v] : upgraded)
        new_windows += is_window(k, 'w');
    CHECK(new_windows == old_windows);
    // Less than half the bytes: the fixed encoding took 65 bytes (sessions: 100 and more) for
    // what the compact one writes in about 20.
    CHECK(2 * window_bytes(upgraded, 'w') < window_bytes(legacy, 'u'));
    CHECK(run_from(spec, upgraded) == expected);
}

TEST_CASE("a window stored in both encodings is refused as damage", "[engine]") {
    const auto spec = tumbling_spec();
    Driver fresh(spec);
    fresh.feed_all(part_a());
    MapWriter store;
    fresh.engine->checkpoint(store);
    for (const auto& [k, v] : legacy_tumbling_records)
        if (is_window(k, 'u')) store.data[k] = v;
    Driver d(spec);
    bool refused = false;
    for (const auto& [k, v] : store.data)
        refused |= !d.engine->restore_entry(k, v);
    CHECK(refused);
}

TEST_CASE("compact doubles round-trip every bit in as few bytes as the value allows", "[engine]") {
    const double values[] = {0.0,
                             31.0,
                             32.0,
                             -32.0,
                             4095.0,
                             0x1p53 - 1,
                             -0x1p53 + 1,
                             -0.0,
                             1.0,
                             -1.0,
                             60.0,
                             21.5,
                             21.37,
                             1e300,
                             -1e-300,
                             0x1p52,
                             -0x1p53,
                             0x1p53,
                             std::numeric_limits<double>::infinity(),
                             -std::numeric_limits<double>::infinity(),
                             std::numeric_limits<double>::quiet_NaN(),
                             std::numeric_limits<double>::denorm_min()};
    for (double v : values) {
        std::string out;
        core::bytes::put_f64_compact(out, v);
        std::string_view in(out);
        double back = 0;
        REQUIRE(core::bytes::get_f64_compact(in, back));
        CHECK(in.empty());
        CHECK(std::bit_cast<uint64_t>(back) == std::bit_cast<uint64_t>(v));
    }
    const auto size_of = [](double v) {
        std::string out;
        core::bytes::put_f64_compact(out, v);
        return out.size();
    };
    CHECK(size_of(31.0) == 1);
    CHECK(size_of(60.0) == 2);
    CHECK(size_of(-60.0) == 2);
    CHECK(size_of(21.5) == 5);
    CHECK(size_of(21.37) == 9);
    std::string_view truncated("\x02\x00\x00", 3);
    double v;
    CHECK_FALSE(core::bytes::get_f64_compact(truncated, v));
}

namespace {

// A store checkpointed after part_a, whose one key's meta record is replaced before a restore.
class MetaReplaced {
  public:
    explicit MetaReplaced(core::PipelineSpec spec) : spec_(std::move(spec)) {
        Driver fresh(spec_);
        fresh.feed_all(part_a());
        fresh.engine->checkpoint(store_);
        for (const auto& [k, v] : store_.data)
            if (is_key_meta(k)) meta_key_ = k, partition = stored_partition(v);
        REQUIRE(!meta_key_.empty());
    }
    std::string partition;  // of the replaced key
    // Whether the store restores with `meta` as the key's record; the refusal names the cause.
    bool restores(const std::string& meta) const {
        auto data = store_.data;
        data[meta_key_] = meta;
        Driver d(spec_);
        for (const auto& [k, v] : data)
            if (!d.engine->restore_entry(k, v)) return false;
        auto finished = d.engine->restore_finish();
        if (!finished) CHECK(finished.error().message.find("fired windows") != std::string::npos);
        return finished.has_value();
    }

  private:
    core::PipelineSpec spec_;
    MapWriter store_;
    std::string meta_key_;
};

}  // namespace

// Found by fuzz_stored_bytes: a damaged fired_through made next_fire() overflow (UBSan), and a
// fired window holding the wrong number of values made a retraction with the wrong shape (the
// firmware's result encoder asserts one value per aggregate). Both are refused at restore.
TEST_CASE("damaged fired windows in a key's meta record are refused", "[engine]") {
    const MetaReplaced store(tumbling_spec());
    const std::string& partition = store.partition;
    const auto restores = [&](const std::string& meta) { return store.restores(meta); };
    const std::vector<std::optional<double>> one{1.0, 2.0, 3.0};  // make_spec: 3 aggregates
    REQUIRE(tumbling_spec().aggregates.size() == one.size());
    // The undamaged shapes restore: nothing fired yet, or a window of the grid with its values.
    CHECK(restores(key_meta(partition, INT64_MIN, {})));
    CHECK(restores(key_meta(partition, 120'000, {{60'000, 120'000, 0, one}})));
    // A late event moves fired_through to the watermark, off the window grid.
    CHECK(restores(key_meta(partition, 125'001, {{60'000, 120'000, 0, one}})));
    SECTION("fired through the ends of time") {
        CHECK_FALSE(restores(key_meta(partition, INT64_MAX, {})));
        CHECK_FALSE(restores(key_meta(partition, INT64_MAX - 1, {})));
        CHECK_FALSE(restores(key_meta(partition, INT64_MIN + 1, {})));
    }
    SECTION("a fired window off the grid, of another size, or out of order") {
        CHECK_FALSE(restores(key_meta(partition, 120'000, {{60'001, 120'001, 0, one}})));
        CHECK_FALSE(restores(key_meta(partition, 120'000, {{0, 120'000, 0, one}})));
        CHECK_FALSE(restores(
            key_meta(partition, 180'000, {{120'000, 180'000, 0, one}, {60'000, 120'000, 0, one}})));
        CHECK_FALSE(
            restores(key_meta(partition, 120'000, {{INT64_MIN, INT64_MIN + 60'000, 0, one}})));
    }
    SECTION("a fired window with the wrong number of values") {
        CHECK_FALSE(restores(key_meta(partition, 120'000, {{60'000, 120'000, 0, {}}})));
        CHECK_FALSE(
            restores(key_meta(partition, 120'000, {{60'000, 120'000, 0, {1.0, 2.0, 3.0, 4.0}}})));
    }
}

TEST_CASE("a session key's meta record holds no fired windows", "[engine]") {
    const MetaReplaced store(session_spec());
    CHECK(store.restores(key_meta(store.partition, INT64_MIN, {})));
    CHECK_FALSE(store.restores(key_meta(store.partition, 120'000, {})));
    CHECK_FALSE(
        store.restores(key_meta(store.partition, INT64_MIN, {{0, 10'000, 0, {1.0, 2.0, 3.0}}})));
}
