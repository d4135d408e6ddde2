#include "tests/core/scenario.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <stdexcept>

#include <sys/wait.h>
#include <unistd.h>
#include <csignal>

#include "tests/core/engine_harness.h"

namespace tidemark::model {
namespace {

// splitmix64: portable, so a seed names the same scenario everywhere.
class Rng {
  public:
    explicit Rng(uint64_t seed) : state_(seed * 0x9E3779B97F4A7C15ull + 0x1234567ull) {}
    uint64_t next() {
        uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    // Uniform in [lo, hi].
    int64_t range(int64_t lo, int64_t hi) {
        return lo + static_cast<int64_t>(next() % static_cast<uint64_t>(hi - lo + 1));
    }
    bool chance(int percent) { return range(0, 99) < percent; }
    template <typename T>
    const T& pick(const std::vector<T>& v) {
        return v[static_cast<size_t>(range(0, static_cast<int64_t>(v.size()) - 1))];
    }

  private:
    uint64_t state_;
};

constexpr int64_t second_ms = 1000;
constexpr int64_t minute_ms = 60 * second_ms;
constexpr int64_t base_ms = 1'700'000'000'000;

// The families the generator aims at; each seed takes one, so every run of a few hundred seeds
// covers all of them.
enum class Family { mixed, churn, sessions, all_idle, clamp, late };
const char* family_name(Family f) {
    switch (f) {
        case Family::mixed:
            return "mixed";
        case Family::churn:
            return "churn";
        case Family::sessions:
            return "sessions";
        case Family::all_idle:
            return "all_idle";
        case Family::clamp:
            return "clamp";
        case Family::late:
            return "late";
    }
    return "?";
}

core::PipelineSpec generate_spec(Rng& rng, Family family) {
    core::PipelineSpec s;
    s.name = "p";
    s.fields = {"v", "w"};
    int type = static_cast<int>(rng.range(0, 2));
    if (family == Family::sessions) type = 2;
    auto& w = s.window;
    if (type == 0) {
        w.type = core::WindowType::tumbling;
        w.size_ms = rng.pick<int64_t>({10 * second_ms, 30 * second_ms, minute_ms});
        w.offset_ms = rng.chance(50) ? rng.range(1, w.size_ms / second_ms - 1) * second_ms : 0;
    } else if (type == 1) {
        w.type = core::WindowType::hopping;
        std::vector<std::pair<int64_t, int64_t>> shapes = {{50, 20}, {25, 10}, {10, 5}, {60, 25},
                                                           {45, 30}, {30, 30}, {20, 6}};
        auto shape = rng.pick(shapes);
        w.size_ms = shape.first * second_ms;
        w.advance_ms = shape.second * second_ms;
    } else {
        w.type = core::WindowType::session;
        w.gap_ms = rng.pick<int64_t>({5 * second_ms, 10 * second_ms, 20 * second_ms});
        w.max_duration_ms = family == Family::sessions ? w.gap_ms * rng.range(2, 3)
                            : rng.chance(20)           ? 1'000'000'000
                                                       : w.gap_ms * rng.range(2, 5);
    }
    s.watermark.scope =
        rng.chance(50) ? core::WatermarkScope::global : core::WatermarkScope::partition;
    s.watermark.delay_ms = rng.pick<int64_t>({0, 0, second_ms, 5 * second_ms});
    s.watermark.idle_timeout_ms =
        rng.pick<int64_t>({5 * second_ms, 15 * second_ms, 30 * second_ms, minute_ms});
    s.watermark.max_future_ms = family == Family::clamp
                                    ? rng.pick<int64_t>({5 * second_ms, 30 * second_ms})
                                    : rng.pick<int64_t>({30 * second_ms, 10 * minute_ms});
    s.late.allowed_lateness_ms =
        rng.chance(40) ? 0 : rng.pick<int64_t>({5 * second_ms, 20 * second_ms, minute_ms});
    s.late.too_late = rng.chance(50) ? core::TooLate::drop : core::TooLate::side_output;
    s.late.corrections = rng.chance(50) ? core::Corrections::upsert : core::Corrections::retract;
    s.limits.keys_max = family == Family::churn ? static_cast<uint64_t>(rng.range(3, 12))
                        : rng.chance(15)        ? static_cast<uint64_t>(rng.range(3, 8))
                                                : 100'000;
    s.limits.open_windows_max = 1'000'000;
    s.aggregates.push_back({"n", core::AggregateFn::count, -1, 0});
    std::vector<core::AggregateSpec> more = {
        {"nv", core::AggregateFn::count, 0, 0},        {"sum", core::AggregateFn::sum, 0, 0},
        {"min", core::AggregateFn::min, 0, 0},         {"max", core::AggregateFn::max, 0, 0},
        {"mean", core::AggregateFn::mean, 1, 0},       {"first", core::AggregateFn::first, 0, 0},
        {"last", core::AggregateFn::last, 1, 0},       {"var", core::AggregateFn::variance, 0, 0},
        {"sd", core::AggregateFn::stddev, 1, 0},       {"p50", core::AggregateFn::quantile, 0, 0.5},
        {"p95", core::AggregateFn::quantile, 1, 0.95}, {"p0", core::AggregateFn::quantile, 0, 0},
        {"p100", core::AggregateFn::quantile, 0, 1}};
    for (const auto& a : more)
        if (rng.chance(40)) s.aggregates.push_back(a);
    return s;
}

struct Device {
    std::string partition;
    std::vector<std::string> keys;
    int64_t skew_ms = 0;  // event time minus ingest time, typically
    bool online = true;
    int64_t toggle_at_ms = 0;  // when it goes offline / comes back
    bool retired = false;
};

std::string device_name(int index, bool tricky) {
    if (tricky) {
        static const std::vector<std::string> names = {"a|b", "a",  "b|c", "c", "x\\y",
                                                       "x",   "y|", "\\",  "|", "a\\|b"};
        return names[static_cast<size_t>(index) % names.size()] +
               (index >= static_cast<int>(names.size()) ? std::to_string(index) : "");
    }
    return "d" + std::to_string(index);
}

}  // namespace

Record event_record(int64_t ingest_ms, std::string key, int64_t event_ms, double value,
                    std::string partition) {
    static uint64_t order = 0;
    Record r;
    r.ingest_ms = ingest_ms;
    r.key = std::move(key);
    r.partition = std::move(partition);
    r.event_ms = event_ms;
    r.order = ++order;
    r.fields = {value};
    return r;
}

Record tick_record(int64_t ingest_ms) {
    Record r;
    r.tick = true;
    r.ingest_ms = ingest_ms;
    return r;
}

Scenario generate_scenario(uint64_t seed) {
    Rng rng(seed);
    Scenario sc;
    sc.seed = seed;
    auto family = static_cast<Family>(seed % 6);
    sc.family = family_name(family);
    sc.spec = generate_spec(rng, family);
    const auto& spec = sc.spec;
    const bool tricky = rng.chance(20);
    const bool shared_keys = rng.chance(40);  // keys that differ from partitions
    const bool ticks = rng.chance(80);
    const bool coarse = rng.chance(40);
    const int64_t timeout = spec.watermark.idle_timeout_ms;
    int next_device = 0;
    std::vector<Device> devices;
    auto add_device = [&](int64_t now) {
        Device d;
        d.partition = device_name(next_device, tricky);
        if (shared_keys) {
            int n = static_cast<int>(rng.range(1, 3));
            for (int i = 0; i < n; ++i)
                d.keys.push_back(tricky ? device_name(static_cast<int>(rng.range(0, 9)), true)
                                        : "k" + std::to_string(rng.range(0, 3)));
        } else {
            d.keys.push_back(d.partition);
        }
        d.skew_ms = rng.chance(70) ? 0 : rng.range(-20, 2) * second_ms;
        d.online = true;
        d.toggle_at_ms = now + rng.range(5, 90) * second_ms;
        ++next_device;
        devices.push_back(d);
    };
    int initial = static_cast<int>(rng.range(1, family == Family::churn ? 4 : 6));
    int64_t now = base_ms + (coarse ? 0 : rng.range(0, 999));
    for (int i = 0; i < initial; ++i)
        add_device(now);
    const size_t events_target = static_cast<size_t>(rng.range(30, 200));
    size_t events = 0;
    uint64_t order = 0;
    auto push_tick = [&](int64_t at) {
        Record r;
        r.tick = true;
        r.ingest_ms = at;
        r.order = order++;
        sc.records.push_back(r);
    };
    // Our own silence (no ticks) happens too, but rarely.
    auto advance_to = [&](int64_t to) {
        if (ticks && !rng.chance(5))
            for (int64_t t = now + second_ms; t < to; t += second_ms)
                push_tick(t);
        now = to;
    };
    int64_t all_idle_until = 0;
    while (events < events_target && sc.records.size() < 4000) {
        int64_t dt = 0;
        int roll = static_cast<int>(rng.range(0, 99));
        if (roll < 10)
            dt = 0;
        else if (roll < 80)
            dt = rng.range(1, 1500);
        else if (roll < 95)
            dt = rng.range(1500, 20'000);
        else
            dt = rng.range(30, 200) * second_ms;
        // Whole seconds make exact boundaries common: an event at a window's end, a session
        // touching the next, an idle timeout that falls on a tick.
        if (coarse) dt = (dt + second_ms - 1) / second_ms * second_ms;
        advance_to(now + dt);
        if (family == Family::all_idle && all_idle_until < now && rng.chance(4))
            all_idle_until =
                now + rng.range(timeout / second_ms, 3 * timeout / second_ms + 60) * second_ms;
        // Devices toggle online/offline; churn retires them and brings new ones.
        int new_devices = 0;
        for (auto& d : devices) {
            if (d.retired || now < d.toggle_at_ms) continue;
            if (family == Family::churn && d.online && rng.chance(60)) {
                // Mostly a device replaced by a new one; sometimes one more device at once.
                d.retired = rng.chance(75);
                ++new_devices;
                if (d.retired) continue;
            }
            d.online = !d.online;
            d.toggle_at_ms =
                now + (d.online ? rng.range(5, 60) : rng.range(5, 2 * timeout / second_ms + 30)) *
                          second_ms;
        }
        if (family != Family::churn && rng.chance(1)) ++new_devices;
        for (int i = 0; i < new_devices; ++i)
            add_device(now);
        std::vector<Device*> online;
        for (auto& d : devices)
            if (!d.retired && d.online) online.push_back(&d);
        if (online.empty() || now < all_idle_until) {
            if (!ticks) push_tick(now);
            continue;
        }
        Device& d = *rng.pick(online);
        Record r;
        r.ingest_ms = now;
        r.partition = d.partition;
        r.key = rng.pick(d.keys);
        int64_t t = now + d.skew_ms;
        int jitter = static_cast<int>(rng.range(0, 99));
        int late_pct = family == Family::late ? 25 : 10;
        if (jitter < late_pct)
            t -= rng.range(5, 60) * second_ms;  // late
        else if (jitter < late_pct + 3)
            t -= rng.range(5, 30) * minute_ms;  // too late
        else if (jitter < late_pct + 3 + (family == Family::clamp ? 15 : 2))
            t += spec.watermark.max_future_ms + rng.range(1, 3600) * second_ms;  // clamped
        else if (family == Family::sessions)
            t -= rng.range(0, spec.window.gap_ms * 2);  // out of order within a few gaps
        else
            t -= rng.range(0, 2000);
        if (coarse) t = t / second_ms * second_ms;
        r.event_ms = t;
        r.order = order++;
        double v = static_cast<double>(rng.range(-50, 50));
        double w = static_cast<double>(rng.range(0, 100));
        r.fields = {rng.chance(10) ? core::field_missing : v,
                    rng.chance(20) ? core::field_missing : w};
        sc.records.push_back(r);
        ++events;
    }
    // A tail of ticks long enough for every partition to go idle and most windows to close.
    int64_t tail = 2 * timeout + 3 * minute_ms;
    for (int64_t t = now + second_ms; t <= now + tail; t += second_ms * 5)
        push_tick(t);
    return sc;
}

namespace {

template <typename E>
bool tell_checkpoint_failed(E& engine) {
    if constexpr (requires { engine.checkpoint_failed(); }) {
        engine.checkpoint_failed();
        return true;
    } else {
        return false;
    }
}

}  // namespace

EngineRun run_engine(const core::PipelineSpec& spec, const std::vector<Record>& records,
                     const RunOptions& options) {
    EngineRun run;
    auto create = [&]() -> std::unique_ptr<core::Engine> {
        auto e = core::Engine::create(scenario_node, {spec});
        if (!e) throw std::runtime_error("Engine::create: " + e.error().message);
        return std::move(*e);
    };
    auto engine = create();
    test::Recorder rec;
    test::MapWriter store;
    for (size_t i = 0; i < records.size(); ++i) {
        const Record& r = records[i];
        engine->advance(r.ingest_ms, rec);
        if (!r.tick) {
            core::Event ev;
            ev.key = r.key;
            ev.partition = r.partition.empty() ? std::string_view(r.key) : r.partition;
            ev.event_ms = r.event_ms;
            ev.ingest_ms = r.ingest_ms;
            ev.order = r.order;
            ev.fields = std::span<const double>(r.fields.data(), r.fields.size());
            std::string topic = "t/" + r.key;
            ev.topic = topic;
            ev.payload = "{}";
            engine->process(0, ev, rec);
        }
        if (options.failed_checkpoint_after.count(i)) {
            test::MapWriter scratch;
            engine->checkpoint(scratch);
            tell_checkpoint_failed(*engine);
        }
        if (options.checkpoint_after.count(i) || options.cut_after.count(i))
            engine->checkpoint(store);
        if (options.cut_after.count(i)) {
            engine = create();
            for (const auto& [k, v] : store.data) {
                auto ok = engine->restore_entry(k, v);
                if (!ok) {
                    run.error = "restore_entry: " + ok.error().message;
                    return run;
                }
            }
            auto ok = engine->restore_finish();
            if (!ok) {
                run.error = "restore_finish: " + ok.error().message;
                return run;
            }
        }
    }
    for (const auto& o : rec.out) {
        run.emissions.push_back(o.e);
        run.lines.push_back(o.text);
    }
    run.side = rec.side;
    run.stats = engine->stats(0);
    return run;
}

ReferenceModel run_model(const core::PipelineSpec& spec, const std::vector<Record>& records) {
    ReferenceModel model(scenario_node, spec);
    for (const auto& r : records)
        model.step(r);
    return model;
}

std::string emission_text(const core::Emission& e) {
    test::Recorder rec;
    rec.emit(e);
    return rec.out.back().text;
}

namespace {

// The counter arrived with issue 11; a build against an engine without it compares the rest.
template <typename Stats>
std::optional<uint64_t> partial_count(const Stats& s) {
    if constexpr (requires { s.too_late_partial; })
        return s.too_late_partial;
    else
        return std::nullopt;
}

bool close_enough(double a, double b) {
    return std::fabs(a - b) <= 1e-9 * std::max({1.0, std::fabs(a), std::fabs(b)});
}

std::optional<std::string> value_difference(const core::PipelineSpec& spec,
                                            const core::Emission& got, const core::Emission& want,
                                            const std::vector<std::pair<double, double>>& ranges) {
    if (got.values.size() != want.values.size()) return "number of values differs";
    for (size_t a = 0; a < want.values.size(); ++a) {
        const auto& agg = spec.aggregates[a];
        const auto& g = got.values[a];
        const auto& w = want.values[a];
        std::string name = agg.name;
        if (!g || !w) {
            // No value (null) only where nothing was aggregated; count says 0 then.
            if (g.has_value() != w.has_value())
                return "value " + name + ": " + test::format_value(g) + " vs model " +
                       test::format_value(w);
            continue;
        }
        switch (agg.fn) {
            case core::AggregateFn::count:
            case core::AggregateFn::min:
            case core::AggregateFn::max:
            case core::AggregateFn::first:
            case core::AggregateFn::last:
                if (*g != *w)
                    return "value " + name + ": " + test::format_value(g) + " vs model " +
                           test::format_value(w);
                break;
            case core::AggregateFn::sum:
            case core::AggregateFn::mean:
            case core::AggregateFn::variance:
            case core::AggregateFn::stddev:
                if (!close_enough(*g, *w))
                    return "value " + name + ": " + test::format_value(g) + " vs model " +
                           test::format_value(w);
                break;
            case core::AggregateFn::quantile: {
                auto [low, high] = ranges.at(a);
                if (*g < low || *g > high)
                    return "value " + name + ": " + test::format_value(g) + " outside [" +
                           test::format_value(low) + ", " + test::format_value(high) + "]";
                break;
            }
        }
    }
    return std::nullopt;
}

}  // namespace

std::optional<std::string> compare(const core::PipelineSpec& spec, const EngineRun& engine,
                                   const ReferenceModel& model) {
    if (!engine.error.empty()) return "engine: " + engine.error;
    const auto& want = model.emissions;
    size_t n = std::min(engine.emissions.size(), want.size());
    for (size_t i = 0; i < n; ++i) {
        const auto& g = engine.emissions[i];
        const auto& w = want[i];
        std::string why;
        if (g.kind != w.kind || g.key != w.key || g.start_ms != w.start_ms ||
            g.end_ms != w.end_ms || g.revision != w.revision || g.closed_by != w.closed_by ||
            g.watermark_ms != w.watermark_ms || g.id != w.id)
            why = "emission differs";
        else if (auto v = value_difference(spec, g, w, model.quantile_ranges[i]))
            why = *v;
        if (!why.empty())
            return "emission #" + std::to_string(i) + ": " + why +
                   "\n  engine: " + emission_text(g) + "\n  model:  " + emission_text(w);
    }
    if (engine.emissions.size() != want.size()) {
        std::string r = "engine emitted " + std::to_string(engine.emissions.size()) + ", model " +
                        std::to_string(want.size());
        if (n < engine.emissions.size())
            r += "\n  engine extra: " + emission_text(engine.emissions[n]);
        if (n < want.size()) r += "\n  model extra:  " + emission_text(want[n]);
        return r;
    }
    if (engine.side.size() != model.side.size())
        return "side outputs: engine " + std::to_string(engine.side.size()) + ", model " +
               std::to_string(model.side.size());
    for (size_t i = 0; i < engine.side.size(); ++i) {
        const auto& g = engine.side[i];
        const auto& w = model.side[i];
        if (g.order == w.order && w.reason == "too_late" &&
            (g.window_start_ms != w.window_start_ms || g.window_end_ms != w.window_end_ms ||
             g.watermark_ms != w.watermark_ms || g.event_ms != w.event_ms))
            return "side output #" + std::to_string(i) + " (order " + std::to_string(g.order) +
                   "): engine window [" + std::to_string(g.window_start_ms) + "," +
                   std::to_string(g.window_end_ms) + ") wm " + std::to_string(g.watermark_ms) +
                   " t " + std::to_string(g.event_ms) + ", model [" +
                   std::to_string(w.window_start_ms) + "," + std::to_string(w.window_end_ms) +
                   ") wm " + std::to_string(w.watermark_ms) + " t " + std::to_string(w.event_ms);
        if (engine.side[i].order != model.side[i].order)
            return "side output #" + std::to_string(i) + ": engine order " +
                   std::to_string(engine.side[i].order) + " (" + engine.side[i].reason +
                   "), model " + std::to_string(model.side[i].order) + " (" + model.side[i].reason +
                   ")";
    }
    const auto& es = engine.stats;
    const auto& ms = model.stats;
    std::string counters;
    auto check = [&](const char* name, uint64_t got, uint64_t expected) {
        if (got != expected)
            counters += std::string(" ") + name + " engine " + std::to_string(got) + " model " +
                        std::to_string(expected) + ";";
    };
    check("too_late", es.too_late, ms.too_late);
    check("keys_refused", es.keys_refused, ms.keys_refused);
    check("clamped", es.clamped, ms.clamped);
    check("late_updated", es.late_updated, ms.late_updated);
    if (auto partial = partial_count(es)) check("too_late_partial", *partial, ms.too_late_partial);
    check("side_outputs", es.side_outputs, ms.side_outputs);
    check("events_in", es.events_in, ms.events_in);
    check("emitted_final", es.emitted_final, ms.emitted_final);
    check("emitted_update", es.emitted_update, ms.emitted_update);
    check("emitted_retract", es.emitted_retract, ms.emitted_retract);
    check("windows_refused", es.windows_refused, 0);
    check("keys", es.keys, ms.keys);
    check("partitions_active", es.partitions_active, ms.partitions_active);
    check("partitions_idle", es.partitions_idle, ms.partitions_idle);
    if (!counters.empty()) return "counters:" + counters;
    return std::nullopt;
}

std::vector<Record> shrink(std::vector<Record> records,
                           const std::function<bool(const std::vector<Record>&)>& fails) {
    // Bounded: each pass removes at least one record or ends the loop.
    for (bool progress = true; progress;) {
        progress = false;
        for (size_t chunk = std::max<size_t>(1, records.size() / 2); chunk >= 1; chunk /= 2) {
            for (size_t i = 0; i < records.size();) {
                std::vector<Record> fewer;
                for (size_t j = 0; j < records.size(); ++j)
                    if (j < i || j >= i + chunk) fewer.push_back(records[j]);
                if (fewer.size() < records.size() && fails(fewer)) {
                    records = std::move(fewer);
                    progress = true;
                } else {
                    i += chunk;
                }
            }
            if (chunk == 1) break;
        }
    }
    return records;
}

namespace {

std::string quoted(const std::string& s) {
    std::string out = "\"";
    for (char c : s) {
        if (c == '\\' || c == '"') out += '\\';
        out += c;
    }
    return out + "\"";
}

std::string number(double v) {
    if (std::isnan(v)) return "core::field_missing";
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    return buf;
}

const char* fn_code(core::AggregateFn fn) {
    switch (fn) {
        case core::AggregateFn::count:
            return "core::AggregateFn::count";
        case core::AggregateFn::sum:
            return "core::AggregateFn::sum";
        case core::AggregateFn::min:
            return "core::AggregateFn::min";
        case core::AggregateFn::max:
            return "core::AggregateFn::max";
        case core::AggregateFn::mean:
            return "core::AggregateFn::mean";
        case core::AggregateFn::first:
            return "core::AggregateFn::first";
        case core::AggregateFn::last:
            return "core::AggregateFn::last";
        case core::AggregateFn::variance:
            return "core::AggregateFn::variance";
        case core::AggregateFn::stddev:
            return "core::AggregateFn::stddev";
        case core::AggregateFn::quantile:
            return "core::AggregateFn::quantile";
    }
    return "?";
}

}  // namespace

std::string spec_code(const core::PipelineSpec& s) {
    const char* types[] = {"tumbling", "hopping", "session"};
    std::string c = "core::PipelineSpec spec;\n";
    c += "spec.name = " + quoted(s.name) + ";\n";
    c += "spec.fields = {";
    for (size_t i = 0; i < s.fields.size(); ++i)
        c += (i ? ", " : "") + quoted(s.fields[i]);
    c += "};\n";
    c += std::string("spec.window.type = core::WindowType::") +
         types[static_cast<int>(s.window.type)] + ";\n";
    c += "spec.window.size_ms = " + std::to_string(s.window.size_ms) + ";\n";
    c += "spec.window.offset_ms = " + std::to_string(s.window.offset_ms) + ";\n";
    c += "spec.window.advance_ms = " + std::to_string(s.window.advance_ms) + ";\n";
    c += "spec.window.gap_ms = " + std::to_string(s.window.gap_ms) + ";\n";
    c += "spec.window.max_duration_ms = " + std::to_string(s.window.max_duration_ms) + ";\n";
    c += "spec.watermark.delay_ms = " + std::to_string(s.watermark.delay_ms) + ";\n";
    c += "spec.watermark.idle_timeout_ms = " + std::to_string(s.watermark.idle_timeout_ms) + ";\n";
    c += "spec.watermark.max_future_ms = " + std::to_string(s.watermark.max_future_ms) + ";\n";
    c += std::string("spec.watermark.scope = core::WatermarkScope::") +
         (s.watermark.scope == core::WatermarkScope::global ? "global" : "partition") + ";\n";
    c += "spec.late.allowed_lateness_ms = " + std::to_string(s.late.allowed_lateness_ms) + ";\n";
    c += std::string("spec.late.too_late = core::TooLate::") +
         (s.late.too_late == core::TooLate::drop ? "drop" : "side_output") + ";\n";
    c += std::string("spec.late.corrections = core::Corrections::") +
         (s.late.corrections == core::Corrections::upsert ? "upsert" : "retract") + ";\n";
    c += "spec.limits.keys_max = " + std::to_string(s.limits.keys_max) + ";\n";
    c += "spec.limits.open_windows_max = " + std::to_string(s.limits.open_windows_max) + ";\n";
    c += "spec.aggregates = {";
    for (size_t i = 0; i < s.aggregates.size(); ++i) {
        const auto& a = s.aggregates[i];
        c += std::string(i ? ",\n    " : "") + "{" + quoted(a.name) + ", " + fn_code(a.fn) + ", " +
             std::to_string(a.field) + ", " + number(a.q) + "}";
    }
    c += "};\n";
    return c;
}

std::string records_code(const std::vector<Record>& records) {
    // Times relative to the first record read more easily; base_ms is what the generator uses.
    std::string c = "std::vector<model::Record> records = {\n";
    for (const auto& r : records) {
        if (r.tick) {
            c += "    {true, " + std::to_string(r.ingest_ms) + ", \"\", \"\", 0, 0, {}},\n";
            continue;
        }
        c += "    {false, " + std::to_string(r.ingest_ms) + ", " + quoted(r.key) + ", " +
             quoted(r.partition) + ", " + std::to_string(r.event_ms) + ", " +
             std::to_string(r.order) + ", {";
        for (size_t i = 0; i < r.fields.size(); ++i)
            c += (i ? ", " : "") + number(r.fields[i]);
        c += "}},\n";
    }
    return c + "};\n";
}

namespace {

std::optional<std::string> differs_here(const core::PipelineSpec& spec,
                                        const std::vector<Record>& records) {
    try {
        auto model = run_model(spec, records);
        auto engine = run_engine(spec, records);
        return compare(spec, engine, model);
    } catch (const std::exception& e) {
        return std::string("exception: ") + e.what();
    }
}

// Runs `check` in a child process, so that an engine that crashes is a failure to report (and
// shrink) like any other instead of the end of the test. TIDEMARK_NO_FORK=1 runs it here, for
// a debugger.
std::optional<std::string> in_child(const std::function<std::optional<std::string>()>& check) {
    if (std::getenv("TIDEMARK_NO_FORK")) return check();
    int fds[2];
    if (pipe(fds) != 0) return check();
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return check();
    }
    if (pid == 0) {
        close(fds[0]);
        // The test framework's crash handlers would report the child as the test failing.
        for (int sig : {SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL})
            signal(sig, SIG_DFL);
        std::optional<std::string> diff;
        try {
            diff = check();
        } catch (const std::exception& e) {
            diff = std::string("exception: ") + e.what();
        }
        std::string msg = diff ? "D" + *diff : "S";
        for (size_t off = 0; off < msg.size();) {
            ssize_t n = write(fds[1], msg.data() + off, msg.size() - off);
            if (n <= 0) break;
            off += static_cast<size_t>(n);
        }
        _exit(0);
    }
    close(fds[1]);
    std::string msg;
    char buf[4096];
    for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;)
        msg.append(buf, static_cast<size_t>(n));
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (WIFSIGNALED(status))
        return "the process crashed (signal " + std::to_string(WTERMSIG(status)) + ")";
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || msg.empty())
        return "the process ended with status " + std::to_string(WEXITSTATUS(status));
    if (msg[0] == 'S') return std::nullopt;
    return msg.substr(1);
}

std::optional<std::string> differs(const core::PipelineSpec& spec,
                                   const std::vector<Record>& records) {
    return in_child([&] { return differs_here(spec, records); });
}

}  // namespace

