// The engine host's pipeline versions (DESIGN.md section 4; engine_host.h): the stored registry,
// the plan it and the wanted config make, backfill steps and the switch.
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

// What a checkpoint may prune the outbox's ids below: its own seq, or a backfill's hold.
uint64_t EngineHost::prune_bound(uint64_t seq_next) const {
    for (const VersionEntry& e : registry_.entries)
        if (!e.backfill_version.empty() && e.backfill_hold_seq != 0)
            seq_next = std::min(seq_next, e.backfill_hold_seq);
    return seq_next;
}

// A restart: a backfill that resumes from its checkpointed offset reads again what it read
// after that checkpoint, and emits the same rows: their ids (at or after the checkpoint's outbox
// seq) are kept until it is past the log's end at this start (issue 24: the first checkpoint
// after a restart pruned them, and the rows were appended twice).
void EngineHost::hold_resumed_backfill(VersionEntry& e, uint64_t checkpoint_seq) {
    e.backfill_hold_seq =
        e.backfill_hold_seq == 0 ? checkpoint_seq : std::min(e.backfill_hold_seq, checkpoint_seq);
    e.backfill_hold_offset = std::max(e.backfill_hold_offset, writer_->end_offset());
}

int64_t EngineHost::live_ingest_ms() const {
    return processor_ ? processor_->newest_ingest_ms() : 0;
}

uint64_t EngineHost::retention_offset() const {
    uint64_t offset = checkpoint_.log_offset;
    for (const VersionEntry& e : registry_.entries)
        if (!e.backfill_version.empty()) offset = std::min(offset, e.backfill_offset);
    return offset;
}

Result<size_t> EngineHost::backfill_step(size_t records_max) {
    const int64_t now = clock_.steady_ms();
    if (backfill_refill_ms_ == 0) backfill_refill_ms_ = now;
    const double slice_max_ms = static_cast<double>(config_.backfill.max_live_delay_ms);
    backfill_credit_ms_ = std::min(
        slice_max_ms, backfill_credit_ms_ + static_cast<double>(now - backfill_refill_ms_) *
                                                config_.backfill.max_share);
    backfill_refill_ms_ = now;
    if (backfills_.empty() || !sink_->rows.empty() || backfill_credit_ms_ < 1 ||
        now < backfill_resume_ms_)
        return 0;
    BackfillRun& run = *backfills_.front();
    // A slice is reading, then committing what it emitted (an outbox transaction with its
    // fsync): both are charged to the share, and the reading part gets the fraction of the
    // budget that reading took in earlier slices, so that the whole slice stays within it.
    const double read_ms = std::max(1.0, backfill_credit_ms_ * backfill_read_fraction_);
    auto n = run.step(consumed_offset_, records_max, now + static_cast<int64_t>(read_ms), clock_);
    if (!n) return std::unexpected(n.error());
    const int64_t read_end = clock_.steady_ms();
    for (lmdb::OutboxRow& row : run.sink().rows)
        sink_->rows.push_back(std::move(row));
    run.sink().rows.clear();
    // Side output of history is not kept: the side store dedupes by log position, which the
    // live version has passed (counted as too_late all the same).
    run.sink().side.clear();
    auto flushed = flush();
    if (!flushed) return std::unexpected(flushed.error());
    if (!*flushed) {
        if (auto rewound = rewind_backfill(run); !rewound) return std::unexpected(rewound.error());
        return *n;
    }
    backfill_wait_ms_ = 0;
    const int64_t slice_end = clock_.steady_ms();
    backfill_credit_ms_ -= static_cast<double>(slice_end - now);
    if (slice_end > now)
        backfill_read_fraction_ =
            std::clamp(0.7 * backfill_read_fraction_ + 0.3 * static_cast<double>(read_end - now) /
                                                           static_cast<double>(slice_end - now),
                       0.05, 1.0);
    if (run.offset() < consumed_offset_) return *n;
    auto switched = switch_version(run);
    if (!switched) return std::unexpected(switched.error());
    return *n;
}

