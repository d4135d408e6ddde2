// Test harness: drives the engine with (ingest_ms, key, event_ms, value) records and records what
// comes out as canonical text lines, so tests compare runs byte for byte.
#pragma once

#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/engine.h"

namespace tidemark::test {

struct Input {
    Input(int64_t ingest, std::string k, int64_t event, double v, std::string part = {})
        : ingest_ms(ingest),
          key(std::move(k)),
          event_ms(event),
          value(v),
          partition(std::move(part)) {}
    int64_t ingest_ms;
    std::string key;
    int64_t event_ms;
    double value;
    std::string partition;  // empty: the key
};

inline std::string format_value(const std::optional<double>& v) {
    if (!v) return "null";
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", *v);
    return buf;
}

struct Out {
    core::Emission e;
    std::string text;
};

class Recorder : public core::EmissionSink {
  public:
    std::vector<Out> out;
    std::vector<core::SideOutput> side;
    void emit(const core::Emission& e) override {
        std::string t = std::string(core::emission_kind_name(e.kind)) + " " + e.key + " [" +
                        std::to_string(e.start_ms) + "," + std::to_string(e.end_ms) + ") rev " +
                        std::to_string(e.revision) + " " +
                        std::string(core::closed_by_name(e.closed_by)) + " wm " +
                        std::to_string(e.watermark_ms) + " id " + std::to_string(e.id) + " :";
        for (const auto& v : e.values)
            t += " " + format_value(v);
        out.push_back({e, t});
    }
    void side_output(const core::SideOutput& s) override { side.push_back(s); }
    std::vector<core::LateReport> late;
    void late_report(const core::LateReport& r) override { late.push_back(r); }
    std::string text() const {
        std::string all;
        for (const auto& o : out)
            all += o.text + "\n";
        return all;
    }
    std::vector<const core::Emission*> of_kind(core::EmissionKind k) const {
        std::vector<const core::Emission*> r;
        for (const auto& o : out)
            if (o.e.kind == k) r.push_back(&o.e);
        return r;
    }
};

/// An in-memory store for checkpoints: applies puts and erases like LMDB would, and counts the
/// erasures of keys it does not hold (work a checkpoint did for nothing).
class MapWriter : public core::StateWriter {
  public:
    std::map<std::string, std::string> data;
    size_t puts = 0, erases = 0, absent_erases = 0;
    void put(std::string_view k, std::string_view v) override {
        data[std::string(k)] = std::string(v);
        ++puts;
    }
    void erase(std::string_view k) override {
        if (data.erase(std::string(k)) == 0) ++absent_erases;
        ++erases;
    }
};

inline core::PipelineSpec make_spec(core::WindowType type, int64_t size_ms,
                                    int64_t advance_ms = 0) {
    core::PipelineSpec s;
    s.name = "p";
    s.fields = {"v"};
    s.window.type = type;
    if (type == core::WindowType::session) {
        s.window.gap_ms = size_ms;
        s.window.max_duration_ms = advance_ms ? advance_ms : 1'000'000'000;
    } else {
        s.window.size_ms = size_ms;
        s.window.advance_ms = advance_ms;
    }
    s.watermark.delay_ms = 0;
    s.watermark.idle_timeout_ms = 1'000'000'000;
    s.watermark.max_future_ms = 1'000'000'000;
    s.aggregates = {{"n", core::AggregateFn::count, -1, 0},
                    {"sum", core::AggregateFn::sum, 0, 0},
                    {"max", core::AggregateFn::max, 0, 0}};
    return s;
}

class Driver {
  public:
    explicit Driver(core::PipelineSpec spec, std::string node = "gw") {
        auto e = core::Engine::create(node, {std::move(spec)});
        if (!e) throw std::runtime_error(e.error().message);
        engine = std::move(*e);
    }
    void feed(const Input& in) {
        double f[1] = {in.value};
        core::Event ev;
        ev.key = in.key;
        ev.partition =
            in.partition.empty() ? std::string_view(in.key) : std::string_view(in.partition);
        ev.event_ms = in.event_ms;
        ev.ingest_ms = in.ingest_ms;
        ev.order = order++;
        ev.fields = std::span<const double>(f, 1);
        topic_ = "t/" + in.key;
        ev.topic = topic_;
        ev.payload = "{}";
        last_ingest = std::max(last_ingest, in.ingest_ms);
        engine->advance(in.ingest_ms, rec);
        engine->process(0, ev, rec);
    }
    void tick(int64_t ingest_ms) {
        last_ingest = std::max(last_ingest, ingest_ms);
        engine->advance(ingest_ms, rec);
    }
    /// Lets every partition go idle and the watermark run far ahead: everything open closes.
    void finish() { tick(last_ingest + 3'000'000'000); }
    int64_t last_ingest = 0;
    void feed_all(const std::vector<Input>& inputs) {
        for (const auto& i : inputs)
            feed(i);
    }
    const core::PipelineStats& stats() const { return engine->stats(0); }
    std::unique_ptr<core::Engine> engine;
    Recorder rec;
    uint64_t order = 0;
    std::string topic_;
};

}  // namespace tidemark::test