// Engine and model side by side, record by record: what each emitted and their counters.
std::string side_by_side(const core::PipelineSpec& spec, const std::vector<Record>& records) {
    std::string out = "trace (e: engine, m: model):\n";
    try {
        auto engine_or = core::Engine::create(scenario_node, {spec});
        if (!engine_or) return out + "create failed\n";
        auto& engine = *engine_or;
        ReferenceModel model(scenario_node, spec);
        test::Recorder rec;
        size_t seen_engine = 0, seen_model = 0, seen_side = 0, seen_model_side = 0;
        for (const auto& r : records) {
            out += r.tick ? "  tick " + std::to_string(r.ingest_ms) + "\n"
                          : "  event ingest " + std::to_string(r.ingest_ms) + " key " + r.key +
                                " partition " + r.partition + " t " + std::to_string(r.event_ms) +
                                " order " + std::to_string(r.order) + "\n";
            engine->advance(r.ingest_ms, rec);
            if (!r.tick) {
                core::Event ev;
                ev.key = r.key;
                ev.partition = r.partition.empty() ? std::string_view(r.key) : r.partition;
                ev.event_ms = r.event_ms;
                ev.ingest_ms = r.ingest_ms;
                ev.order = r.order;
                ev.fields = std::span<const double>(r.fields.data(), r.fields.size());
                ev.topic = "t";
                ev.payload = "{}";
                engine->process(0, ev, rec);
            }
            model.step(r);
            for (; seen_engine < rec.out.size(); ++seen_engine)
                out += "    e " + rec.out[seen_engine].text + "\n";
            for (; seen_model < model.emissions.size(); ++seen_model)
                out += "    m " + emission_text(model.emissions[seen_model]) + "\n";
            for (; seen_side < rec.side.size(); ++seen_side)
                out += "    e side " + rec.side[seen_side].reason + "\n";
            for (; seen_model_side < model.side.size(); ++seen_model_side)
                out += "    m side " + model.side[seen_model_side].reason + "\n";
            const auto& es = engine->stats(0);
            const auto& ms = model.stats;
            auto line = [](uint64_t keys, uint64_t active, uint64_t idle, uint64_t late,
                           uint64_t refused, uint64_t partial) {
                return "keys " + std::to_string(keys) + " partitions " + std::to_string(active) +
                       "+" + std::to_string(idle) + " idle, too_late " + std::to_string(late) +
                       " refused " + std::to_string(refused) + " partial " +
                       std::to_string(partial);
            };
            std::string e = line(es.keys, es.partitions_active, es.partitions_idle, es.too_late,
                                 es.keys_refused, partial_count(es).value_or(0));
            std::string m = line(ms.keys, ms.partitions_active, ms.partitions_idle, ms.too_late,
                                 ms.keys_refused, ms.too_late_partial);
            out += e == m ? "    = " + e + "\n" : "    e " + e + "\n    m " + m + "\n";
        }
    } catch (const std::exception& e) {
        out += std::string("exception: ") + e.what() + "\n";
    }
    return out;
}

