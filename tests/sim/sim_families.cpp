// The shape of each family (sim_generator.cpp lists them with what they aim at). Each sets up
// the meeting of features it is named for so that a few hundred seeds reach it many times;
// the general events the generator adds around it keep the rest random.
#include <algorithm>

#include "tests/sim/sim_families.h"

namespace tidemark::sim {
namespace {

using Window = PipelineDef::Window;

struct Shaper {
    Rng& rng;
    Scenario& s;
    std::vector<std::vector<PipelineDef>>& history;

    int add_config(ConfigState c) {
        std::sort(c.pipelines.begin(), c.pipelines.end(),
                  [](const PipelineDef& x, const PipelineDef& y) { return x.name < y.name; });
        for (const PipelineDef& p : c.pipelines)
            history[static_cast<size_t>(p.name[0] - 'a')].push_back(p);
        s.configs.push_back(std::move(c));
        return static_cast<int>(s.configs.size()) - 1;
    }
    void op(int64_t tick, OpKind kind, int config = -1, uint64_t pick = 0) {
        s.ops.push_back({std::min(tick, s.ticks - 2), kind, config, pick});
    }
    ConfigState& first() { return s.configs[0]; }
    void ensure_pipelines(size_t n) {
        for (size_t i = first().pipelines.size(); i < n; ++i)
            first().pipelines.push_back(
                random_def(rng, std::string(1, static_cast<char>('a' + i))));
    }
    Device device(const std::string& name, int64_t from_ms, int64_t to_ms) {
        Device d = regular_device(rng, static_cast<int>(s.devices.size()), s.ticks * tick_ms);
        d.name = name;
        d.online = {{from_ms, to_ms}};
        d.malformed_chance = 0;
        return d;
    }

    // Live U with a long lateness and a backfilling V with a short one, both firing the same
    // windows into an outbox nobody reads, late events re-firing U's: compaction by window
    // alone deletes one version's rows with the other's.
    void versions_outage() {
        first().compact_superseded = true;
        PipelineDef& u = first().pipelines[0];
        u.window = Window::tumbling;
        u.size_ms = rng.chance(0.5) ? 20'000 : 30'000;
        u.offset_ms = 0;
        u.lateness_ms = rng.range(5, 10) * minute_ms;
        u.backfill_from_age_ms.reset();
        // Readings minutes late: U re-fires windows the backfill of V has long passed.
        for (Device& d : s.devices) {
            d.late_chance = 0.3;
            d.late_min_ms = 30 * second_ms;
            d.late_max_ms = 4 * minute_ms;
        }
        s.backfill_records_max = static_cast<int>(rng.range(2, 3));
        const int64_t down = rng.range(10, 30);
        ConfigState c = first();
        // V: the same windows, a shorter lateness or other aggregates (both re-fire then).
        if (rng.chance(0.5))
            c.pipelines[0].lateness_ms = rng.chance(0.5) ? minute_ms : 20'000;
        else
            c.pipelines[0].aggregates = (u.aggregates + 1 + static_cast<int>(rng.below(30))) % 32;
        if (rng.chance(0.3)) c.pipelines[0].retract = !c.pipelines[0].retract;
        const int64_t reload = down + rng.range(2, 10);
        op(down, OpKind::upstream_down);
        op(reload, OpKind::reload, add_config(c));
        op(reload + rng.range(30, 80), OpKind::upstream_up);
    }

