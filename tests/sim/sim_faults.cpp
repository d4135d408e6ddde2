// The scenario's events on the simulated gateway: reloads (plain, with a failing checkpoint,
// over a damaged state entry), restarts with the broker's redeliveries, outages of the
// upstream, a checkpoint whose fdatasync fails. DESIGN.md section 4: a reload that fails leaves
// the running pipelines, their state and their version records exactly as they were.
#include <cerrno>

#include "core/engine.h"
#include "fault_io.h"
#include "firmware/service/versions.h"
#include "tests/sim/sim_config.h"
#include "tests/sim/sim_world.h"

namespace tidemark::sim {

bool World::reconfigure(int config, const std::string& why, bool fault_expected) {
    auto parsed = parse(s_.configs[static_cast<size_t>(config)], dir_);
    if (!parsed) {
        failure(parsed.error().message);
        stopped_ = true;
        return false;
    }
    const std::vector<firmware::BackfillFigures> before = host_->backfill_figures();
    const std::string state_before = live_state();
    auto ok = host_->reconfigure(*parsed);
    if (ok) {
        running_ = config;
        rec_.versions.plan(candidates(config), host_->log().first_offset(), clock_.wall_ms(), why);
        observe_plan(why);
        if (note_)
            note_(where_ + ": " + why + " to config " + std::to_string(config) + " applied; " +
                  rec_.versions.summary());
        return true;
    }
    if (!fault_expected)
        failure("a reload failed without a fault (" + why + "): " + ok.error().message);
    if (note_)
        note_(where_ + ": " + why + " to config " + std::to_string(config) +
              " refused: " + ok.error().message);
    // Nothing may have changed: the rules' versions are still the host's, the live state is
    // as it was, no backfill restarted.
    if (const std::string after = live_state(); after != state_before)
        failure("a reload that failed (" + ok.error().message + ") changed the live state: before" +
                state_before + "; after" + after);
    if (auto d = rec_.versions.differs(host_->versions()))
        failure("a reload that failed (" + ok.error().message + ") changed the versions: " + *d);
    for (const firmware::BackfillFigures& b : before) {
        bool kept = false;
        for (const firmware::BackfillFigures& a : host_->backfill_figures())
            if (a.pipeline == b.pipeline && a.version == b.version) {
                kept = true;
                if (a.offset < b.offset)
                    failure("a reload that failed (" + ok.error().message +
                            ") moved the backfill of '" + b.pipeline + "' version " + b.version +
                            " back from offset " + std::to_string(b.offset) + " to " +
                            std::to_string(a.offset));
            }
        if (!kept)
            failure("a reload that failed (" + ok.error().message + ") ended the backfill of '" +
                    b.pipeline + "' version " + b.version);
    }
    return false;
}

// What the live processor holds, per pipeline: its version and the engine's gauges.
std::string World::live_state() {
    std::string out;
    for (const config::PipelineConfig& p : host_->live_config().pipelines) {
        const int i = host_->processor().engine().find_pipeline(p.spec.name);
        if (i < 0) continue;
        const core::PipelineStats& st = host_->processor().engine().stats(static_cast<uint32_t>(i));
        out += " '" + p.spec.name + "' " + p.spec.version + ": " + std::to_string(st.keys) +
               " keys, " + std::to_string(st.open_windows) + " open windows, " +
               std::to_string(st.partitions_active + st.partitions_idle) + " partitions, " +
               std::to_string(st.events_in) + " events in;";
    }
    return out;
}

// One state entry written as the store's own checkpoint would, with the meta it has.
bool World::write_state(const std::string& key, const std::string& value) {
    lmdb::Store& store = host_->store();
    auto meta = store.load_checkpoint();
    if (!meta || !*meta) return false;
    auto txn = store.begin_checkpoint();
    if (!txn) return false;
    (*txn)->put(key, value);
    return (*txn)->commit(**meta).has_value();
}

// As the end-to-end trial: a checkpoint, one stored entry of a running version (a
// window, a key or a partition: not the meta record, which every checkpoint writes again) cut
// to one byte, a reload, then the entry as it was (a reload that took the damage without a
// word would show in the results).
void World::damage_reload(const Op& op) {
    if (!checkpoint("before the damage", false))
        return (void)reconfigure(op.config, "reload", false);
    std::vector<std::string> prefixes;
    for (const config::PipelineConfig& p : host_->live_config().pipelines)
        prefixes.push_back(core::Engine::state_prefix(
            p.spec.state_name.empty() ? p.spec.name : p.spec.state_name));
    for (const firmware::BackfillFigures& f : host_->backfill_figures())
        prefixes.push_back(
            core::Engine::state_prefix(firmware::backfill_state_name(f.pipeline, f.version)));
    std::vector<std::pair<std::string, std::string>> entries;  // key, value
    lmdb::Store& store = host_->store();
    (void)store.for_each_state([&](std::string_view k, std::string_view v) -> Result<void> {
        for (const std::string& prefix : prefixes)
            if (k.starts_with(prefix) && k != prefix + "A" && v.size() > 1)
                entries.emplace_back(std::string(k), std::string(v));
        return {};
    });
    if (entries.empty()) return (void)reconfigure(op.config, "reload", false);
    const auto& [key, original] = entries[op.pick % entries.size()];
    const std::string damaged = original.substr(0, 1);
    if (!write_state(key, damaged)) {
        failure("could not write the damaged entry");
        return;
    }
    if (note_)
        note_(where_ + ": a stored state entry damaged (" + std::to_string(key.size()) +
              " bytes of key)");
    const bool applied = reconfigure(op.config, "reload over a damaged state entry", true);
    // Whether the reload read the entry or not (it may leave unchanged pipelines alone), the
    // results tell: a damaged entry taken without a word would make them differ.
    (void)applied;
    auto now = store.get_state(key);
    const bool still_damaged = now && *now && **now == damaged;
    if (still_damaged && !write_state(key, original)) failure("could not repair the damaged entry");
}

void World::apply_op(const Op& op) {
    switch (op.kind) {
        case OpKind::reload:
            reconfigure(op.config, "reload", false);
            break;
        case OpKind::fail_reload_checkpoint:
            tm_fault_watch("state/data.mdb");
            tm_fault_arm(TM_FAULT_FDATASYNC, EIO);
            reconfigure(op.config, "reload whose checkpoint fails", true);
            tm_fault_clear();
            break;
        case OpKind::damage_reload:
            damage_reload(op);
            break;
        case OpKind::fail_checkpoint:
            if (!host_->can_checkpoint()) break;
            tm_fault_watch("state/data.mdb");
            tm_fault_arm(TM_FAULT_FDATASYNC, EIO);
            if (checkpoint("with a failing fdatasync", true) && note_)
                note_(where_ + ": the injected fdatasync failure did not fail the checkpoint");
            tm_fault_clear();
            break;
        case OpKind::upstream_down:
            upstream_.set_up(false);
            if (note_) note_(where_ + ": upstream down");
            break;
        case OpKind::upstream_up:
            upstream_.set_up(true);
            if (note_) note_(where_ + ": upstream up");
            break;
        case OpKind::restart: {
            // The broker saw no PUBACK for the last few messages: it sends them again, DUP.
            const size_t resend = std::min<size_t>(
                connection_messages_.size(),
                s_.redeliveries_max > 0 ? op.pick % static_cast<uint64_t>(s_.redeliveries_max + 1)
                                        : 0);
            const std::vector<int> again(
                connection_messages_.end() - static_cast<ptrdiff_t>(resend),
                connection_messages_.end());
            crash();
            if (note_) note_(where_ + ": crash");
            if (!open(op.config, "restart")) return;
            filter_->connection_started();
            connection_messages_.clear();
            for (int index : again)
                if (!stopped_) append_message(index, true);
            break;
        }
    }
}

}  // namespace tidemark::sim
