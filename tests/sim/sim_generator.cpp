#include "tests/sim/sim_generator.h"

#include <algorithm>

#include "tests/sim/sim_config.h"
#include "tests/sim/sim_families.h"

namespace tidemark::sim {
namespace {

using Window = PipelineDef::Window;

// Each aims at one place where features meet (issue 24); "mixed" draws everything at random.
// versions_outage: two versions of a pipeline in the outbox while the upstream is down, with
// late events and compaction. fast_clock: a device minutes ahead, forgotten, then new devices
// (scope partition). session_cut: sessions cut at max_duration with late events near their
// start. failed_reload: a reload that fails on a damaged state entry while a backfill runs or
// a pipeline is removed. long_keys: keys and partitions near and over their limits. rerun: a
// version run again (revert, then the same change) with backfill.from. crash_after_reload: a
// reload applied, then a crash before the next checkpoint.
const std::vector<std::string> family_names = {"mixed",       "versions_outage",   "fast_clock",
                                               "session_cut", "failed_reload",     "long_keys",
                                               "rerun",       "crash_after_reload"};

}  // namespace

PipelineDef random_def(Rng& rng, const std::string& name) {
    PipelineDef d;
    d.name = name;
    switch (rng.below(3)) {
        case 0:
            d.window = Window::tumbling;
            d.size_ms = rng.pick(std::vector<int64_t>{20'000, 30'000, 60'000});
            d.offset_ms = rng.chance(0.3) ? 10'000 : 0;
            break;
        case 1:
            d.window = Window::hopping;
            d.size_ms = rng.pick(std::vector<int64_t>{60'000, 120'000});
            d.advance_ms = rng.pick(std::vector<int64_t>{20'000, 30'000});
            break;
        default:
            d.window = Window::session;
            d.gap_ms = rng.pick(std::vector<int64_t>{20'000, 30'000, 60'000});
            d.max_duration_ms = d.gap_ms * rng.range(2, 4);
            break;
    }
    d.delay_ms = rng.pick(std::vector<int64_t>{0, 5'000, 15'000});
    d.idle_timeout_ms = rng.pick(std::vector<int64_t>{30'000, 60'000, 120'000});
    d.max_future_ms = rng.chance(0.8) ? 10 * minute_ms : minute_ms;
    d.scope_partition = rng.chance(0.4);
    d.partition_by_site = rng.chance(0.3);
    d.lateness_ms = rng.pick(std::vector<int64_t>{0, 20'000, 60'000, 180'000, 600'000});
    d.side_output = rng.chance(0.3);
    d.retract = rng.chance(0.4);
    d.aggregates = static_cast<int>(rng.below(32));
    if (rng.chance(0.15)) d.backfill_from_age_ms = rng.range(2, 8) * minute_ms;
    return d;
}

// A changed definition: one or two of its parts drawn again (a new version, usually).
PipelineDef mutate(Rng& rng, const PipelineDef& from) {
    PipelineDef d = from;
    const PipelineDef fresh = random_def(rng, from.name);
    for (int n = static_cast<int>(rng.range(1, 2)); n > 0; --n) {
        switch (rng.below(8)) {
            case 0:
                d.window = fresh.window;
                d.size_ms = fresh.size_ms;
                d.offset_ms = fresh.offset_ms;
                d.advance_ms = fresh.advance_ms;
                d.gap_ms = fresh.gap_ms;
                d.max_duration_ms = fresh.max_duration_ms;
                break;
            case 1:
                d.delay_ms = fresh.delay_ms;
                break;
            case 2:
                d.lateness_ms = fresh.lateness_ms;
                break;
            case 3:
                d.retract = !d.retract;
                break;
            case 4:
                d.aggregates = fresh.aggregates;
                break;
            case 5:
                d.scope_partition = !d.scope_partition;
                break;
            case 6:
                d.idle_timeout_ms = fresh.idle_timeout_ms;
                break;
            default:
                d.keys_max = d.keys_max == 200 ? 150 : 200;
                break;  // in place
        }
    }
    if (rng.chance(0.2)) d.backfill_from_age_ms = fresh.backfill_from_age_ms;
    return d;
}

Device regular_device(Rng& rng, int index, int64_t end_ms) {
    Device d;
    d.name = "d" + std::to_string(index);
    d.site = "s" + std::to_string(index % 3);
    d.skew_ms = rng.range(-3'000, 3'000);
    d.period_ms = rng.range(6, 30) * second_ms;
    d.jitter_ms = rng.range(0, 8) * second_ms;
    if (rng.chance(0.6)) {
        d.late_chance = 0.06;
        d.late_min_ms = 20 * second_ms;
        d.late_max_ms = rng.range(1, 4) * minute_ms;
    }
    d.malformed_chance = rng.chance(0.3) ? 0.03 : 0;
    int64_t from = rng.chance(0.3) ? rng.range(0, end_ms / 2) : 0;
    int64_t to = rng.chance(0.3) ? rng.range(from + end_ms / 4, end_ms) : end_ms;
    if (rng.chance(0.25) && to - from > 8 * minute_ms) {
        // A silence long enough for the device to be forgotten, then it comes back.
        const int64_t quiet = rng.range(from + minute_ms, to - 6 * minute_ms);
        d.online = {{from, quiet}, {quiet + rng.range(4, 6) * minute_ms, to}};
    } else {
        d.online = {{from, to}};
    }
    return d;
}

namespace {

void add_messages(Rng& rng, Scenario& s) {
    const int64_t end_ms = s.ticks * tick_ms;
    for (size_t i = 0; i < s.devices.size(); ++i) {
        const Device& d = s.devices[i];
        for (const auto& [from, to] : d.online) {
            for (int64_t t = from + rng.range(0, d.period_ms); t < to;
                 t += std::max<int64_t>(
                     second_ms, d.period_ms + rng.range(-d.period_ms / 5, d.period_ms / 5))) {
                Message m;
                m.device = static_cast<int>(i);
                m.event_ms = s.t0_ms + t + d.skew_ms;
                m.value = rng.range(-50, 100);
                m.arrival_ms = t + rng.range(0, d.jitter_ms);
                if (rng.chance(d.late_chance))
                    m.arrival_ms += rng.range(d.late_min_ms, d.late_max_ms);
                if (rng.chance(d.malformed_chance))
                    m.shape =
                        rng.chance(0.5) ? Message::Shape::no_timestamp : Message::Shape::not_json;
                else if (rng.chance(0.02))
                    m.shape = Message::Shape::other_topic;
                if (m.arrival_ms < end_ms) s.messages.push_back(m);
            }
        }
    }
    std::stable_sort(s.messages.begin(), s.messages.end(), [](const Message& a, const Message& b) {
        return a.arrival_ms < b.arrival_ms;
    });
}

// The next config: a reload's change to one pipeline (changed, reverted, removed, added back
// or new, or limits only), from the history of definitions each name had.
ConfigState next_config(Rng& rng, const ConfigState& now,
                        std::vector<std::vector<PipelineDef>>& history) {
    ConfigState c = now;
    const auto index_of = [](const std::string& name) { return name[0] - 'a'; };
    const uint64_t what = rng.below(10);
    if (what < 4 || (c.pipelines.size() == 1 && what < 6)) {
        PipelineDef& p = c.pipelines[rng.below(c.pipelines.size())];
        p = mutate(rng, p);
    } else if (what < 6) {
        PipelineDef& p = c.pipelines[rng.below(c.pipelines.size())];
        p = rng.pick(history[static_cast<size_t>(index_of(p.name))]);  // reverted
    } else if (what < 8 && c.pipelines.size() > 1) {
        c.pipelines.erase(c.pipelines.begin() +
                          static_cast<ptrdiff_t>(rng.below(c.pipelines.size())));
    } else {
        for (const std::string name : {"a", "b", "c"}) {
            if (std::any_of(c.pipelines.begin(), c.pipelines.end(),
                            [&](const PipelineDef& p) { return p.name == name; }))
                continue;
            const auto& h = history[static_cast<size_t>(index_of(name))];
            c.pipelines.push_back(!h.empty() && rng.chance(0.6) ? rng.pick(h)
                                                                : random_def(rng, name));
            break;
        }
    }
    std::sort(c.pipelines.begin(), c.pipelines.end(),
              [](const PipelineDef& x, const PipelineDef& y) { return x.name < y.name; });
    for (const PipelineDef& p : c.pipelines)
        history[static_cast<size_t>(index_of(p.name))].push_back(p);
    return c;
}

}  // namespace

const std::vector<std::string>& families() {
    return family_names;
}

Scenario generate(uint64_t seed) {
    Rng rng(seed);
    Scenario s;
    s.seed = seed;
    s.family = family_names[seed % family_names.size()];
    s.t0_ms = 1'764'000'000'000 + static_cast<int64_t>(rng.below(1440)) * minute_ms +
              static_cast<int64_t>(rng.below(60'000));
    s.ticks = rng.range(120, 200);
    const int64_t end_ms = s.ticks * tick_ms;
    s.step_every = static_cast<int>(rng.range(1, 3));
    s.step_records_max = static_cast<int>(rng.pick(std::vector<int64_t>{16, 64, 256}));
    s.backfill_steps = static_cast<int>(rng.range(1, 2));
    s.backfill_records_max = static_cast<int>(rng.pick(std::vector<int64_t>{4, 8, 32}));
    s.checkpoint_every = static_cast<int>(rng.range(1, 6));
    s.upstream_batch_max = static_cast<int>(rng.range(1, 40));
    s.upstream_pump_chance = rng.chance(0.5) ? 0.9 : 0.4;
    s.redeliveries_max = static_cast<int>(rng.range(0, 4));

    const int regular = static_cast<int>(rng.range(3, 5));
    for (int i = 0; i < regular; ++i)
        s.devices.push_back(regular_device(rng, i, end_ms));

    ConfigState first;
    first.compact_superseded = rng.chance(0.5);
    const int pipelines = static_cast<int>(rng.range(1, 3));
    for (int i = 0; i < pipelines; ++i)
        first.pipelines.push_back(random_def(rng, std::string(1, static_cast<char>('a' + i))));
    std::vector<std::vector<PipelineDef>> history(3);

    // The family's own shape first (it may replace the first config and add ops), then the
    // general events over the whole run.
    s.configs.push_back(first);
    shape_family(rng, s, history);
    for (const PipelineDef& p : s.configs[0].pipelines)
        history[static_cast<size_t>(p.name[0] - 'a')].push_back(p);

    const int reloads = static_cast<int>(s.family == "mixed" ? rng.range(1, 5) : rng.range(0, 1));
    for (int i = 0; i < reloads; ++i) {
        Op op;
        op.tick = rng.range(5, s.ticks - 20);
        const uint64_t kind = rng.below(20);
        op.kind = kind < 2   ? OpKind::fail_reload_checkpoint
                  : kind < 4 ? OpKind::damage_reload
                             : OpKind::reload;
        op.pick = rng.next();
        op.config = -2;  // the next config, resolved below
        s.ops.push_back(op);
    }
    // versions_outage keeps its outage whole and its rows unclaimed (a start claims them).
    const bool quiet = s.family == "versions_outage";
    for (int i = quiet ? 0 : static_cast<int>(rng.range(0, 3)); i > 0; --i) {
        Op op;
        op.tick = rng.range(2, s.ticks - 5);
        op.kind = OpKind::restart;
        op.pick = rng.next();
        op.config = rng.chance(0.3) ? -2 : -1;  // -1: the config it runs now
        s.ops.push_back(op);
    }
    for (int i = quiet ? 0 : static_cast<int>(rng.range(0, 2)); i > 0; --i) {
        const int64_t down = rng.range(1, s.ticks - 10);
        s.ops.push_back({down, OpKind::upstream_down, -1, 0});
        s.ops.push_back(
            {std::min(s.ticks - 1, down + rng.range(5, 60)), OpKind::upstream_up, -1, 0});
    }
    if (rng.chance(0.4))
        s.ops.push_back({rng.range(3, s.ticks - 3), OpKind::fail_checkpoint, -1, 0});
    std::stable_sort(s.ops.begin(), s.ops.end(),
                     [](const Op& a, const Op& b) { return a.tick < b.tick; });
    // In tick order: an op of the family names its config; a general reload (or a restart with
    // a change) gets one drawn from the config running at that moment; a restart without a
    // change names the running one.
    int current = 0;
    for (Op& op : s.ops) {
        if (op.config >= 0) {
            current = op.config;
        } else if (op.config == -2) {
            s.configs.push_back(next_config(rng, s.configs[static_cast<size_t>(current)], history));
            op.config = current = static_cast<int>(s.configs.size()) - 1;
            if (op.kind == OpKind::restart && rng.chance(0.5))
                s.configs.back().compact_superseded = !s.configs.back().compact_superseded;
        } else if (op.kind == OpKind::restart) {
            op.config = current;
        }
    }
    add_messages(rng, s);
    return s;
}

std::string describe(const Scenario& s) {
    std::string out = "seed " + std::to_string(s.seed) + " family " + s.family + ", " +
                      std::to_string(s.ticks) + " ticks of " + std::to_string(tick_ms) + " ms, " +
                      std::to_string(s.messages.size()) + " messages\n";
    for (const Device& d : s.devices) {
        out += "  device " + (d.name.size() > 24 ? d.name.substr(0, 20) + "...(" +
                                                       std::to_string(d.name.size()) + " bytes)"
                                                 : d.name);
        out += " skew " + std::to_string(d.skew_ms) + " ms, period " +
               std::to_string(d.period_ms / 1000) + " s, online";
        for (const auto& [a, b] : d.online)
            out += " [" + std::to_string(a / 1000) + "s," + std::to_string(b / 1000) + "s)";
        out += "\n";
    }
    for (size_t i = 0; i < s.configs.size(); ++i) {
        out += "  config " + std::to_string(i) +
               (s.configs[i].compact_superseded ? " (compaction)" : "") + "\n";
        for (const PipelineDef& p : s.configs[i].pipelines)
            out += "    " + describe(p) + "\n";
    }
    static const char* names[] = {"reload",       "restart",         "upstream_down",
                                  "upstream_up",  "fail_checkpoint", "fail_reload_checkpoint",
                                  "damage_reload"};
    for (const Op& op : s.ops)
        out += "  tick " + std::to_string(op.tick) + ": " + names[static_cast<int>(op.kind)] +
               (op.config >= 0 ? " config " + std::to_string(op.config) : "") + "\n";
    return out;
}

}  // namespace tidemark::sim
