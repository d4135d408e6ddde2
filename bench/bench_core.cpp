// scripts/bench core: events per second through the engine on one core, on pre-decoded events
// (no parsing, no I/O): tumbling 1m, hopping 1h every 1m, session; 10k keys; count, mean, max.
//
// The stream: 10k devices each reporting about once a second in event-time order with a little
// disorder (within the watermark delay), so windows fire steadily as a live gateway's would.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "core/engine.h"

using namespace tidemark;

namespace {

struct Sink : core::EmissionSink {
    uint64_t emitted = 0;
    void emit(const core::Emission&) override { ++emitted; }
    void side_output(const core::SideOutput&) override {}
};

struct PreDecoded {
    std::vector<std::string> keys;
    std::vector<uint32_t> key_of;
    std::vector<int64_t> event_ms;
    std::vector<int64_t> ingest_ms;
    std::vector<double> value;
};

PreDecoded make_stream(size_t events, uint32_t keys) {
    PreDecoded s;
    for (uint32_t k = 0; k < keys; ++k)
        s.keys.push_back("device-" + std::to_string(k));
    uint64_t x = 88172645463325252ULL;  // xorshift: fixed, so every run feeds the same events
    auto next = [&] {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        return x;
    };
    const int64_t start = 1'764'400'000'000;
    for (size_t i = 0; i < events; ++i) {
        // `keys` events per second of event time.
        const int64_t t = start + static_cast<int64_t>(i * 1000 / keys);
        s.key_of.push_back(static_cast<uint32_t>(next() % keys));
        s.event_ms.push_back(t - static_cast<int64_t>(next() % 2000));
        s.ingest_ms.push_back(t);
        s.value.push_back(15.0 + static_cast<double>(next() % 1000) / 100.0);
    }
    return s;
}

core::PipelineSpec spec_for(core::WindowType type) {
    core::PipelineSpec s;
    s.name = "bench";
    s.fields = {"temp"};
    s.window.type = type;
    if (type == core::WindowType::tumbling) s.window.size_ms = 60'000;
    if (type == core::WindowType::hopping) {
        s.window.size_ms = 3'600'000;
        s.window.advance_ms = 60'000;
    }
    if (type == core::WindowType::session) {
        s.window.gap_ms = 30'000;
        s.window.max_duration_ms = 3'600'000;
    }
    s.watermark.delay_ms = 5'000;
    s.watermark.idle_timeout_ms = 60'000;
    s.aggregates = {{"n", core::AggregateFn::count, -1, 0},
                    {"avg", core::AggregateFn::mean, 0, 0},
                    {"max", core::AggregateFn::max, 0, 0}};
    s.limits.keys_max = 1'000'000;
    s.limits.open_windows_max = 100'000'000;
    return s;
}

struct Run {
    double events_per_s;
    uint64_t emitted;
    double state_bytes_per_window;
};

Run run_once(core::WindowType type, const PreDecoded& s) {
    auto engine = core::Engine::create("bench", {spec_for(type)});
    if (!engine) {
        std::fprintf(stderr, "%s\n", engine.error().message.c_str());
        std::exit(1);
    }
    Sink sink;
    double field[1];
    core::Event ev;
    ev.fields = std::span<const double>(field, 1);
    double bytes_per_window = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t i = 0; i < s.event_ms.size(); ++i) {
        ev.key = s.keys[s.key_of[i]];
        ev.partition = ev.key;
        ev.event_ms = s.event_ms[i];
        ev.ingest_ms = s.ingest_ms[i];
        ev.order = i;
        field[0] = s.value[i];
        (*engine)->process(0, ev, sink);
        if (i == s.event_ms.size() / 2) {
            const auto& st = (*engine)->stats(0);
            if (st.open_windows)
                bytes_per_window = double(st.state_bytes) / double(st.open_windows);
        }
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return {double(s.event_ms.size()) / seconds, sink.emitted, bytes_per_window};
}

// The process's anonymous resident memory (RssAnon in /proc/self/status), in bytes.
uint64_t rss_anon_bytes() {
    std::ifstream in("/proc/self/status");
    std::string line;
    while (std::getline(in, line)) {
        if (line.starts_with("RssAnon:"))
            return std::strtoull(line.c_str() + 8, nullptr, 10) * 1024;
    }
    return 0;
}

// core.rss_bytes_per_window: the process's RSS growth per open window, 100k keys x 10 open
// tumbling windows each (count + mean + max), none fired (the watermark delay is longer than
// the stream), beside the engine's own count of its state bytes for the same windows; and
// core.checkpoint_bytes_per_window, the keys and values a full checkpoint of them writes.
struct Footprint {
    double rss_bytes_per_window;
    double state_bytes_per_window;
    uint64_t open_windows;
    double checkpoint_bytes_per_window;
};

// Counts what a checkpoint hands the store: the bytes of every key and value put.
struct CountingWriter : core::StateWriter {
    uint64_t bytes = 0;
    void put(std::string_view key, std::string_view value) override {
        bytes += key.size() + value.size();
    }
    void erase(std::string_view key) override { bytes += key.size(); }
};

Footprint measure_footprint() {
    const uint32_t keys = 100'000;
    const int windows = 10;
    core::PipelineSpec spec = spec_for(core::WindowType::tumbling);
    spec.watermark.delay_ms = 24 * 3'600'000LL;  // nothing fires
    spec.limits.open_windows_max = 2 * uint64_t(keys) * windows;
    std::vector<std::string> names;
    names.reserve(keys);
    for (uint32_t k = 0; k < keys; ++k)
        names.push_back("device-" + std::to_string(k));
    auto engine = core::Engine::create("bench", {spec});
    if (!engine) std::exit(1);
    Sink sink;
    double field[1] = {21.5};
    core::Event ev;
    ev.fields = std::span<const double>(field, 1);
    const int64_t start = 1'764'400'020'000;
    const uint64_t before = rss_anon_bytes();
    uint64_t order = 0;
    for (int w = 0; w < windows; ++w) {
        for (uint32_t k = 0; k < keys; ++k) {
            ev.key = names[k];
            ev.partition = ev.key;
            ev.event_ms = start + int64_t(w) * 60'000;
            ev.ingest_ms = ev.event_ms;
            ev.order = order++;
            (*engine)->process(0, ev, sink);
        }
    }
    const uint64_t after = rss_anon_bytes();
    const auto& st = (*engine)->stats(0);
    const double open = double(st.open_windows);
    // The first checkpoint writes every window (and key, partition, the meta record).
    CountingWriter writer;
    (*engine)->checkpoint(writer);
    return {double(after - before) / open, double(st.state_bytes) / open, st.open_windows,
            double(writer.bytes) / open};
}

}  // namespace

