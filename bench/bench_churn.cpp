// scripts/bench churn: keys that come and go for a long time, through the engine (issue 11).
//
// max_keys 10000; 100000 distinct devices over time (10 x max_keys), each active for ten
// minutes of event time (an event every 10 s), then silent for good; a thousand of them live at
// any moment, with ticks every second. Before partitions were forgotten, the engine refused
// every new device once 10000 had ever been seen. Prints the events refused and the process's
// anonymous memory at the start (after the first generation) and at the end: flat means the
// state is bounded by what is live, not by what was ever seen.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "core/engine.h"

using namespace tidemark;

namespace {

struct Sink : core::EmissionSink {
    uint64_t emitted = 0, side = 0;
    void emit(const core::Emission&) override { ++emitted; }
    void side_output(const core::SideOutput&) override { ++side; }
};

uint64_t rss_anon_kib() {
    std::ifstream in("/proc/self/status");
    std::string line;
    while (std::getline(in, line))
        if (line.rfind("RssAnon:", 0) == 0) return std::strtoull(line.c_str() + 8, nullptr, 10);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    uint64_t devices = 100'000;
    if (argc > 2 && std::string(argv[1]) == "--devices")
        devices = std::strtoull(argv[2], nullptr, 10);
    constexpr uint64_t keys_max = 10'000;
    constexpr uint64_t live = 1'000;        // devices active at once
    constexpr int64_t active_ms = 600'000;  // each device's active span
    constexpr int64_t period_ms = 10'000;   // one event per device every 10 s

    core::PipelineSpec spec;
    spec.name = "churn";
    spec.fields = {"v"};
    spec.window.type = core::WindowType::tumbling;
    spec.window.size_ms = 60'000;
    spec.watermark.delay_ms = 5'000;
    spec.watermark.idle_timeout_ms = 60'000;
    spec.watermark.max_future_ms = 600'000;
    spec.late.allowed_lateness_ms = 60'000;
    spec.aggregates = {{"n", core::AggregateFn::count, -1, 0},
                       {"avg", core::AggregateFn::mean, 0, 0},
                       {"max", core::AggregateFn::max, 0, 0}};
    spec.limits.keys_max = keys_max;
    spec.limits.open_windows_max = 10'000'000;
    auto created = core::Engine::create("gw", {spec});
    if (!created) {
        std::fprintf(stderr, "%s\n", created.error().message.c_str());
        return 1;
    }
    core::Engine& engine = **created;
    Sink sink;

    // Device d is active from d * active_ms / live for active_ms: `live` devices at any time.
    const int64_t start_ms = 1'764'400'000'000;
    const int64_t stagger_ms = active_ms / static_cast<int64_t>(live);
    const int64_t end_ms = start_ms + static_cast<int64_t>(devices) * stagger_ms + active_ms;
    uint64_t rss_start_kib = 0;
    std::string key;
    double value = 1;
    for (int64_t now = start_ms; now <= end_ms; now += 1000) {
        engine.advance(now, sink);
        // Devices whose 10 s slot falls in this second: d with (d * stagger) % period in it.
        const uint64_t first =
            static_cast<uint64_t>(std::max<int64_t>(0, (now - start_ms - active_ms) / stagger_ms));
        const uint64_t last =
            std::min<uint64_t>(devices, static_cast<uint64_t>((now - start_ms) / stagger_ms) + 1);
        for (uint64_t d = first; d < last; ++d) {
            const int64_t since = now - (start_ms + static_cast<int64_t>(d) * stagger_ms);
            if (since < 0 || since >= active_ms || since % period_ms >= 1000) continue;
            key = "device-" + std::to_string(d);
            core::Event e;
            e.key = key;
            e.event_ms = now;
            e.ingest_ms = now;
            e.fields = std::span<const double>(&value, 1);
            engine.process(0, e, sink);
        }
        if (rss_start_kib == 0 && now - start_ms >= 2 * active_ms) rss_start_kib = rss_anon_kib();
    }
    engine.advance(end_ms + 3'600'000, sink);
    const core::PipelineStats& s = engine.stats(0);
    std::printf("events %llu, results %llu, keys live at the end %llu, partitions forgotten %llu\n",
                static_cast<unsigned long long>(s.events_in),
                static_cast<unsigned long long>(sink.emitted),
                static_cast<unsigned long long>(s.keys),
                static_cast<unsigned long long>(s.partitions_forgotten));
    std::printf("churn.devices: %llu\n", static_cast<unsigned long long>(devices));
    std::printf("churn.keys_max: %llu\n", static_cast<unsigned long long>(keys_max));
    std::printf("churn.keys_refused: %llu\n", static_cast<unsigned long long>(s.keys_refused));
    std::printf("churn.rss_anon_kib_start: %llu kib\n",
                static_cast<unsigned long long>(rss_start_kib));
    std::printf("churn.rss_anon_kib_end: %llu kib\n",
                static_cast<unsigned long long>(rss_anon_kib()));
    return s.keys_refused == 0 ? 0 : 1;
}