// A slice's rows found no room (the outbox at its bound with pause_ingest, the map or the disk
// full): history must not hold the live path, nor a reload (reverting the config is how an
// operator lets retention pass a backfill on a full disk; a reload needs a checkpoint, and a
// checkpoint needs no results waiting: issue 24). So the slice's rows go, the run is put back
// to its last checkpoint (its state and position as the store holds them; what it emitted since
// is in the outbox, and its ids are held until it reads past them again, as after a restart),
// and it waits, 1 s and then twice as long each time up to a minute, before it reads again.
Result<void> EngineHost::rewind_backfill(BackfillRun& run) {
    std::vector<lmdb::OutboxRow> version_rows;
    for (lmdb::OutboxRow& row : sink_->rows)
        if (row.version_record) version_rows.push_back(std::move(row));
    sink_->rows.clear();
    version_rows.insert(version_rows.end(), std::make_move_iterator(version_rows_.begin()),
                        std::make_move_iterator(version_rows_.end()));
    version_rows_ = std::move(version_rows);
    backfill_wait_ms_ = std::clamp<int64_t>(backfill_wait_ms_ * 2, 1000, 60'000);
    backfill_resume_ms_ = clock_.steady_ms() + backfill_wait_ms_;
    VersionEntry* e = registry_.find(run.name());
    TM_ASSERT(e && e->backfill_version == run.version());
    hold_resumed_backfill(*e, checkpoint_seq_next_);
    e->backfill_hold_offset = std::max(e->backfill_hold_offset, run.offset());
    spdlog::warn(
        "pipeline '{}': the backfill of version {} found no room for its results ({}); "
        "it goes back to log offset {} and reads again in {} s",
        run.name(), run.version(), alarms_.outbox(), e->backfill_offset, backfill_wait_ms_ / 1000);
    auto definition = config::parse_pipeline_definition(e->backfill_definition);
    if (!definition)
        return fail("pipeline '" + e->name + "': the stored definition of version " +
                    e->backfill_version + " no longer reads");
    definition->spec.version = e->backfill_version;
    auto again = BackfillRun::create(config_, *definition, writer_->options().dir,
                                     std::max(e->backfill_offset, writer_->first_offset()),
                                     e->backfill_from_ms);
    if (!again) return std::unexpected(again.error());
    BackfillRun& fresh = **again;
    fresh.set_since_ms(e->backfill_since_ms);
    fresh.set_resumed(true);
    const std::string prefix = core::Engine::state_prefix(fresh.state_name());
    auto restored = store_->for_each_state([&](std::string_view k, std::string_view v) {
        if (k == fresh.processor().counters_key() || k.starts_with(prefix))
            return fresh.processor().restore_entry(k, v);
        return Result<void>{};
    });
    if (!restored) return fail("restoring a backfill: " + restored.error().message);
    if (auto finished = fresh.processor().restore_finish(); !finished) return finished;
    for (auto& slot : backfills_)
        if (slot.get() == &run) slot = std::move(*again);
    return {};
}

// The run is at the live position and its rows are in the outbox: in one checkpoint the live
// version's state goes, the run's takes the pipeline's name, and the registry names it live;
// then every processor is restored from that. A checkpoint that cannot commit changes nothing:
// the switch is tried again on the next step.
Result<bool> EngineHost::switch_version(BackfillRun& run) {
    int64_t since_ms = 0;
    std::string previous;
    // The pipeline's decode counters become the new version's, in the switch's transaction: the
    // live processor writes its counters there, so it holds the run's for this one commit.
    const int live_index = processor_->engine().find_pipeline(run.name());
    std::optional<DecodeCounters> live_counters;
    if (live_index >= 0) {
        live_counters = processor_->decode_counters()[static_cast<size_t>(live_index)];
        processor_->set_decode_counters(static_cast<uint32_t>(live_index),
                                        run.processor().decode_counters()[0]);
    }
    const DecodeCounters run_counters = run.processor().decode_counters()[0];
    auto committed = commit_state([&](lmdb::CheckpointTxn& txn, VersionRegistry& next) {
        txn.erase_prefix(core::Engine::state_prefix(run.name()));
        txn.rename_prefix(core::Engine::state_prefix(run.state_name()),
                          core::Engine::state_prefix(run.name()));
        txn.erase(run.processor().counters_key());
        VersionEntry& e = next.get(run.name());
        e.previous = e.live_version;
        e.live_version = run.version();
        e.live_definition = run.definition();
        e.since_ms = run.since_ms() != INT64_MAX ? run.since_ms() : 0;
        // The run has read the log up to the live position: its newest record is the one at
        // which it takes over.
        e.switch_ms = run.processor().newest_ingest_ms();
        e.record_pending = true;
        e.backfill_version.clear();
        e.backfill_definition.clear();
        e.backfill_hold_seq = e.backfill_hold_offset = 0;
        since_ms = e.since_ms;
        previous = e.previous;
    });
    if (!committed) {
        if (live_counters)
            processor_->set_decode_counters(static_cast<uint32_t>(live_index), *live_counters);
        spdlog::warn("pipeline '{}': the switch to version {} waits: {}", run.name(), run.version(),
                     committed.error().message);
        return false;
    }
    spdlog::info("pipeline '{}': version {} is live (previous: {}), after backfilling {} records",
                 run.name(), run.version(), previous.empty() ? "none" : previous, run.records());
    const std::string name = run.name();  // `run` goes with the load
    switches_.push_back({run.name(), run.version(), since_ms});
    if (auto loaded = load_from_store(); !loaded) return std::unexpected(loaded.error());
    // A pipeline new in this config had no live counters to hold the run's: they are
    // committed now, once (a switch of a new pipeline is rare; the next checkpoint would
    // write them too, but a crash before it would restore none).
    if (const int index = processor_->engine().find_pipeline(name); index >= 0 && live_index < 0) {
        processor_->set_decode_counters(static_cast<uint32_t>(index), run_counters);
        if (auto again = commit_state(nullptr); !again)
            spdlog::warn("pipeline '{}': its decode counters wait for the next checkpoint: {}",
                         name, again.error().message);
    }
    queue_version_records();
    // The version record now, before any live result of the new version (a full outbox keeps
    // it in memory, still first in line).
    if (auto flushed = flush(); !flushed) return std::unexpected(flushed.error());
    return true;
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
        out.push_back(std::move(f));
    }
    return out;
}

}  // namespace tidemark::firmware