std::optional<std::string> engine_differs(const core::PipelineSpec& spec,
                                          const std::vector<Record>& records) {
    return differs(spec, records);
}

std::optional<std::string> differential_failure(uint64_t seed, bool minimise) {
    Scenario sc = generate_scenario(seed);
    auto first = differs(sc.spec, sc.records);
    if (!first) return std::nullopt;
    if (!minimise)
        return "seed " + std::to_string(seed) + " (" + sc.family + ", " +
               std::to_string(sc.records.size()) + " records)\n" + *first + "\n";
    // A crash stays a crash and a difference a difference, so that a crash found while
    // shrinking does not hide the difference being minimised.
    auto crashed = [](const std::optional<std::string>& d) {
        return d && d->starts_with("the process");
    };
    auto minimal = shrink(sc.records, [&](const std::vector<Record>& r) {
        auto d = differs(sc.spec, r);
        return d && crashed(d) == crashed(first);
    });
    auto last = differs(sc.spec, minimal);
    std::string report =
        "seed " + std::to_string(seed) + " (" + sc.family + ", " +
        std::to_string(sc.records.size()) + " records)\n" + *first + "\n" + "minimised to " +
        std::to_string(minimal.size()) + " records: " + (last ? *last : std::string("?")) + "\n" +
        spec_code(sc.spec) + records_code(minimal) +
        (last && last->starts_with("the process") ? std::string() : side_by_side(sc.spec, minimal));
    return report;
}

