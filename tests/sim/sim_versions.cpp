#include "tests/sim/sim_versions.h"

#include <algorithm>

namespace tidemark::sim {

int VersionTracker::start_run(const Candidate& c, uint64_t start, int64_t from_ms, bool live,
                              const std::string& how) {
    Run r;
    r.index = static_cast<int>(runs_.size());
    r.pipeline = c.def.name;
    r.version = c.config.spec.version;
    r.candidate = c;
    r.start_offset = start;
    r.from_ms = from_ms;
    r.live = r.became_live = live;
    r.live_from = start;
    r.progress = start;
    r.how = how;
    runs_.push_back(std::move(r));
    return runs_.back().index;
}

void VersionTracker::end_run(int index, uint64_t end, const std::string& how) {
    Run& r = runs_[static_cast<size_t>(index)];
    r.end_offset = std::max(r.start_offset, end);
    r.live = r.live && how == "live at the end";
    r.how += "; " + how + " at offset " + std::to_string(r.end_offset);
}

void VersionTracker::fresh_start(const std::vector<Candidate>& wanted, uint64_t first_offset,
                                 const std::string& why) {
    std::map<std::string, Slot> next;
    for (const Candidate& c : wanted) {
        Slot& slot = slots_[c.def.name];
        if (slot.backfill >= 0) {
            end_run(slot.backfill, runs_[static_cast<size_t>(slot.backfill)].progress,
                    "dropped (" + why + ")");
            slot.backfill = -1;
        }
        if (slot.live >= 0 &&
            runs_[static_cast<size_t>(slot.live)].version == c.config.spec.version) {
            runs_[static_cast<size_t>(slot.live)].candidate = c;  // limits apply in place
        } else {
            if (slot.live >= 0) end_run(slot.live, live_offset_max_, "replaced (" + why + ")");
            slot.live =
                start_run(c, first_offset, INT64_MIN, true, "live from the start (" + why + ")");
        }
        next[c.def.name] = slot;
    }
    for (auto& [name, slot] : slots_) {
        if (next.count(name)) continue;
        if (slot.live >= 0) end_run(slot.live, live_offset_max_, "stopped (" + why + ")");
        if (slot.backfill >= 0)
            end_run(slot.backfill, runs_[static_cast<size_t>(slot.backfill)].progress, "stopped");
    }
    slots_ = std::move(next);
}

void VersionTracker::plan(const std::vector<Candidate>& wanted, uint64_t first_offset,
                          int64_t now_ms, const std::string& why) {
    std::map<std::string, Slot> next;
    for (const Candidate& c : wanted) {
        Slot& slot = slots_[c.def.name];
        const std::string& version = c.config.spec.version;
        const auto abandon = [&] {
            if (slot.backfill < 0) return;
            end_run(slot.backfill, runs_[static_cast<size_t>(slot.backfill)].progress,
                    "abandoned (" + why + ")");
            slot.backfill = -1;
        };
        if (slot.live >= 0 && runs_[static_cast<size_t>(slot.live)].version == version) {
            abandon();
            runs_[static_cast<size_t>(slot.live)].candidate = c;
        } else if (slot.backfill >= 0 &&
                   runs_[static_cast<size_t>(slot.backfill)].version == version) {
            runs_[static_cast<size_t>(slot.backfill)].candidate = c;  // resumed
        } else {
            abandon();
            const int64_t from =
                c.def.backfill_from_age_ms ? now_ms - *c.def.backfill_from_age_ms : INT64_MIN;
            slot.backfill =
                start_run(c, first_offset, from, false,
                          "backfill from offset " + std::to_string(first_offset) +
                              (from != INT64_MIN ? " (from " + std::to_string(from) + ")" : "") +
                              " (" + why + ")");
        }
        next[c.def.name] = slot;
    }
    for (auto& [name, slot] : slots_) {
        if (next.count(name)) continue;
        if (slot.live >= 0) {
            end_run(slot.live, live_offset_max_, "removed (" + why + ")");
            removed_.push_back(name);
        }
        if (slot.backfill >= 0)
            end_run(slot.backfill, runs_[static_cast<size_t>(slot.backfill)].progress,
                    "removed (" + why + ")");
    }
    slots_ = std::move(next);
}

std::optional<std::string> VersionTracker::switched(const std::string& pipeline,
                                                    const std::string& version, uint64_t at_offset,
                                                    const std::string& why) {
    auto it = slots_.find(pipeline);
    if (it == slots_.end() || it->second.backfill < 0 ||
        !version.starts_with(runs_[static_cast<size_t>(it->second.backfill)].version))
        return "the host switched pipeline '" + pipeline + "' to version " + version +
               ", which DESIGN's rules do not have backfilling (" + summary() + ")";
    Slot& slot = it->second;
    Run& next = runs_[static_cast<size_t>(slot.backfill)];
    if (slot.live >= 0) {
        next.previous = runs_[static_cast<size_t>(slot.live)].version;
        runs_[static_cast<size_t>(slot.live)].live = false;
        end_run(slot.live, at_offset, "switched out (" + why + ")");
    }
    next.live = next.became_live = next.switched_in = true;
    next.live_from = at_offset;
    next.progress = std::max(next.progress, at_offset);
    next.how += "; live at offset " + std::to_string(at_offset) + " (" + why + ")";
    slot.live = slot.backfill;
    slot.backfill = -1;
    return std::nullopt;
}

void VersionTracker::backfill_progress(const std::string& pipeline, uint64_t offset) {
    auto it = slots_.find(pipeline);
    if (it == slots_.end() || it->second.backfill < 0) return;
    Run& r = runs_[static_cast<size_t>(it->second.backfill)];
    r.progress = std::max(r.progress, offset);
}

void VersionTracker::live_progress(uint64_t consumed_offset) {
    live_offset_max_ = std::max(live_offset_max_, consumed_offset);
}

void VersionTracker::close(uint64_t end_of_log) {
    for (auto& [name, slot] : slots_) {
        if (slot.live >= 0) end_run(slot.live, end_of_log, "live at the end");
        if (slot.backfill >= 0)
            end_run(slot.backfill, runs_[static_cast<size_t>(slot.backfill)].progress,
                    "still backfilling at the end");
    }
}

std::optional<std::string> VersionTracker::differs(
    const firmware::VersionRegistry& registry) const {
    std::string out;
    const auto version_of = [&](int index) {
        return index < 0 ? std::string("none") : runs_[static_cast<size_t>(index)].version;
    };
    const auto same = [](const std::string& host, const std::string& mine) {
        return mine == "none" ? host.empty() : host.starts_with(mine);
    };
    for (const auto& [name, slot] : slots_) {
        const firmware::VersionEntry* e = registry.find(name);
        if (!e) {
            out += " pipeline '" + name + "' is missing from the host's registry;";
            continue;
        }
        if (!same(e->live_version, version_of(slot.live)))
            out += " '" + name + "' live: host " +
                   (e->live_version.empty() ? "none" : e->live_version) + ", DESIGN " +
                   version_of(slot.live) + ";";
        if (!same(e->backfill_version, version_of(slot.backfill)))
            out += " '" + name + "' backfilling: host " +
                   (e->backfill_version.empty() ? "none" : e->backfill_version) + ", DESIGN " +
                   version_of(slot.backfill) + ";";
    }
    for (const firmware::VersionEntry& e : registry.entries)
        if (!slots_.count(e.name)) out += " the host's registry has pipeline '" + e.name + "';";
    if (out.empty()) return std::nullopt;
    return "the versions differ from DESIGN's rules:" + out;
}

std::string VersionTracker::summary() const {
    std::string out;
    for (const auto& [name, slot] : slots_) {
        out += name + ": live " +
               (slot.live < 0 ? "none" : runs_[static_cast<size_t>(slot.live)].version);
        if (slot.backfill >= 0)
            out += ", backfilling " + runs_[static_cast<size_t>(slot.backfill)].version + " at " +
                   std::to_string(runs_[static_cast<size_t>(slot.backfill)].progress);
        out += "; ";
    }
    return out;
}

bool VersionTracker::backfilling() const {
    return std::any_of(slots_.begin(), slots_.end(),
                       [](const auto& kv) { return kv.second.backfill >= 0; });
}

}  // namespace tidemark::sim
