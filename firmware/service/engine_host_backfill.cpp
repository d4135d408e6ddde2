// The engine host's backfills (DESIGN.md section 4; engine_host.h): a backfill's paced steps
// over the retained log, its rewind when its rows find no room, the hold that keeps a resumed
// run's ids from being pruned, what retention must keep for it, and the switch to live.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

#include "firmware/service/engine_host.h"

namespace tidemark::firmware {

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
    const double live_delay_ms = static_cast<double>(config_.backfill.max_live_delay_ms);
    // The share is of one core's time (DESIGN.md section 4): the credit grows by max_share of
    // the steady time, and a slice is charged the engine thread's CPU time, so that time the
    // thread spends blocked (the commit's fsync, asleep) is not counted against it.
    backfill_credit_ms_ = std::min(
        live_delay_ms, backfill_credit_ms_ + static_cast<double>(now - backfill_refill_ms_) *
                                                 config_.backfill.max_share);
    backfill_refill_ms_ = now;
    if (backfills_.empty() || !sink_->rows.empty() || backfill_credit_ms_ < 1 ||
        now < backfill_resume_ms_)
        return 0;
    BackfillRun& run = *backfills_.front();
    const int64_t cpu_start_us = clock_.thread_cpu_us();
    // A slice is reading, then committing what it emitted (an outbox transaction with its
    // fsync): both are charged to the share (their CPU time), and the reading part gets the
    // fraction of the credit that reading took in earlier slices, so that the whole slice stays
    // within it. It reads for at most a tenth of max_live_delay: a live record that arrives during
    // a slice waits for all of it, and a slice as long as the credit allows (up to max_live_delay)
    // delayed live records by its whole length (issue 31).
    const double read_ms = std::max(
        1.0, std::min(backfill_credit_ms_ * backfill_read_fraction_,
                      live_delay_ms / static_cast<double>(backfill_read_slices_per_live_delay)));
    auto n = run.step(consumed_offset_, records_max, now + static_cast<int64_t>(read_ms), clock_);
    if (!n) return std::unexpected(n.error());
    const int64_t read_end = clock_.steady_ms();
    // The live sink holds no rows (checked above): the run's become its rows whole, none moved
    // one by one, and the run keeps the live sink's empty vector with its capacity.
    TM_ASSERT(sink_->rows.empty());
    std::swap(sink_->rows, run.sink().rows);
    // Side output of history is not kept: the side store dedupes by log position, which the
    // live version has passed (counted as too_late all the same).
    run.sink().side.clear();
    auto flushed = flush();
    if (!flushed) return std::unexpected(flushed.error());
    run.sink().take_spares(*sink_);
    if (!*flushed) {
        if (auto rewound = rewind_backfill(run); !rewound) return std::unexpected(rewound.error());
        return *n;
    }
    backfill_wait_ms_ = 0;
    const int64_t slice_end = clock_.steady_ms();
    const int64_t slice_cpu_us = clock_.thread_cpu_us() - cpu_start_us;
    backfill_credit_ms_ -= static_cast<double>(slice_cpu_us) / 1000.0;
    run.add_slice(slice_end - now, slice_cpu_us);
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

}  // namespace tidemark::firmware