int main(int argc, char** argv) {
    size_t events = 4'000'000;
    int repeats = 5;
    std::string only;
    for (int i = 1; i + 1 < argc; i += 2) {
        std::string a = argv[i];
        if (a == "--events") events = std::strtoull(argv[i + 1], nullptr, 10);
        if (a == "--repeats") repeats = std::atoi(argv[i + 1]);
        if (a == "--only") only = argv[i + 1];
    }
    const uint32_t keys = 10'000;
    const PreDecoded stream = make_stream(events, keys);
    const char* names[] = {"tumbling", "hopping", "session"};
    const core::WindowType types[] = {core::WindowType::tumbling, core::WindowType::hopping,
                                      core::WindowType::session};
    double median[3];
    double bytes_per_window = 0;
    for (int t = 0; t < 3; ++t) {
        median[t] = 0;
        if (!only.empty() && only != names[t]) continue;
        std::vector<double> rates;
        for (int r = 0; r < repeats; ++r) {
            Run run = run_once(types[t], stream);
            rates.push_back(run.events_per_s);
            if (t == 0) bytes_per_window = run.state_bytes_per_window;
            std::printf("# %s run %d: %.0f events/s, %llu emissions\n", names[t], r,
                        run.events_per_s, static_cast<unsigned long long>(run.emitted));
        }
        std::sort(rates.begin(), rates.end());
        median[t] = rates[rates.size() / 2];
    }
    std::printf("# %zu events, %u keys, count+mean+max, median of %d runs, one core\n", events,
                keys, repeats);
    std::printf("core.tumbling_events_per_s: %.0f events/s\n", median[0]);
    std::printf("core.hopping_events_per_s: %.0f events/s\n", median[1]);
    std::printf("core.session_events_per_s: %.0f events/s\n", median[2]);
    std::printf("core.hopping_vs_tumbling: %.2f ratio\n", median[1] / median[0]);
    std::printf("core.state_bytes_per_window: %.0f bytes\n", bytes_per_window);
    if (only.empty() || only == "footprint") {
        const Footprint f = measure_footprint();
        std::printf(
            "# footprint: %llu open windows (100k keys x 10), engine counts %.0f bytes each\n",
            static_cast<unsigned long long>(f.open_windows), f.state_bytes_per_window);
        std::printf("core.rss_bytes_per_window: %.0f bytes\n", f.rss_bytes_per_window);
        std::printf("core.checkpoint_bytes_per_window: %.1f bytes\n",
                    f.checkpoint_bytes_per_window);
    }
    return 0;
}
