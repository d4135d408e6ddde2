#include "firmware/service/version_plan.h"

#include <algorithm>

#include "adapters/log/log_reader.h"
#include "adapters/log/segment_files.h"

namespace tidemark::firmware {

namespace {

// Records in [from, end of log): a read of the log at over a million records a second.
Result<uint64_t> count_records(const std::string& log_dir, uint64_t from) {
    auto reader = log::LogReader::open(log_dir);
    if (!reader) return std::unexpected(reader.error());
    auto segments = log::list_segments(log_dir);
    if (!segments) return std::unexpected(segments.error());
    if (segments->empty()) return uint64_t{0};
    from = std::max(from, segments->front().first_offset);
    if (auto ok = (*reader)->seek(from); !ok) return std::unexpected(ok.error());
    uint64_t n = 0;
    log::Record rec;
    for (;;) {
        auto next = (*reader)->next(rec);
        if (!next) return std::unexpected(next.error());
        if (!*next) return n;
        ++n;
    }
}

}  // namespace

Result<std::vector<VersionPlan>> read_version_plan(const config::Config& config, lmdb::Store& store,
                                                   const std::string& log_dir) {
    auto read = read_registry(store);
    if (!read) return std::unexpected(read.error());
    const bool stored = read->has_value();
    const VersionRegistry registry = stored ? **read : VersionRegistry{};
    std::vector<VersionPlan> out;
    for (const config::PipelineConfig& p : config.pipelines) {
        VersionPlan plan;
        plan.pipeline = p.spec.name;
        plan.version = p.spec.version;
        const VersionEntry* e = registry.find(p.spec.name);
        // No registry: the store predates versions or is empty; either way its pipelines run
        // as configured (EngineHost::load_versions).
        plan.live_version = e ? e->live_version : (stored ? "" : p.spec.version);
        plan.backfill = !is_run_of(plan.live_version, p.spec.version);
        if (plan.backfill) {
            plan.resumes = e && is_run_of(e->backfill_version, p.spec.version);
            plan.from_offset = plan.resumes ? e->backfill_offset : 0;
            auto n = count_records(log_dir, plan.from_offset);
            if (!n) return std::unexpected(n.error());
            plan.records = *n;
        }
        out.push_back(std::move(plan));
    }
    return out;
}

config::Config live_view(const config::Config& config, const std::vector<VersionPlan>& plan) {
    config::Config out = config;
    std::erase_if(out.pipelines, [&](const config::PipelineConfig& p) {
        return std::any_of(plan.begin(), plan.end(), [&](const VersionPlan& v) {
            return v.pipeline == p.spec.name && v.backfill;
        });
    });
    return out;
}

std::string version_plan_text(const std::vector<VersionPlan>& plan) {
    std::string out;
    for (const VersionPlan& v : plan) {
        out += "pipeline " + v.pipeline + ": version " + v.version;
        if (!v.backfill) {
            out += ", live\n";
            continue;
        }
        out += v.live_version.empty() ? " (new)" : " (live now: " + v.live_version + ")";
        out += v.resumes ? ", resumes its backfill: " : ", would backfill ";
        out += std::to_string(v.records) + " log records from offset " +
               std::to_string(v.from_offset) + "\n";
    }
    return out;
}

}  // namespace tidemark::firmware
