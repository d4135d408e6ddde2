// The engine host's pipeline versions (DESIGN.md section 4; engine_host.h): the stored registry,
// the plan it and the wanted config make, and the reload. A backfill's steps, its rewind, its
// hold on the outbox's ids and the switch are in engine_host_backfill.cpp.
#include <spdlog/spdlog.h>
#include <algorithm>

#include "firmware/service/engine_host.h"

namespace tidemark::firmware {

namespace {

// Where a new version's backfill starts reading: backfill.from, else the oldest record.
int64_t backfill_from_ms(const config::PipelineConfig& p, int64_t now_ms) {
    if (p.backfill_from_ms) return *p.backfill_from_ms;
    if (p.backfill_from_age_ms) return now_ms - *p.backfill_from_age_ms;
    return INT64_MIN;
}

Error conflict(std::string message) {
    return Error{std::move(message), exit_config_conflict};
}

}  // namespace

// The registry as stored. A store without one is new, or from before versions (it ran every
// pipeline of its config). Either way every pipeline is taken as live in the wanted config's
// version: recovery replays the whole log into a new store, which is that version's backfill
// done before ingest starts; an old store's state is checked against the definition on restore,
// as it was before versions. Each version record goes out at this first start.
Result<void> EngineHost::load_versions() {
    if (stored_registry_) {
        registry_ = *stored_registry_;
        return {};
    }
    registry_ = {};
    // since_ms: the oldest event the recovery replay feeds it (queue_version_records).
    for (const config::PipelineConfig& p : config_.pipelines) {
        VersionEntry& e = registry_.get(p.spec.name);
        e.live_version = registry_.start_run(p.spec.name, p.spec.version);
        e.live_definition = p.definition;
        e.since_ms = INT64_MAX;
        e.record_pending = true;
    }
    return {};
}

// What runs, from the registry and the wanted config: the live config, the backfills, and what
// the next checkpoint drops. Changes registry_ in memory; the next checkpoint commits it.
Result<void> EngineHost::plan_versions() {
    live_config_ = config_;
    live_config_.pipelines.clear();
    backfills_.clear();
    const auto drop_backfill = [&](VersionEntry& e) {
        if (e.backfill_version.empty()) return;
        const std::string state_name = backfill_state_name(e.name, e.backfill_version);
        erase_prefixes_.push_back(core::Engine::state_prefix(state_name));
        erase_keys_.push_back(Processor::counters_key_for(state_name));
        spdlog::warn("pipeline '{}': the backfill of version {} is abandoned for the config's",
                     e.name, e.backfill_version);
        e.backfill_version.clear();
        e.backfill_definition.clear();
        e.backfill_hold_seq = e.backfill_hold_offset = 0;
    };
    // The registry names runs (VersionRegistry::start_run): what runs is the config's definition
    // under its run's label, in its ids and results.
    const auto labelled = [](const config::PipelineConfig& p, const std::string& label) {
        config::PipelineConfig out = p;
        out.spec.version = label;
        return out;
    };
    for (const config::PipelineConfig& p : config_.pipelines) {
        VersionEntry& e = registry_.get(p.spec.name);
        if (is_run_of(e.live_version, p.spec.version)) {
            drop_backfill(e);
            e.live_definition = p.definition;  // limits apply in place
            live_config_.pipelines.push_back(labelled(p, e.live_version));
            continue;
        }
        if (!e.live_version.empty()) {
            auto previous = config::parse_pipeline_definition(e.live_definition);
            if (!previous)
                return std::unexpected(conflict(
                    "pipeline '" + e.name + "': the stored definition of its live version " +
                    e.live_version + " no longer reads (" + previous.error().front().message +
                    "); drop its state with `tidemark inspect --drop-pipeline`"));
            previous->spec.version = e.live_version;
            live_config_.pipelines.push_back(std::move(*previous));
        }
        bool resumed = is_run_of(e.backfill_version, p.spec.version);
        if (!resumed) {
            drop_backfill(e);
            // A new run: a version that ran here before (abandoned, removed, dropped) gets a
            // label of its own, so none of its results reuses an id of the earlier run's.
            e.backfill_version = registry_.start_run(e.name, p.spec.version);
            e.backfill_offset = writer_->first_offset();
            e.backfill_from_ms = backfill_from_ms(p, clock_.wall_ms());
            e.backfill_since_ms = INT64_MAX;
            spdlog::info("pipeline '{}': version {} backfills from log offset {}{}", e.name,
                         e.backfill_version, e.backfill_offset,
                         e.live_version.empty() ? "" : " while " + e.live_version + " runs live");
        }
        e.backfill_definition = p.definition;
        const uint64_t offset = std::max(e.backfill_offset, writer_->first_offset());
        auto run = BackfillRun::create(config_, labelled(p, e.backfill_version),
                                       writer_->options().dir, offset, e.backfill_from_ms);
        if (!run) return std::unexpected(run.error());
        (*run)->set_since_ms(e.backfill_since_ms);
        (*run)->set_resumed(resumed);
        backfills_.push_back(std::move(*run));
    }
    // Pipelines no longer in the config stop; their state goes, their version record is
    // cleared after their rows already in the outbox.
    for (size_t i = registry_.entries.size(); i-- > 0;) {
        VersionEntry& e = registry_.entries[i];
        if (std::any_of(config_.pipelines.begin(), config_.pipelines.end(),
                        [&](const config::PipelineConfig& p) { return p.spec.name == e.name; }))
            continue;
        drop_backfill(e);
        erase_prefixes_.push_back(core::Engine::state_prefix(e.name));
        if (!e.live_version.empty()) {
            lmdb::OutboxRow row;
            row.id = version_record_id(config_.node_id, e.name, "removed:" + e.live_version);
            row.pipeline = e.name;
            row.version_record = true;  // an empty retained payload clears the record
            version_rows_.push_back(std::move(row));
        }
        spdlog::warn(
            "pipeline '{}' is no longer in the config: its state is dropped; its results "
            "already in the outbox are still sent",
            e.name);
        registry_.entries.erase(registry_.entries.begin() + static_cast<ptrdiff_t>(i));
    }
    return {};
}

// The version records not yet in the outbox, after what the processors emitted so far. A
// version adopted at a store's first start covers from the oldest event its recovery fed it.
void EngineHost::queue_version_records() {
    for (VersionEntry& e : registry_.entries) {
        if (!e.record_pending || e.live_version.empty()) continue;
        if (e.since_ms == INT64_MAX) {
            const int index = processor_->engine().find_pipeline(e.name);
            const int64_t oldest =
                index >= 0 ? processor_->min_event_ms(static_cast<uint32_t>(index)) : INT64_MAX;
            e.since_ms = oldest == INT64_MAX ? 0 : oldest;
            // Adopted at the store's first start: live from the newest record recovery read.
            e.switch_ms = live_ingest_ms();
        }
        queue_version_record(e);
    }
}

void EngineHost::queue_version_record(const VersionEntry& e) {
    lmdb::OutboxRow row;
    row.id = version_record_id(config_.node_id, e.name, e.live_version);
    row.pipeline = e.name;
    row.version_record = true;
    row.payload = version_record_json(config_.node_id, e);
    std::erase_if(version_rows_, [&](const lmdb::OutboxRow& r) { return r.id == row.id; });
    version_rows_.push_back(std::move(row));
}

// Routes one stored entry to the processor that wrote it; state of versions no longer planned
// is dropped by the next checkpoint.
Result<void> EngineHost::restore_entry(std::string_view key, std::string_view value) {
    if (key == versions_key) return {};
    if (key == processor_->counters_key()) return processor_->restore_entry(key, value);
    for (auto& run : backfills_)
        if (key == run->processor().counters_key())
            return run->resumed() ? run->processor().restore_entry(key, value) : Result<void>{};
    const auto state_name = core::Engine::pipeline_of_state_key(key);
    if (!state_name) {
        if (!key.starts_with(Processor::counters_key_for("")))
            spdlog::warn("state: an entry of an unknown kind ({} bytes of key) is ignored",
                         key.size());
        return {};
    }
    if (processor_->engine().find_pipeline(*state_name) >= 0)
        return processor_->restore_entry(key, value);
    for (auto& run : backfills_)
        if (run->state_name() == *state_name)
            return run->resumed() ? run->processor().restore_entry(key, value) : Result<void>{};
    const std::string prefix = core::Engine::state_prefix(*state_name);
    if (std::find(erase_prefixes_.begin(), erase_prefixes_.end(), prefix) == erase_prefixes_.end())
        erase_prefixes_.push_back(prefix);
    return {};
}

std::string EngineHost::live_version(std::string_view pipeline) const {
    // Before the plan, what load_versions() will find: a registry's live version, else the
    // config's (live_config_ is the config until then).
    if (!planned_ && stored_registry_) {
        const VersionEntry* e = stored_registry_->find(pipeline);
        return e ? e->live_version : std::string();
    }
    for (const config::PipelineConfig& p : live_config_.pipelines)
        if (p.spec.name == pipeline) return p.spec.version;
    return {};
}

// The plan, then every processor created and restored from the committed state.
Result<void> EngineHost::load_from_store() {
    planned_ = true;
    if (auto planned = plan_versions(); !planned) return planned;
    auto processor = Processor::create(live_config_);
    if (!processor) return std::unexpected(processor.error());
    processor_ = std::move(*processor);
    sink_ = std::make_unique<BatchSink>(live_config_);
    auto loaded = store_->for_each_state(
        [&](std::string_view k, std::string_view v) { return restore_entry(k, v); });
    if (!loaded) return fail("restoring state: " + loaded.error().message);
    auto finished = processor_->restore_finish();
    for (auto& run : backfills_)
        if (finished) finished = run->processor().restore_finish();
    if (!finished)
        return std::unexpected(
            conflict("restoring state: " + finished.error().message +
                     ". Put the previous definition back, or drop the pipeline's state with "
                     "`tidemark inspect --config FILE --drop-pipeline NAME` (its version then "
                     "backfills from the log)"));
    return {};
}

// Each backfill's state and position into the checkpoint's transaction (and into `next`, the
// registry commit_state writes after it).
void EngineHost::write_versions(lmdb::CheckpointTxn& txn, VersionRegistry& next) {
    for (auto& run : backfills_) {
        run->processor().checkpoint(txn);
        VersionEntry& e = next.get(run->name());
        e.backfill_offset = run->offset();
        e.backfill_since_ms = run->since_ms();
        if (e.backfill_hold_seq != 0 && run->offset() >= e.backfill_hold_offset)
            e.backfill_hold_seq = e.backfill_hold_offset = 0;  // past what it read before
    }
}

// A reload that fails leaves everything as it was (DESIGN.md section 4): the plan changes the
// registry and queues erasures and version records in memory as it goes, and the load may
// still fail after it (a stored entry that does not restore), so what runs is put aside first
// and put back whole. Planning the old config again instead would plan it against the changed
// registry (issue 24: a pipeline the failed reload removed came back as a new backfill from
// offset 0, its live state erased and its version record cleared).
Result<void> EngineHost::reconfigure(const config::Config& wanted) {
    if (!can_checkpoint())
        return fail("results wait for room in the outbox; reload again once it drains");
    if (auto ok = checkpoint(); !ok) return ok;
    struct Running {
        config::Config config, live_config;
        VersionRegistry registry;
        std::vector<std::string> erase_prefixes, erase_keys;
        std::vector<lmdb::OutboxRow> version_rows;
        std::unique_ptr<Processor> processor;
        std::unique_ptr<BatchSink> sink;
        std::vector<std::unique_ptr<BackfillRun>> backfills;
    } running{
        config_,       live_config_,          registry_,        erase_prefixes_,      erase_keys_,
        version_rows_, std::move(processor_), std::move(sink_), std::move(backfills_)};
    config_.pipelines = wanted.pipelines;
    config_.backfill = wanted.backfill;
    config_.log_level = wanted.log_level;
    auto loaded = load_from_store();
    if (!loaded) {
        config_ = std::move(running.config);
        live_config_ = std::move(running.live_config);
        registry_ = std::move(running.registry);
        erase_prefixes_ = std::move(running.erase_prefixes);
        erase_keys_ = std::move(running.erase_keys);
        version_rows_ = std::move(running.version_rows);
        processor_ = std::move(running.processor);
        sink_ = std::move(running.sink);
        backfills_ = std::move(running.backfills);
        return loaded;
    }
    queue_version_records();
    // The plan is committed now, after the records it queued: a crash before the next
    // checkpoint would otherwise undo an applied reload (a removed pipeline back at its old
    // state, a backfill planned again with another backfill.from). While the outbox has no
    // room the next checkpoint does it, as it waits for the same room.
    if (auto flushed = flush(); !flushed) return std::unexpected(flushed.error());
    if (can_checkpoint())
        if (auto ok = checkpoint(); !ok)
            spdlog::warn("reload: the new plan waits for the next checkpoint: {}",
                         ok.error().message);
    return {};
}

std::vector<BackfillFigures> EngineHost::backfill_figures() const {
    std::vector<BackfillFigures> out;
    for (const auto& run : backfills_) {
        BackfillFigures f;
        f.pipeline = run->name();
        f.version = run->version();
        f.offset = run->offset();
        f.end_offset = consumed_offset_;
        f.records = run->records();
        const int64_t wall_ms = run->started_ms() ? clock_.steady_ms() - run->started_ms() : 0;
        if (wall_ms > 0 && run->records() > 0) {
            // Over the wall time since it started in this process: what it gets of the share.
            f.records_per_s =
                static_cast<double>(run->records()) * 1000.0 / static_cast<double>(wall_ms);
            // The bytes left at the bytes per second read so far (the live end moves too).
            const double bytes_per_s = static_cast<double>(run->offset() - run->first_offset()) *
                                       1000.0 / static_cast<double>(wall_ms);
            if (bytes_per_s > 0)
                f.eta_s = static_cast<double>(f.end_offset - f.offset) / bytes_per_s;
        }
        if (run->busy_ms() > 0)
            f.busy_records_per_s =
                static_cast<double>(run->records()) * 1000.0 / static_cast<double>(run->busy_ms());
        if (run->cpu_us() > 0)
            f.cpu_records_per_s =
                static_cast<double>(run->records()) * 1e6 / static_cast<double>(run->cpu_us());
        out.push_back(std::move(f));
    }
    return out;
}

}  // namespace tidemark::firmware
