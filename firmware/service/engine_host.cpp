#include "firmware/service/engine_host.h"

#include <spdlog/spdlog.h>
#include <algorithm>

#include "firmware/adapter_options.h"

namespace tidemark::firmware {

EngineHost::EngineHost(const config::Config& config, const core::Clock& clock, Alarms& alarms)
    : config_(config), live_config_(config), clock_(clock), alarms_(alarms) {}

Result<std::unique_ptr<EngineHost>> EngineHost::open(const config::Config& config,
                                                     const core::Clock& clock, Alarms& alarms) {
    std::unique_ptr<EngineHost> host(new EngineHost(config, clock, alarms));
    auto store = lmdb::Store::open(store_options(config));
    if (!store) return fail(store.error().message);
    host->store_ = std::move(*store);
    auto registry = read_registry(*host->store_);
    if (!registry) return std::unexpected(registry.error());
    host->stored_registry_ = std::move(*registry);
    if (host->store_->stale_readers_cleared())
        spdlog::info("state: cleared {} stale readers left by a killed process",
                     host->store_->stale_readers_cleared());

    const log::LogOptions lo = log_options(config);
    auto writer = log::LogWriter::open(lo);
    if (!writer) return std::unexpected(writer.error());
    host->writer_ = std::move(*writer);
    const log::LogStats ls = host->writer_->stats();
    if (ls.tail_truncations)
        spdlog::warn("log: cut a torn tail of {} bytes (a crash or power loss during a write)",
                     ls.tail_bytes_cut);
    if (ls.damaged_regions)
        spdlog::error(
            "log: {} damaged regions ({} bytes) in the newest segment, with valid "
            "records after them: those are kept and read, the damaged bytes skipped "
            "(a failing disk or a bad sector?)",
            ls.damaged_regions, ls.damaged_bytes);

    // Until recover() plans the versions: every pipeline of the config, as before versions.
    auto processor = Processor::create(host->live_config_);
    if (!processor) return std::unexpected(processor.error());
    host->processor_ = std::move(*processor);
    host->sink_ = std::make_unique<BatchSink>(host->live_config_);
    auto reader = log::LogReader::open(lo.dir);
    if (!reader) return std::unexpected(reader.error());
    host->reader_ = std::move(*reader);
    return host;
}

// The checkpointed state into the engine; returns the log offset replay starts from (the
// log's first when there is no checkpoint).
Result<uint64_t> EngineHost::restore_checkpoint() {
    auto cp = store_->load_checkpoint();
    if (!cp) return fail(cp.error().message);
    if (auto ok = load_versions(); !ok) return std::unexpected(ok.error());
    const VersionRegistry stored = registry_;
    if (auto ok = load_from_store(); !ok) return std::unexpected(ok.error());
    if (!*cp) return writer_->first_offset();
    checkpoint_seq_next_ = (*cp)->outbox_seq_next;
    // The backfills this start resumes (the same run as before the restart).
    for (VersionEntry& e : registry_.entries)
        if (const VersionEntry* was = stored.find(e.name);
            !e.backfill_version.empty() && was && was->backfill_version == e.backfill_version)
            hold_resumed_backfill(e, (*cp)->outbox_seq_next);
    checkpoint_.wall_ms = (*cp)->checkpoint_ms;
    const uint64_t offset = (*cp)->log_offset;
    if (offset < writer_->first_offset())
        return fail("the checkpoint points at log offset " + std::to_string(offset) +
                    " but the log starts at " + std::to_string(writer_->first_offset()) +
                    ": segments were removed by hand; restore them or clear data_dir");
    return offset;
}

Result<uint64_t> EngineHost::recover(const std::function<bool()>& wait_for_room) {
    auto restored = restore_checkpoint();
    if (!restored) return std::unexpected(restored.error());
    const uint64_t offset = *restored;
    if (offset > writer_->end_offset())
        return fail("the checkpoint points at log offset " + std::to_string(offset) +
                    " past the log's end " + std::to_string(writer_->end_offset()) +
                    ": the log was truncated or replaced; clear data_dir/state to rebuild");
    checkpoint_.log_offset = offset;
    consumed_offset_ = offset;
    if (auto ok = reader_->seek(offset); !ok) return std::unexpected(ok.error());
    // A full outbox, map or disk is waited out, never fatal: the forwarder (started before
    // recovery) frees the room, and exiting would only restart into the same wait.
    const auto flush_or_wait = [&]() -> Result<void> {
        for (;;) {
            auto flushed = flush();
            if (!flushed) return std::unexpected(flushed.error());
            if (*flushed) return {};
            if (!wait_for_room())
                return fail("stopped while recovery waited for room (" + alarms_.outbox() + ")");
        }
    };
    uint64_t replayed = 0;
    uint64_t rows_since_checkpoint = 0;
    const uint64_t end = writer_->end_offset();
    for (;;) {
        const FeedResult fed =
            processor_->feed_until(*reader_, end, recovery_flush_records, *sink_);
        if (fed.records_read > 0) consumed_offset_ = fed.next_offset;
        replayed += fed.records_read;
        if (!fed.status) return std::unexpected(fed.status.error());
        if (fed.records_read < recovery_flush_records) break;
        rows_since_checkpoint += sink_->rows.size();
        if (auto ok = flush_or_wait(); !ok) return std::unexpected(ok.error());
        // A long replay checkpoints as the live loop does, so that the ids of the results it
        // committed can go (recovery_checkpoint_rows). Where it checkpoints changes no result
        // (the restore property); a failed one is tried again after as many rows.
        if (rows_since_checkpoint >= recovery_checkpoint_rows_) {
            rows_since_checkpoint = 0;
            if (auto ok = checkpoint(); !ok)
                spdlog::warn("recovery: {} (tried again later in the replay)", ok.error().message);
        }
    }
    queue_version_records();  // after every result the replay regenerated
    if (auto ok = flush_or_wait(); !ok) return std::unexpected(ok.error());
    // A plan that changed the registry (a changed config at this start) is committed now, with
    // the records it queued already in the outbox: a crash before the next checkpoint would
    // plan again with the clock of that start (backfill.from) and without what was dropped.
    if (stored_registry_ && registry_.encode() != stored_registry_->encode())
        if (auto ok = checkpoint(); !ok)
            spdlog::warn("the versions planned at this start wait for the next checkpoint: {}",
                         ok.error().message);
    note_damage();
    return replayed;
}

Result<size_t> EngineHost::step(size_t records_max, bool drain) {
    if (!sink_->rows.empty()) {
        auto flushed = flush();
        if (!flushed) return std::unexpected(flushed.error());
        if (!*flushed) return 0;
    }
    const bool written_end = drain || config_.storage.fsync == config::FsyncPolicy::never;
    // Only durable records are processed (fsync always/interval): after a power cut the outbox
    // never holds results of records the log lost.
    const uint64_t readable = written_end ? writer_->end_offset() : writer_->durable_offset();
    const FeedResult fed = processor_->feed_until(*reader_, readable, records_max, *sink_);
    if (fed.records_read > 0) consumed_offset_ = fed.next_offset;
    if (!fed.status) return std::unexpected(fed.status.error());
    note_damage();
    auto flushed = flush();
    if (!flushed) return std::unexpected(flushed.error());
    return fed.records_read;
}

// Side rows are diagnostic: when the store refuses them they are said and let go, never
// retried (a full side store drops its oldest rows itself). True when some were committed.
bool EngineHost::append_side() {
    if (sink_->side.empty()) return false;
    auto ok = store_->side_append(sink_->side);
    if (!ok)
        spdlog::warn("side output: {} ({} records not kept)", ok.error().message,
                     sink_->side.size());
    sink_->side.clear();
    return ok.has_value();
}

// Commits the step's rows. True when the outbox took them (or there were none); false while
// it cannot (full, map full, disk full, busy: the rows stay in memory, ingest pauses).
Result<bool> EngineHost::flush() {
    if (append_side() && forwarder_ && sink_->rows.empty()) forwarder_->notify();
    // After every result of the step that made them (DESIGN.md section 4).
    for (lmdb::OutboxRow& row : version_rows_)
        sink_->rows.push_back(std::move(row));
    version_rows_.clear();
    if (sink_->rows.empty()) {
        alarms_.set_outbox("");
        return true;
    }
    const int64_t now_ms = clock_.wall_ms();
    for (auto& row : sink_->rows)
        if (row.enqueued_ms == 0) row.enqueued_ms = now_ms;
    auto appended = store_->outbox_append(sink_->rows);
    if (!appended && appended.error().code == lmdb::errc::map_full) {
        make_room();  // then once more
        appended = store_->outbox_append(sink_->rows);
    }
    if (appended) {
        for (const lmdb::OutboxRow& row : sink_->rows)
            if (VersionEntry* e = row.version_record ? registry_.find(row.pipeline) : nullptr)
                e->record_pending = false;
        sink_->clear_rows();
        alarms_.set_outbox("");
        if (forwarder_) forwarder_->notify();
        return true;
    }
    switch (appended.error().code) {
        case lmdb::errc::full:
            alarms_.set_outbox("outbox_full");
            return false;
        case lmdb::errc::map_full:
            alarms_.set_outbox("map_full");
            return false;
        case lmdb::errc::disk_full:
            alarms_.set_outbox("disk_full");
            return false;
        case lmdb::errc::busy:
            return false;
        default:
            return fail("outbox: " + appended.error().message);
    }
}

// One checkpoint transaction: what the last plan dropped, every processor's changed state, the
// registry (after `extra` changed it and the transaction), the meta. Returns the outbox's
// seq_next it recorded. On failure nothing is stored and every processor will write again.
std::expected<uint64_t, lmdb::StoreError> EngineHost::commit_state(
    const std::function<void(lmdb::CheckpointTxn&, VersionRegistry&)>& extra) {
    // The log is durable up to the checkpoint's offset before the checkpoint commits.
    if (auto ok = writer_->sync(); !ok)
        return std::unexpected(lmdb::StoreError{lmdb::errc::io, ok.error().message});
    auto stats = store_->outbox_stats();
    if (!stats) return std::unexpected(stats.error());
    auto txn = store_->begin_checkpoint();
    if (!txn) return std::unexpected(txn.error());
    // What the last plan dropped goes first: the processors' writes below are never erased.
    for (const std::string& prefix : erase_prefixes_)
        (*txn)->erase_prefix(prefix);
    for (const std::string& key : erase_keys_)
        (*txn)->erase(key);
    processor_->checkpoint(**txn);
    VersionRegistry next = registry_;
    write_versions(**txn, next);
    if (extra) extra(**txn, next);
    (*txn)->put(versions_key, next.encode());
    lmdb::CheckpointMeta meta;
    meta.log_offset = consumed_offset_;
    meta.outbox_seq_next = stats->seq_next;
    meta.checkpoint_ms = clock_.wall_ms();
    meta.node_id = config_.node_id;
    auto committed = (*txn)->commit(meta);
    txn->reset();  // the write lock goes with it: what follows may write
    if (!committed) {
        // What the engine handed over is not in the store: the next checkpoint writes it again
        // (else window state would be older than the next offset, and erased keys come back).
        processor_->checkpoint_failed();
        for (auto& run : backfills_)
            run->processor().checkpoint_failed();
        return std::unexpected(committed.error());
    }
    registry_ = std::move(next);
    checkpoint_seq_next_ = stats->seq_next;
    erase_prefixes_.clear();
    erase_keys_.clear();
    checkpoint_.log_offset = consumed_offset_;
    checkpoint_.wall_ms = meta.checkpoint_ms;
    ++checkpoint_.count;
    return stats->seq_next;
}

Result<void> EngineHost::checkpoint() {
    TM_ASSERT(sink_->rows.empty());
    const int64_t t0 = clock_.steady_ms();
    auto committed = commit_state(nullptr);
    if (!committed) {
        alarms_.set_checkpoint("checkpoint_failed: " + committed.error().message);
        if (committed.error().code == lmdb::errc::map_full) make_room();
        return fail("checkpoint: " + committed.error().message);
    }
    alarms_.set_checkpoint("");
    const uint64_t seq_next = *committed;
    // Emissions before this checkpoint can never be regenerated (but what a resumed backfill
    // reads again, see hold_resumed_backfills): their ids may go.
    pruned_below_seq_ = prune_bound(seq_next);
    if (auto pruned = store_->prune_ids(pruned_below_seq_); !pruned)
        spdlog::warn("outbox: pruning ids: {}", pruned.error().message);
    // A killed reader (`tidemark inspect`, `replay`) would pin the pages it saw until restart.
    if (auto cleared = store_->check_stale_readers(); cleared && *cleared > 0)
        spdlog::info("lmdb: cleared {} stale readers", *cleared);
    auto retention = writer_->apply_retention(retention_offset(), clock_.wall_ms());
    if (!retention) spdlog::warn("log retention: {}", retention.error().message);
    checkpoint_.duration_ms = clock_.steady_ms() - t0;
    return {};
}

uint64_t EngineHost::trim_for_disk_full() {
    auto removed = writer_->apply_retention(retention_offset(), INT64_MAX);
    if (!removed) {
        spdlog::warn("disk full: trimming the log: {}", removed.error().message);
        return 0;
    }
    if (removed->bytes_removed > 0)
        spdlog::warn("disk full: removed {} log segments ({} bytes) before the last checkpoint",
                     removed->segments_removed, removed->bytes_removed);
    return removed->bytes_removed;
}

// The map is full (an outbox append or a checkpoint could not commit): what may go without
// losing anything goes. Ids of rows before the last committed checkpoint can never be
// regenerated; side output is diagnostic (counted in side_rows_dropped). The outbox itself
// drains upstream.
void EngineHost::make_room() {
    // A killed reader pins the pages it saw: freeing rows would not make room.
    (void)store_->check_stale_readers();
    if (auto pruned = store_->prune_ids(pruned_below_seq_); !pruned)
        spdlog::warn("map full: pruning ids: {}", pruned.error().message);
    auto side = store_->side_peek(0, side_trim_rows_max);
    if (side && !side->empty()) {
        std::vector<uint64_t> seqs;
        for (const auto& r : *side)
            seqs.push_back(r.seq);
        if (auto deleted = store_->side_delete(seqs); deleted) {
            side_rows_dropped_ += seqs.size();
            spdlog::warn("map full: dropped {} side output rows to make room", seqs.size());
        }
    }
}

// Says so in the journal when the engine's reader skipped damage since the last call.
void EngineHost::note_damage() {
    const log::ReaderStats rs = reader_->stats();
    if (rs.damaged_regions == damage_reported_) return;
    damage_reported_ = rs.damaged_regions;
    spdlog::error(
        "log: skipped damaged bytes ({} regions, {} bytes so far; last: {}); the "
        "records after them were read (a failing disk or a bad sector?)",
        rs.damaged_regions, rs.damaged_bytes, rs.last_damage);
}

}  // namespace tidemark::firmware