    // A device minutes ahead (under max_future) goes quiet and is forgotten; devices that
    // start after that must not be late because of it (scope partition).
    void fast_clock() {
        PipelineDef& a = first().pipelines[0];
        a.scope_partition = true;
        a.partition_by_site = false;
        a.window = Window::tumbling;
        a.size_ms = rng.chance(0.5) ? 30'000 : 60'000;
        a.offset_ms = 0;
        a.idle_timeout_ms = rng.chance(0.5) ? 30'000 : 60'000;
        a.lateness_ms = rng.pick(std::vector<int64_t>{0, 60'000, 120'000, 600'000});
        a.max_future_ms = 10 * minute_ms;
        a.delay_ms = rng.chance(0.5) ? 0 : 5'000;
        a.backfill_from_age_ms.reset();
        const int64_t quiet = rng.range(60, 180) * second_ms;
        Device fast = device("fast", 0, quiet);
        fast.skew_ms = rng.range(300, 560) * second_ms;
        fast.period_ms = 10 * second_ms;
        fast.late_chance = 0;
        s.devices.push_back(fast);
        const int64_t forgotten = quiet + a.idle_timeout_ms + a.size_ms + a.lateness_ms;
        const int64_t arrive = forgotten + rng.range(30, 120) * second_ms;
        s.ticks = std::max(s.ticks, (arrive + 4 * minute_ms) / tick_ms);
        for (int i = 0; i < 2; ++i) {
            Device d =
                device("new" + std::to_string(i), arrive + i * 20 * second_ms, s.ticks * tick_ms);
            d.late_chance = 0;
            s.devices.push_back(d);
        }
    }

    // Sessions cut at max_duration by a device that never pauses, and readings sent a
    // session or two late: some overlap a fired session they cannot join.
    void session_cut() {
        PipelineDef& a = first().pipelines[0];
        a.window = Window::session;
        a.gap_ms = 30'000;
        a.max_duration_ms = rng.chance(0.5) ? 60'000 : 90'000;
        a.lateness_ms = rng.chance(0.5) ? 20'000 : 25'000;
        a.delay_ms = rng.chance(0.5) ? 0 : 5'000;
        a.scope_partition = rng.chance(0.7);
        a.idle_timeout_ms = 120'000;
        a.backfill_from_age_ms.reset();
        Device d = device("steady", 0, s.ticks * tick_ms);
        d.period_ms = 5 * second_ms;
        d.jitter_ms = rng.range(0, 2) * second_ms;
        d.late_chance = 0.12;
        d.late_min_ms = 60 * second_ms;
        d.late_max_ms = 150 * second_ms;
        s.devices.push_back(d);
    }

    // A backfill in progress (b changed), then a reload that fails on one damaged state
    // entry, with a change that removes c or changes b again or changes a.
    void failed_reload() {
        ensure_pipelines(3);
        s.backfill_records_max = static_cast<int>(rng.range(2, 6));
        const int64_t t1 = rng.range(15, 30);
        ConfigState c1 = first();
        c1.pipelines[1] = mutate(rng, c1.pipelines[1]);
        if (c1.pipelines[1].window == first().pipelines[1].window &&
            c1.pipelines[1].lateness_ms == first().pipelines[1].lateness_ms)
            c1.pipelines[1].retract = !c1.pipelines[1].retract;  // surely a new version
        ConfigState c2 = c1;
        switch (rng.below(3)) {
            case 0:
                c2.pipelines.erase(c2.pipelines.begin() + 2);
                break;
            case 1:
                c2.pipelines[1] = mutate(rng, c2.pipelines[1]);
                break;
            default:
                c2.pipelines[0] = mutate(rng, c2.pipelines[0]);
                break;
        }
        const int i1 = add_config(c1);
        const int i2 = add_config(c2);
        op(t1, OpKind::reload, i1);
        op(t1 + rng.range(1, 6), OpKind::damage_reload, i2, rng.next());
        if (rng.chance(0.5)) op(t1 + rng.range(8, 20), OpKind::reload, i2);
    }

    // Keys and partitions near and over the decoder's 256 bytes; a partition|key composite
    // of two long parts (scope partition by site) exceeds LMDB's 511-byte keys.
    void long_keys() {
        PipelineDef& a = first().pipelines[0];
        a.scope_partition = true;
        a.partition_by_site = true;
        const int64_t end = s.ticks * tick_ms;
        const auto text = [&](char c, size_t n) {
            std::string t(n, c);
            t += std::to_string(s.devices.size());
            return t.substr(t.size() - n);
        };
        Device both = device(text('k', 250), 0, end);
        both.site = text('p', 250);
        Device over = device(text('o', 257), 0, end);
        Device exact = device(text('e', 256), 0, end);
        exact.site = "s0";
        s.devices.push_back(both);
        s.devices.push_back(over);
        s.devices.push_back(exact);
    }

    // V with backfill.from, switched in; U back; V again within backfill.from: the second
    // run of V starts in the middle of windows the first run sent complete.
    void rerun() {
        PipelineDef& u = first().pipelines[0];
        u.window = Window::tumbling;
        u.size_ms = 60'000;
        u.offset_ms = 0;
        u.backfill_from_age_ms = rng.range(2, 4) * minute_ms;
        PipelineDef v = mutate(rng, u);
        v.window = Window::tumbling;
        v.size_ms = u.size_ms;
        v.lateness_ms = u.lateness_ms == 0 ? 60'000 : 0;  // a new version, surely
        v.backfill_from_age_ms = rng.range(2, 4) * minute_ms;
        s.backfill_records_max = 32;
        ConfigState cv = first();
        cv.pipelines[0] = v;
        const int iv = add_config(cv);
        const int iu = add_config(first());
        const int64_t t1 = rng.range(20, 40);
        const int64_t t2 = t1 + rng.range(15, 25);
        const int64_t t3 = t2 + rng.range(8, 15);
        s.ticks = std::max(s.ticks, t3 + 40);
        op(t1, OpKind::reload, iv);
        op(t2, OpKind::reload, iu);
        op(t3, OpKind::reload, add_config(cv));
    }

    // A reload applied, then a crash before the next checkpoint, then a start with a config
    // that names a removed pipeline again, or the same config with a backfill.from: what the
    // reload did must hold after the crash (it was reported applied).
    void crash_after_reload() {
        ensure_pipelines(2);
        s.checkpoint_every = 6;
        const int64_t t = 6 * rng.range(3, 12) + rng.range(1, 4);  // no checkpoint at t
        ConfigState removed = first();
        ConfigState back = first();
        if (rng.chance(0.5)) {
            removed.pipelines.erase(removed.pipelines.begin() + 1);
            if (rng.chance(0.5)) back.pipelines[1] = mutate(rng, back.pipelines[1]);
        } else {
            removed.pipelines[1] = mutate(rng, removed.pipelines[1]);
            removed.pipelines[1].backfill_from_age_ms = rng.range(1, 3) * minute_ms;
            if (removed.pipelines[1].lateness_ms == first().pipelines[1].lateness_ms)
                removed.pipelines[1].lateness_ms += 20'000;  // surely a new version
            back = removed;
        }
        op(t, OpKind::reload, add_config(removed));
        op(t + 1, OpKind::restart, add_config(back), rng.next());
    }
};

}  // namespace

void shape_family(Rng& rng, Scenario& s, std::vector<std::vector<PipelineDef>>& history) {
    Shaper shaper{rng, s, history};
    if (s.family == "versions_outage") shaper.versions_outage();
    if (s.family == "fast_clock") shaper.fast_clock();
    if (s.family == "session_cut") shaper.session_cut();
    if (s.family == "failed_reload") shaper.failed_reload();
    if (s.family == "long_keys") shaper.long_keys();
    if (s.family == "rerun") shaper.rerun();
    if (s.family == "crash_after_reload") shaper.crash_after_reload();
}

}  // namespace tidemark::sim