namespace {

// Why the run with `options` differs from the uncut run, or nullopt.
std::optional<std::string> restore_difference(const core::PipelineSpec& spec,
                                              const std::vector<Record>& records,
                                              const RunOptions& options) {
    EngineRun uncut = run_engine(spec, records);
    EngineRun cut = run_engine(spec, records, options);
    if (!cut.error.empty()) return cut.error;
    if (cut.lines != uncut.lines) {
        size_t i = 0;
        while (i < cut.lines.size() && i < uncut.lines.size() && cut.lines[i] == uncut.lines[i])
            ++i;
        return "output differs at emission #" + std::to_string(i) +
               "\n  uncut: " + (i < uncut.lines.size() ? uncut.lines[i] : std::string("(none)")) +
               "\n  cut:   " + (i < cut.lines.size() ? cut.lines[i] : std::string("(none)"));
    }
    const auto& a = uncut.stats;
    const auto& b = cut.stats;
    std::string counters;
    auto check = [&](const char* name, uint64_t x, uint64_t y) {
        if (x != y)
            counters += std::string(" ") + name + " uncut " + std::to_string(x) + " cut " +
                        std::to_string(y) + ";";
    };
    check("too_late", a.too_late, b.too_late);
    check("late_updated", a.late_updated, b.late_updated);
    check("keys_refused", a.keys_refused, b.keys_refused);
    check("clamped", a.clamped, b.clamped);
    check("events_in", a.events_in, b.events_in);
    check("side_outputs", a.side_outputs, b.side_outputs);
    check("keys", a.keys, b.keys);
    check("partitions_active", a.partitions_active, b.partitions_active);
    check("partitions_idle", a.partitions_idle, b.partitions_idle);
    if (!counters.empty()) return "counters differ after restore:" + counters;
    if (cut.side.size() != uncut.side.size())
        return std::string("side output differs after restore");
    return std::nullopt;
}

std::string index_list(const std::set<size_t>& s) {
    std::string r;
    for (size_t x : s)
        r += " " + std::to_string(x);
    return r;
}

// Drops records (and the checkpoints that do not matter) while the restored run still differs;
// the record indices of the options move with the records.
std::pair<std::vector<Record>, RunOptions> shrink_restore(const core::PipelineSpec& spec,
                                                          std::vector<Record> records,
                                                          RunOptions options) {
    // The same kind of difference (output, counters, ...), so that shrinking keeps to it.
    auto kind = [](const std::string& why) { return why.substr(0, why.find(' ', 8)); };
    const std::string wanted = kind(restore_difference(spec, records, options).value_or(""));
    auto fails = [&](const std::vector<Record>& r, const RunOptions& o) {
        auto d = in_child([&] { return restore_difference(spec, r, o); });
        return d && kind(*d) == wanted;
    };
    auto without = [](const std::set<size_t>& in, size_t from, size_t count, bool keep) {
        std::set<size_t> out;
        for (size_t x : in) {
            if (x < from)
                out.insert(x);
            else if (x >= from + count)
                out.insert(x - count);
            else if (keep && from > 0)
                out.insert(from - 1);
        }
        return out;
    };
    for (bool progress = true; progress;) {
        progress = false;
        for (size_t chunk = std::max<size_t>(1, records.size() / 2); chunk >= 1; chunk /= 2) {
            for (size_t i = 0; i + chunk <= records.size();) {
                std::vector<Record> fewer(records.begin(), records.begin() + i);
                fewer.insert(fewer.end(), records.begin() + i + chunk, records.end());
                RunOptions o;
                o.cut_after = without(options.cut_after, i, chunk, true);
                o.checkpoint_after = without(options.checkpoint_after, i, chunk, true);
                o.failed_checkpoint_after =
                    without(options.failed_checkpoint_after, i, chunk, true);
                if (!o.cut_after.empty() && fails(fewer, o)) {
                    records = std::move(fewer);
                    options = std::move(o);
                    progress = true;
                } else {
                    i += chunk;
                }
            }
            if (chunk == 1) break;
        }
        for (size_t x : std::set<size_t>(options.checkpoint_after)) {
            RunOptions o = options;
            o.checkpoint_after.erase(x);
            if (fails(records, o)) {
                options = std::move(o);
                progress = true;
            }
        }
    }
    return {records, options};
}

std::optional<std::string> restore_failure_here(uint64_t seed, bool with_failed_checkpoint,
                                                bool minimise) {
    Scenario sc = generate_scenario(seed);
    if (sc.records.size() < 3) return std::nullopt;
    Rng rng(seed ^ 0x5EEDCAFEull);
    const size_t n = sc.records.size();
    // Cuts right around idle transitions, where the model saw a partition go idle, the
    // pipeline go all-idle, or an idle partition come back.
    std::vector<size_t> interesting;
    {
        ReferenceModel model(scenario_node, sc.spec);
        auto idle_events = [&] {
            uint64_t count = 0;
            for (const char* name :
                 {"global: all idle", "global: idle transition moves W", "partition: goes idle",
                  "partition: idle one reactivated", "partition: forgotten"}) {
                auto it = model.coverage.find(name);
                if (it != model.coverage.end()) count += it->second;
            }
            return count;
        };
        uint64_t before = 0;
        for (size_t i = 0; i < n; ++i) {
            model.step(sc.records[i]);
            uint64_t after = idle_events();
            if (after != before) {
                if (i > 0) interesting.push_back(i - 1);
                interesting.push_back(i);
            }
            before = after;
        }
    }
    // The model has no open_windows_max (the differential keeps it out of reach); cut against
    // uncut needs none, so here a quarter of the seeds reach it: windows refused, keys created
    // and removed again in one event, partitions new then, checkpoints around them. Its own
    // generator, so the cuts a seed names stay where they were.
    Rng limits(seed ^ 0x0BE1D0F5ull);
    if (limits.chance(25))
        sc.spec.limits.open_windows_max = static_cast<uint64_t>(limits.range(1, 12));
    for (int attempt = 0; attempt < 3; ++attempt) {
        RunOptions options;
        int cuts = static_cast<int>(rng.range(1, 3));  // chained when more than one
        for (int c = 0; c < cuts; ++c) {
            size_t at = !interesting.empty() && rng.chance(50)
                            ? rng.pick(interesting)
                            : static_cast<size_t>(rng.range(0, static_cast<int64_t>(n) - 2));
            options.cut_after.insert(at);
        }
        int checkpoints = static_cast<int>(rng.range(0, 6));
        for (int c = 0; c < checkpoints; ++c)
            options.checkpoint_after.insert(
                static_cast<size_t>(rng.range(0, static_cast<int64_t>(n) - 1)));
        if (with_failed_checkpoint) {
            // A checkpoint that did not commit, then a later one that did, then the cut there.
            size_t failed = static_cast<size_t>(rng.range(0, static_cast<int64_t>(n) - 3));
            size_t cut = static_cast<size_t>(
                rng.range(static_cast<int64_t>(failed) + 1, static_cast<int64_t>(n) - 2));
            options = {};
            if (rng.chance(50))
                options.checkpoint_after.insert(
                    static_cast<size_t>(rng.range(0, static_cast<int64_t>(failed))));
            options.failed_checkpoint_after.insert(failed);
            options.cut_after.insert(cut);
        }
        auto why = restore_difference(sc.spec, sc.records, options);
        if (!why) continue;
        std::string report =
            "seed " + std::to_string(seed) + " (" + sc.family + ", " + std::to_string(n) +
            " records) cut after records" + index_list(options.cut_after) + ", checkpoints after" +
            index_list(options.checkpoint_after) + ", failed checkpoint after" +
            index_list(options.failed_checkpoint_after) + ": " + *why + "\n" + spec_code(sc.spec);
        if (!minimise) return report;
        auto [records, small] = shrink_restore(sc.spec, sc.records, options);
        auto last = restore_difference(sc.spec, records, small);
        return report + "minimised to " + std::to_string(records.size()) +
               " records (indices count records from 0; checkpoint, and cut, after them): cut " +
               "after" + index_list(small.cut_after) + ", checkpoints after" +
               index_list(small.checkpoint_after) + ", failed checkpoint after" +
               index_list(small.failed_checkpoint_after) + ": " + (last ? *last : "?") + "\n" +
               records_code(records);
    }
    return std::nullopt;
}

}  // namespace

std::optional<std::string> restore_failure(uint64_t seed, bool with_failed_checkpoint,
                                           bool minimise) {
    auto failure =
        in_child([&] { return restore_failure_here(seed, with_failed_checkpoint, minimise); });
    if (failure && failure->starts_with("the process"))
        return "seed " + std::to_string(seed) + ": " + *failure + "\n";
    return failure;
}

uint64_t seeds_from_env(uint64_t default_count) {
    const char* v = std::getenv("TIDEMARK_SEEDS");
    return v ? std::strtoull(v, nullptr, 10) : default_count;
}

uint64_t seed_base_from_env() {
    const char* v = std::getenv("TIDEMARK_SEED_BASE");
    return v ? std::strtoull(v, nullptr, 10) : 1;
}

}  // namespace tidemark::model
