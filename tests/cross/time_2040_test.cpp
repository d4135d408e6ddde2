// Event times are 64-bit milliseconds end to end, so a 32-bit target (armhf, where time_t ends
// at 2038-01-19T03:14:07Z) handles 2040 like any other year: config durations, payload times
// and the engine's windows, watermarks and checkpoints.
#include <sys/types.h>

#include <catch2/catch.hpp>
#include <map>
#include <string>
#include <vector>

#include "adapters/codec/timestamp.h"
#include "core/duration.h"
#include "core/engine.h"
#include "core/time_text.h"

using namespace tidemark;

// Log segment offsets and sizes pass 2 GiB on every target (_FILE_OFFSET_BITS=64 on armhf).
static_assert(sizeof(off_t) == 8, "off_t must be 64-bit: build with _FILE_OFFSET_BITS=64");

namespace {

constexpr int64_t t2040_ms = 2'208'988'800'000;  // 2040-01-01T00:00:00Z
constexpr int64_t t2038_ms = 2'147'483'648'000;  // 2^31 s: one past the last 32-bit time_t
constexpr int64_t minute_ms = 60'000;

struct Recorder : core::EmissionSink {
    std::vector<core::Emission> out;
    void emit(const core::Emission& e) override { out.push_back(e); }
    void side_output(const core::SideOutput&) override {}
};

struct MapWriter : core::StateWriter {
    std::map<std::string, std::string> rows;
    void put(std::string_view key, std::string_view value) override {
        rows[std::string(key)] = std::string(value);
    }
    void erase(std::string_view key) override { rows.erase(std::string(key)); }
};

core::PipelineSpec one_minute_sum() {
    core::PipelineSpec spec;
    spec.name = "p";
    spec.fields = {"v"};
    spec.window.type = core::WindowType::tumbling;
    spec.window.size_ms = minute_ms;
    spec.watermark.delay_ms = 0;
    spec.aggregates = {{"n", core::AggregateFn::count, -1}, {"sum", core::AggregateFn::sum, 0}};
    return spec;
}

std::unique_ptr<core::Engine> make_engine() {
    auto engine = core::Engine::create("node", {one_minute_sum()});
    REQUIRE(engine);
    return std::move(*engine);
}

void feed(core::Engine& engine, Recorder& sink, int64_t event_ms, double value) {
    const double fields[] = {value};
    core::Event event;
    event.key = "k";
    event.partition = "k";
    event.event_ms = event_ms;
    event.ingest_ms = event_ms;
    event.fields = fields;
    engine.advance(event.ingest_ms, sink);
    engine.process(0, event, sink);
}

}  // namespace

TEST_CASE("config durations and payload times reach 2040 exactly") {
    CHECK(core::parse_duration_ms("25567d") == t2040_ms);
    CHECK(core::format_duration(t2040_ms) == "25567d");
    CHECK(core::format_duration(-t2040_ms) == "-25567d");
    CHECK(core::parse_size_bytes("3GiB") == uint64_t{3} << 30);
    CHECK(core::parse_rfc3339_ms("2040-01-01T00:00:00Z") == t2040_ms);
    CHECK(core::parse_rfc3339_ms("2040-01-01T01:00:00.250+01:00") == t2040_ms + 250);
    CHECK(core::parse_rfc3339_ms("2038-01-19T03:14:08Z") == t2038_ms);
    CHECK(codec::parse_epoch_text_ms("2208988800", codec::EpochUnit::s) == t2040_ms);
    CHECK(codec::parse_epoch_text_ms("2208988800000000", codec::EpochUnit::us) == t2040_ms);
    CHECK(codec::epoch_integer_ms(2'208'988'800'000'000'000, codec::EpochUnit::ns) == t2040_ms);
    CHECK(codec::epoch_double_ms(2208988800.5, codec::EpochUnit::s) == t2040_ms + 500);
}

TEST_CASE("the engine windows events across 2038 and in 2040") {
    auto engine = make_engine();
    Recorder sink;
    // The window [2038-01-19T03:14:00Z, +1m) holds the last 32-bit second and the first past it.
    feed(*engine, sink, t2038_ms - 1'000, 1);
    feed(*engine, sink, t2038_ms, 2);
    feed(*engine, sink, t2040_ms + 10'000, 4);
    REQUIRE(sink.out.size() == 1);
    CHECK(sink.out[0].start_ms == t2038_ms - 8'000);
    CHECK(sink.out[0].end_ms == t2038_ms - 8'000 + minute_ms);
    CHECK(sink.out[0].values[0] == 2.0);
    CHECK(sink.out[0].values[1] == 3.0);

    // A checkpoint taken in 2040 restores into a new engine, which closes the 2040 window.
    MapWriter state;
    engine->checkpoint(state);
    auto restored = make_engine();
    for (const auto& [key, value] : state.rows)
        REQUIRE(restored->restore_entry(key, value));
    REQUIRE(restored->restore_finish());
    Recorder after;
    feed(*restored, after, t2040_ms + minute_ms + 1, 8);
    REQUIRE(after.out.size() == 1);
    CHECK(after.out[0].start_ms == t2040_ms);
    CHECK(after.out[0].end_ms == t2040_ms + minute_ms);
    CHECK(after.out[0].watermark_ms == t2040_ms + minute_ms + 1);
    CHECK(after.out[0].values[1] == 4.0);
    CHECK(restored->stats(0).watermark_ms == t2040_ms + minute_ms + 1);
}
