#include "firmware/service_parts.h"

#include <spdlog/spdlog.h>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <fstream>
#include <nlohmann/json.hpp>

#include "adapters/codec/record.h"
#include "adapters/codec/topic.h"
#include "adapters/lmdb/store.h"
#include "adapters/log/log_reader.h"
#include "adapters/log/log_writer.h"
#include "adapters/log/segment_files.h"
#include "adapters/mqtt/client_options.h"
#include "adapters/mqtt/forwarder.h"
#include "adapters/mqtt/health.h"
#include "adapters/mqtt/ingest.h"
#include "adapters/mqtt/redelivery_filter.h"
#include "core/emission.h"
#include "firmware/clock.h"
#include "firmware/notify.h"
#include "firmware/processor.h"

namespace tidemark::firmware {

namespace {

// Side output rows dropped at once when the map is full: diagnostic rows go before results do.
constexpr size_t side_trim_rows_max = 100'000;

log::FsyncPolicy to_log(config::FsyncPolicy p) {
    switch (p) {
        case config::FsyncPolicy::always:
            return log::FsyncPolicy::always;
        case config::FsyncPolicy::interval:
            return log::FsyncPolicy::interval;
        case config::FsyncPolicy::never:
            return log::FsyncPolicy::never;
    }
    return log::FsyncPolicy::interval;
}

uint64_t rss_kib() {
    std::ifstream in("/proc/self/status");
    std::string line;
    while (std::getline(in, line))
        if (line.rfind("VmRSS:", 0) == 0) return std::strtoull(line.c_str() + 6, nullptr, 10);
    return 0;
}

// Emissions become outbox rows (the JSON record as sent upstream); side output and undecodable
// records become side rows.
class BatchSink : public ProcessorSink {
  public:
    explicit BatchSink(const config::Config& config)
        : config_(config), aggregate_names_(aggregate_names(config)) {}
    void emit(const core::Emission& e) override {
        lmdb::OutboxRow row;
        row.id = e.id;
        row.pipeline = config_.pipelines[e.pipeline].spec.name;
        row.key = e.key;
        row.window_start_ms = e.start_ms;
        row.window_end_ms = e.end_ms;
        row.revision = e.revision;
        row.kind = static_cast<uint8_t>(e.kind);
        codec::encode_result(config_.node_id, row.pipeline, aggregate_names_[e.pipeline], e,
                             row.payload);
        rows.push_back(std::move(row));
    }
    void side_output(const core::SideOutput& s) override {
        std::string out;
        codec::encode_side_output(config_.node_id, config_.pipelines[s.pipeline].spec.name, s, out);
        add_side(s.order, std::move(out));
    }
    void malformed(uint32_t pipeline, const log::Record& record, std::string_view reason) override {
        nlohmann::json j;
        j["node"] = config_.node_id;
        j["pipeline"] = config_.pipelines[pipeline].spec.name;
        j["malformed"] = std::string(reason);
        j["offset"] = record.offset;
        j["ingest_ms"] = record.ingest_ms;
        add_side(record.offset, j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    }
    std::vector<lmdb::OutboxRow> rows;
    std::vector<lmdb::SideRecord> side;

  private:
    // Side records are named by the log record that produced them and their rank among its
    // side records: a replay after a crash regenerates the same names, which the store skips.
    void add_side(uint64_t log_offset, std::string record) {
        if (log_offset != side_offset_) {
            side_offset_ = log_offset;
            side_ordinal_ = 0;
        }
        side.push_back({log_offset, side_ordinal_++, std::move(record)});
    }

    const config::Config& config_;
    std::vector<std::vector<std::string>> aggregate_names_;
    uint64_t side_offset_ = UINT64_MAX;
    uint32_t side_ordinal_ = 0;
};

class OutboxAdapter : public mqtt::OutboxSource {
  public:
    OutboxAdapter(lmdb::Store& store, const config::Config& config)
        : store_(store), config_(config) {}
    Result<std::vector<mqtt::OutboundRow>> peek(uint64_t from_seq, size_t limit) override {
        auto rows = store_.outbox_peek(from_seq, limit);
        if (!rows) return fail(rows.error().message);
        std::vector<mqtt::OutboundRow> out;
        out.reserve(rows->size());
        for (auto& r : *rows)
            out.push_back({r.seq,
                           codec::expand_topic_template(config_.upstream->topic, config_.node_id,
                                                        r.pipeline, r.key),
                           std::move(r.payload)});
        return out;
    }
    Result<void> delivered(std::span<const uint64_t> seqs) override {
        auto ok = store_.outbox_delete(seqs);
        if (!ok) return fail(ok.error().message);
        return {};
    }
    void claimed(uint64_t seq_next) override { store_.set_claimed(seq_next); }

  private:
    lmdb::Store& store_;
    const config::Config& config_;
};

// Side output (too-late events, undecodable records) goes upstream on side_topic, after the
// results (the forwarder reads this source only when the outbox has nothing to send).
class SideAdapter : public mqtt::OutboxSource {
  public:
    SideAdapter(lmdb::Store& store, const config::Config& config)
        : store_(store), config_(config) {}
    Result<std::vector<mqtt::OutboundRow>> peek(uint64_t from_seq, size_t limit) override {
        auto rows = store_.side_peek(from_seq, limit);
        if (!rows) return fail(rows.error().message);
        std::vector<mqtt::OutboundRow> out;
        out.reserve(rows->size());
        for (auto& r : *rows) {
            // The record names its pipeline and key (codec::encode_side_output, or the
            // malformed-record form above); a record that does not parse still goes, keyless.
            std::string pipeline, key;
            const auto j = nlohmann::json::parse(r.record, nullptr, /*allow_exceptions=*/false);
            if (j.is_object()) {
                if (auto it = j.find("pipeline"); it != j.end() && it->is_string())
                    pipeline = it->get<std::string>();
                if (auto it = j.find("key"); it != j.end() && it->is_string())
                    key = it->get<std::string>();
            }
            out.push_back({r.seq,
                           codec::expand_topic_template(config_.upstream->side_topic,
                                                        config_.node_id, pipeline, key),
                           std::move(r.record)});
        }
        return out;
    }
    Result<void> delivered(std::span<const uint64_t> seqs) override {
        auto ok = store_.side_delete(seqs);
        if (!ok) return fail(ok.error().message);
        return {};
    }
    void claimed(uint64_t) override {}  // side rows are never compacted

  private:
    lmdb::Store& store_;
    const config::Config& config_;
};

}  // namespace

struct ServiceParts::Impl {
    config::Config config;
    std::unique_ptr<lmdb::Store> store;
    std::unique_ptr<log::LogWriter> writer;
    std::unique_ptr<log::LogReader> reader;
    std::string log_dir;
    std::unique_ptr<Processor> processor;
    std::unique_ptr<BatchSink> sink;
    mqtt::RedeliveryFilter filter;
    std::unique_ptr<OutboxAdapter> outbox_source;
    std::unique_ptr<SideAdapter> side_source;
    std::unique_ptr<mqtt::Forwarder> forwarder;
    std::unique_ptr<mqtt::HealthPublisher> health;

    uint64_t checkpoint_offset = 0;  // of the last committed checkpoint
    uint64_t consumed_offset = 0;    // next record the engine reads
    uint64_t checkpoints = 0;
    int64_t checkpoint_wall_ms = 0;
    int64_t checkpoint_duration_ms = 0;
    int64_t started_ms = steady_ms();

    std::atomic<bool> paused{false};
    std::atomic<uint64_t> redeliveries_skipped{0};
    std::atomic<uint64_t> append_errors{0};
    std::atomic<bool> append_alarm{false};
    mutable std::mutex alarm_mutex;
    std::string append_error;       // the latest log append failure, for health
    std::string outbox_alarm;       // outbox_full | map_full | disk_full, while it lasts
    std::string checkpoint_alarm;   // set by a failed checkpoint until one commits
    ClockStatus clock;              // as last read by refresh_clock()
    uint64_t pruned_below_seq = 0;  // outbox seq of the last committed checkpoint
    uint64_t damage_reported = 0;   // damaged regions of the reader already in the journal

    mutable std::mutex health_mutex;
    std::string health_json = "{}";
    std::string status;

    Result<bool> flush() {
        if (!sink->side.empty()) {
            auto ok = store->side_append(sink->side);
            if (!ok)
                spdlog::warn("side output: {} ({} records not kept)", ok.error().message,
                             sink->side.size());
            else if (forwarder && sink->rows.empty())
                forwarder->notify();
            sink->side.clear();
        }
        if (sink->rows.empty()) {
            set_outbox_alarm("");
            return true;
        }
        const int64_t now_ms = wall_ms();
        for (auto& row : sink->rows)
            if (row.enqueued_ms == 0) row.enqueued_ms = now_ms;
        auto appended = store->outbox_append(sink->rows);
        if (!appended && appended.error().code == lmdb::errc::map_full) {
            make_room();  // then once more
            appended = store->outbox_append(sink->rows);
        }
        if (appended) {
            sink->rows.clear();
            set_outbox_alarm("");
            if (forwarder) forwarder->notify();
            return true;
        }
        switch (appended.error().code) {
            case lmdb::errc::full:
                set_outbox_alarm("outbox_full");
                return false;
            case lmdb::errc::map_full:
                set_outbox_alarm("map_full");
                return false;
            case lmdb::errc::disk_full:
                set_outbox_alarm("disk_full");
                return false;
            case lmdb::errc::busy:
                return false;
            default:
                return fail("outbox: " + appended.error().message);
        }
    }

    // The log's last messages, wherever the checkpoint is (after a clean stop it is at the end):
    // a broker that lost their PUBACKs redelivers them on our first connection. Reads the
    // newest segment, and the one before only when the newest holds too few.
    Result<void> seed_redelivery_filter() {
        auto segments = log::list_segments(log_dir);
        if (!segments) return std::unexpected(segments.error());
        if (segments->empty()) return {};
        auto tail_reader = log::LogReader::open(log_dir);
        if (!tail_reader) return std::unexpected(tail_reader.error());
        std::deque<std::pair<std::string, std::string>> tail;
        const size_t want = mqtt::RedeliveryFilter::candidates_max;
        size_t first = segments->size() - 1;
        for (;;) {
            tail.clear();
            if (auto ok =
                    (*tail_reader)
                        ->seek(std::max((*segments)[first].first_offset, writer->first_offset()));
                !ok)
                return std::unexpected(ok.error());
            log::Record rec;
            for (;;) {
                auto next = (*tail_reader)->next(rec, writer->end_offset());
                if (!next) return std::unexpected(next.error());
                if (!*next) break;
                if (rec.type != log::RecordType::message) continue;
                tail.emplace_back(std::string(rec.topic), std::string(rec.payload));
                if (tail.size() > want) tail.pop_front();
            }
            if (tail.size() >= want || first == 0) break;
            --first;
        }
        for (const auto& [topic, payload] : tail)
            filter.seed(topic, payload);
        return {};
    }

    // A pipeline removed from the config stops; its state goes (its outbox rows stay and are
    // sent). Keeping the state would refuse every start, a crash loop.
    Result<void> drop_removed_pipelines() {
        std::vector<std::string> removed;
        auto listed =
            store->for_each_state([&](std::string_view k, std::string_view) -> Result<void> {
                const auto name = core::Engine::pipeline_of_state_key(k);
                if (name && processor->engine().find_pipeline(*name) < 0 &&
                    std::find(removed.begin(), removed.end(), *name) == removed.end())
                    removed.push_back(*name);
                return {};
            });
        if (!listed) return fail("reading state: " + listed.error().message);
        for (const std::string& name : removed) {
            auto dropped = store->drop_prefix(core::Engine::state_prefix(name));
            if (!dropped)
                return fail("dropping the state of removed pipeline '" + name +
                            "': " + dropped.error().message);
            spdlog::warn(
                "pipeline '{}' is no longer in the config: its state ({} records) was "
                "dropped; its results already in the outbox are still sent",
                name, *dropped);
        }
        return {};
    }

    // The map is full and a checkpoint could not commit: what may go without losing anything
    // goes. Ids of rows before the last committed checkpoint can never be regenerated; side
    // output is diagnostic. The outbox itself drains upstream.
    void make_room() {
        // A killed reader pins the pages it saw: freeing rows would not make room.
        (void)store->check_stale_readers();
        if (auto pruned = store->prune_ids(pruned_below_seq); !pruned)
            spdlog::warn("map full: pruning ids: {}", pruned.error().message);
        auto side = store->side_peek(0, side_trim_rows_max);
        if (side && !side->empty()) {
            std::vector<uint64_t> seqs;
            for (const auto& r : *side)
                seqs.push_back(r.seq);
            if (auto deleted = store->side_delete(seqs); deleted)
                spdlog::warn("map full: dropped {} side output rows to make room", seqs.size());
        }
    }

    // Says so in the journal when the engine's reader skipped damage since the last call.
    void note_damage() {
        const log::ReaderStats rs = reader->stats();
        if (rs.damaged_regions == damage_reported) return;
        damage_reported = rs.damaged_regions;
        spdlog::error(
            "log: skipped damaged bytes ({} regions, {} bytes so far; last: {}); the "
            "records after them were read (a failing disk or a bad sector?)",
            rs.damaged_regions, rs.damaged_bytes, rs.last_damage);
    }

    void set_checkpoint_alarm(const std::string& alarm) {
        std::lock_guard<std::mutex> lk(alarm_mutex);
        if (alarm.empty() && !checkpoint_alarm.empty()) spdlog::info("checkpoints commit again");
        checkpoint_alarm = alarm;
    }

    void set_outbox_alarm(const std::string& alarm) {
        std::lock_guard<std::mutex> lk(alarm_mutex);
        if (alarm != outbox_alarm) {
            if (!alarm.empty())
                spdlog::warn("{}: ingest paused until the outbox can take the results", alarm);
            else if (!outbox_alarm.empty())
                spdlog::info("{} cleared: ingest resumed", outbox_alarm);
        }
        outbox_alarm = alarm;
        paused.store(!alarm.empty());
    }
};

ServiceParts::ServiceParts(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ServiceParts::~ServiceParts() {
    stop_clients();
}

Result<std::unique_ptr<ServiceParts>> ServiceParts::open(const config::Config& config) {
    auto impl = std::make_unique<Impl>();
    impl->config = config;
    const config::Config& c = impl->config;

    lmdb::StoreOptions so;
    so.dir = c.data_dir + "/state";
    so.map_size_bytes = c.storage.map_size_bytes;
    so.read_only = false;
    if (c.upstream) {
        so.outbox_bytes_max = c.upstream->outbox.max_bytes;
        so.outbox_when_full = c.upstream->outbox.when_full == config::WhenFull::pause_ingest
                                  ? lmdb::WhenFull::pause_ingest
                                  : lmdb::WhenFull::drop_oldest;
        so.compact_superseded = c.upstream->compact_superseded;
    }
    auto store = lmdb::Store::open(so);
    if (!store) return fail(store.error().message);
    impl->store = std::move(*store);
    if (impl->store->stale_readers_cleared())
        spdlog::info("state: cleared {} stale readers left by a killed process",
                     impl->store->stale_readers_cleared());

    log::LogOptions lo;
    lo.dir = c.data_dir + "/log";
    lo.fsync = to_log(c.storage.fsync);
    lo.fsync_interval_ms = c.storage.fsync_interval_ms;
    lo.segment_bytes = c.storage.segment_bytes;
    lo.retention_bytes_max = c.storage.log_retention.max_bytes;
    lo.retention_age_ms_max = c.storage.log_retention.max_age_ms;
    auto writer = log::LogWriter::open(lo);
    if (!writer) return std::unexpected(writer.error());
    impl->writer = std::move(*writer);
    const log::LogStats ls = impl->writer->stats();
    if (ls.tail_truncations)
        spdlog::warn("log: cut a torn tail of {} bytes (a crash or power loss during a write)",
                     ls.tail_bytes_cut);
    if (ls.damaged_regions)
        spdlog::error(
            "log: {} damaged regions ({} bytes) in the newest segment, with valid "
            "records after them: those are kept and read, the damaged bytes skipped "
            "(a failing disk or a bad sector?)",
            ls.damaged_regions, ls.damaged_bytes);

    auto processor = Processor::create(c);
    if (!processor) return std::unexpected(processor.error());
    impl->processor = std::move(*processor);
    impl->sink = std::make_unique<BatchSink>(impl->config);
    impl->log_dir = lo.dir;
    auto reader = log::LogReader::open(lo.dir);
    if (!reader) return std::unexpected(reader.error());
    impl->reader = std::move(*reader);
    return std::unique_ptr<ServiceParts>(new ServiceParts(std::move(impl)));
}

Result<uint64_t> ServiceParts::recover(const std::function<bool()>& wait_for_room) {
    Impl& m = *impl_;
    auto cp = m.store->load_checkpoint();
    if (!cp) return fail(cp.error().message);
    uint64_t offset = m.writer->first_offset();
    if (*cp) {
        if (auto dropped = m.drop_removed_pipelines(); !dropped)
            return std::unexpected(dropped.error());
        auto loaded = m.store->for_each_state([&](std::string_view k, std::string_view v) {
            return m.processor->restore_entry(k, v);
        });
        if (!loaded) return fail("restoring state: " + loaded.error().message);
        if (auto ok = m.processor->restore_finish(); !ok) {
            // Not a crash loop: a changed pipeline needs the operator (see DECISIONS.md).
            Error e{"restoring state: " + ok.error().message +
                        ". Put the previous definition back, or drop the pipeline's state with "
                        "`tidemark inspect --config FILE --drop-pipeline NAME` (it then starts "
                        "afresh from the checkpoint, and may send results for windows it had "
                        "sent before, under the same ids)",
                    exit_config_conflict};
            return std::unexpected(std::move(e));
        }
        offset = (*cp)->log_offset;
        m.checkpoint_wall_ms = (*cp)->checkpoint_ms;
        if (offset < m.writer->first_offset())
            return fail("the checkpoint points at log offset " + std::to_string(offset) +
                        " but the log starts at " + std::to_string(m.writer->first_offset()) +
                        ": segments were removed by hand; restore them or clear data_dir");
    }
    if (offset > m.writer->end_offset())
        return fail("the checkpoint points at log offset " + std::to_string(offset) +
                    " past the log's end " + std::to_string(m.writer->end_offset()) +
                    ": the log was truncated or replaced; clear data_dir/state to rebuild");
    m.checkpoint_offset = offset;
    m.consumed_offset = offset;
    if (auto ok = m.reader->seek(offset); !ok) return std::unexpected(ok.error());
    // A full outbox, map or disk is waited out, never fatal: the forwarder (started before
    // recovery) frees the room, and exiting would only restart into the same wait.
    const auto flush_or_wait = [&]() -> Result<void> {
        for (;;) {
            auto flushed = m.flush();
            if (!flushed) return std::unexpected(flushed.error());
            if (*flushed) return {};
            if (!wait_for_room())
                return fail("stopped while recovery waited for room (" + m.outbox_alarm + ")");
        }
    };
    uint64_t replayed = 0;
    log::Record rec;
    const uint64_t end = m.writer->end_offset();
    for (;;) {
        auto next = m.reader->next(rec, end);
        if (!next) return std::unexpected(next.error());
        if (!*next) break;
        m.processor->feed(rec, *m.sink);
        m.consumed_offset = rec.next_offset;
        if (++replayed % 4096 == 0)
            if (auto ok = flush_or_wait(); !ok) return std::unexpected(ok.error());
    }
    if (auto ok = flush_or_wait(); !ok) return std::unexpected(ok.error());
    m.note_damage();
    if (auto ok = m.seed_redelivery_filter(); !ok) return std::unexpected(ok.error());
    return replayed;
}

uint64_t ServiceParts::checkpoint_offset() const {
    return impl_->checkpoint_offset;
}

Result<size_t> ServiceParts::step(size_t records_max, bool drain) {
    Impl& m = *impl_;
    if (!m.sink->rows.empty()) {
        auto flushed = m.flush();
        if (!flushed) return std::unexpected(flushed.error());
        if (!*flushed) return 0;
    }
    const bool written_end = drain || m.config.storage.fsync == config::FsyncPolicy::never;
    // Only durable records are processed (fsync always/interval): after a power cut the outbox
    // never holds results of records the log lost.
    const uint64_t readable = written_end ? m.writer->end_offset() : m.writer->durable_offset();
    size_t n = 0;
    log::Record rec;
    while (n < records_max) {
        auto next = m.reader->next(rec, readable);
        if (!next) return std::unexpected(next.error());
        if (!*next) break;
        m.processor->feed(rec, *m.sink);
        m.consumed_offset = rec.next_offset;
        ++n;
    }
    m.note_damage();
    auto flushed = m.flush();
    if (!flushed) return std::unexpected(flushed.error());
    return n;
}

bool ServiceParts::can_checkpoint() const {
    return impl_->sink->rows.empty();
}

Result<void> ServiceParts::checkpoint() {
    Impl& m = *impl_;
    TM_ASSERT(m.sink->rows.empty());
    const int64_t t0 = steady_ms();
    // The log is durable up to the checkpoint's offset before the checkpoint commits.
    if (auto ok = m.writer->sync(); !ok) return ok;
    auto stats = m.store->outbox_stats();
    if (!stats) return fail(stats.error().message);
    const uint64_t seq_next = stats->seq_next;
    auto txn = m.store->begin_checkpoint();
    if (!txn) return fail(txn.error().message);
    m.processor->checkpoint(**txn);
    lmdb::CheckpointMeta meta;
    meta.log_offset = m.consumed_offset;
    meta.outbox_seq_next = seq_next;
    meta.checkpoint_ms = wall_ms();
    meta.config_fingerprint = m.config.node_id;
    auto committed = (*txn)->commit(meta);
    txn->reset();  // the write lock goes with it: the trim below writes
    if (!committed) {
        // What the engine handed over is not in the store: the next checkpoint writes it again
        // (else window state would be older than the next offset, and erased keys come back).
        m.processor->checkpoint_failed();
        m.set_checkpoint_alarm("checkpoint_failed: " + committed.error().message);
        if (committed.error().code == lmdb::errc::map_full) m.make_room();
        return fail("checkpoint: " + committed.error().message);
    }
    m.set_checkpoint_alarm("");
    m.checkpoint_offset = m.consumed_offset;
    m.checkpoint_wall_ms = meta.checkpoint_ms;
    ++m.checkpoints;
    // Emissions before this checkpoint can never be regenerated: their ids may go.
    m.pruned_below_seq = seq_next;
    if (auto pruned = m.store->prune_ids(seq_next); !pruned)
        spdlog::warn("outbox: pruning ids: {}", pruned.error().message);
    // A killed reader (`tidemark inspect`, `replay`) would pin the pages it saw until restart.
    if (auto cleared = m.store->check_stale_readers(); cleared && *cleared > 0)
        spdlog::info("lmdb: cleared {} stale readers", *cleared);
    auto retention = m.writer->apply_retention(m.checkpoint_offset, wall_ms());
    if (!retention) spdlog::warn("log retention: {}", retention.error().message);
    m.checkpoint_duration_ms = steady_ms() - t0;
    return {};
}

log::LogWriter& ServiceParts::log() {
    return *impl_->writer;
}
lmdb::Store& ServiceParts::store() {
    return *impl_->store;
}
mqtt::RedeliveryFilter& ServiceParts::redelivery_filter() {
    return impl_->filter;
}
bool ServiceParts::ingest_paused() const {
    return impl_->paused.load();
}
void ServiceParts::count_redelivery_skipped() {
    ++impl_->redeliveries_skipped;
}
void ServiceParts::append_failed(const std::string& message) {
    ++impl_->append_errors;
    std::lock_guard<std::mutex> lk(impl_->alarm_mutex);
    if (impl_->append_error != message) spdlog::error("log append: {}", message);
    impl_->append_error = message;
    impl_->append_alarm.store(true);
}
void ServiceParts::append_succeeded() {
    if (!impl_->append_alarm.load(std::memory_order_relaxed)) return;
    std::lock_guard<std::mutex> lk(impl_->alarm_mutex);
    if (!impl_->append_error.empty()) spdlog::info("log append works again");
    impl_->append_error.clear();
    impl_->append_alarm.store(false);
}

bool ServiceParts::disk_full() const {
    std::lock_guard<std::mutex> lk(impl_->alarm_mutex);
    return impl_->outbox_alarm == "disk_full" ||
           impl_->append_error.find(std::strerror(ENOSPC)) != std::string::npos;
}

uint64_t ServiceParts::trim_for_disk_full() {
    Impl& m = *impl_;
    auto removed = m.writer->apply_retention(m.checkpoint_offset, INT64_MAX);
    if (!removed) {
        spdlog::warn("disk full: trimming the log: {}", removed.error().message);
        return 0;
    }
    if (removed->bytes_removed > 0)
        spdlog::warn("disk full: removed {} log segments ({} bytes) before the last checkpoint",
                     removed->segments_removed, removed->bytes_removed);
    return removed->bytes_removed;
}

std::optional<std::string> ServiceParts::log_failure() const {
    if (!impl_->writer->poisoned()) return std::nullopt;
    return impl_->writer->poison_error();
}

bool ServiceParts::engine_clock_trusted() {
    return impl_->processor->engine().clock_trusted();
}

bool ServiceParts::refresh_clock() {
    const ClockStatus status = read_clock_status(impl_->config.source.clock_trust);
    std::lock_guard<std::mutex> lk(impl_->alarm_mutex);
    impl_->clock = status;
    return status.trusted;
}

Result<void> ServiceParts::start_forwarder() {
    Impl& m = *impl_;
    if (!m.config.upstream) return {};
    m.outbox_source = std::make_unique<OutboxAdapter>(*m.store, m.config);
    m.side_source = std::make_unique<SideAdapter>(*m.store, m.config);
    mqtt::ForwarderOptions fo;
    fo.broker = upstream_broker_options(m.config);
    fo.qos = m.config.upstream->qos;
    fo.reconnect_delay_min_ms = config::UpstreamConfig::reconnect_min_ms;
    fo.reconnect_delay_max_ms = m.config.upstream->reconnect_max_ms;
    auto fwd = mqtt::Forwarder::create(
        fo, std::vector<mqtt::OutboxSource*>{m.outbox_source.get(), m.side_source.get()});
    if (!fwd) return std::unexpected(fwd.error());
    m.forwarder = std::move(*fwd);
    return m.forwarder->start();
}

Result<void> ServiceParts::start_health() {
    Impl& m = *impl_;
    mqtt::HealthOptions ho;
    ho.broker = source_broker_options(m.config);
    ho.broker.client_id += "-health";
    ho.broker.config_name = "health";
    ho.topic = codec::expand_topic_template(m.config.health.topic, m.config.node_id, "", "");
    ho.status_topic = mqtt::status_topic_for(ho.topic);
    ho.interval_ms = m.config.health.interval_ms;
    auto hp = mqtt::HealthPublisher::create(ho, [this] {
        std::lock_guard<std::mutex> lk(impl_->health_mutex);
        return impl_->health_json;
    });
    if (!hp) return std::unexpected(hp.error());
    m.health = std::move(*hp);
    return m.health->start();
}

void ServiceParts::refresh_health(const mqtt::Ingest* ingest) {
    Impl& m = *impl_;
    using nlohmann::json;
    json h;
    h["node"] = m.config.node_id;
    h["time_ms"] = wall_ms();
    h["uptime_s"] = (steady_ms() - m.started_ms) / 1000;
    json alarms = json::array();
    {
        std::lock_guard<std::mutex> lk(m.alarm_mutex);
        if (!m.outbox_alarm.empty()) alarms.push_back(m.outbox_alarm);
        if (!m.checkpoint_alarm.empty()) alarms.push_back(m.checkpoint_alarm);
        if (!m.clock.trusted) alarms.push_back("clock_unsynchronised");
        h["clock"] = {{"synchronised", m.clock.kernel_synchronised},
                      {"trusted", m.clock.trusted},
                      {"sync_service", m.clock.sync_service}};
        if (!m.append_error.empty()) alarms.push_back("log_append_failed: " + m.append_error);
    }
    json pipelines = json::object();
    core::Engine& engine = m.processor->engine();
    for (uint32_t i = 0; i < m.config.pipelines.size(); ++i) {
        const core::PipelineStats& s = engine.stats(i);
        const DecodeCounters& d = m.processor->decode_counters()[i];
        json p;
        p["watermark_ms"] = s.watermark_ms;
        const auto lag_ms = core::watermark_lag_ms(s);
        p["watermark_lag_ms"] = lag_ms ? json(*lag_ms) : json(nullptr);
        p["events_in"] = s.events_in;
        p["late_updated"] = s.late_updated;
        p["too_late"] = s.too_late;
        p["too_late_partial"] = s.too_late_partial;
        p["partitions_forgotten"] = s.partitions_forgotten;
        p["side_outputs"] = s.side_outputs;
        p["clamped"] = s.clamped;
        p["malformed"] = d.malformed;
        p["fields_missing"] = d.fields_missing;
        p["keys_refused"] = s.keys_refused;
        p["windows_refused"] = s.windows_refused;
        p["partitions_active"] = s.partitions_active;
        p["partitions_idle"] = s.partitions_idle;
        p["keys"] = s.keys;
        p["open_windows"] = s.open_windows;
        p["state_bytes"] = s.state_bytes;
        p["emitted"] = {{"final", s.emitted_final},
                        {"update", s.emitted_update},
                        {"retract", s.emitted_retract}};
        p["lag_ms"] = {{"p50", s.lag_ms.quantile(0.5)},
                       {"p99", s.lag_ms.quantile(0.99)},
                       {"p999", s.lag_ms.quantile(0.999)}};
        pipelines[m.config.pipelines[i].spec.name] = p;
    }
    h["pipelines"] = pipelines;
    json in;
    if (ingest) {
        const mqtt::IngestStats is = ingest->stats();
        in["connected"] = is.connected;
        in["messages"] = is.messages;
        in["bytes"] = is.bytes;
        in["duplicates_flagged"] = is.duplicates;
        in["reconnects"] = is.reconnects;
        in["retries"] = is.handler_retries;
        in["retained_skipped"] = is.retained_skipped;
        in["last_error"] = is.last_error;
    } else {
        in["connected"] = false;
    }
    in["redeliveries_skipped"] = m.redeliveries_skipped.load();
    in["append_errors"] = m.append_errors.load();
    in["paused"] = m.paused.load();
    in["malformed_records"] = m.processor->malformed_records();
    h["ingest"] = in;
    const log::LogStats ls = m.writer->stats();
    h["log"] = {
        {"bytes", ls.total_bytes},
        {"segments", ls.segments},
        {"first_offset", ls.first_offset},
        {"end_offset", ls.end_offset},
        {"durable_offset", ls.durable_offset},
        {"engine_offset", m.consumed_offset},
        {"oldest_ingest_ms",
         ls.oldest_ingest_ms == log::ingest_ms_unknown ? json(nullptr) : json(ls.oldest_ingest_ms)},
        {"records_appended", ls.records_appended},
        {"tail_truncations", ls.tail_truncations},
        {"poisoned", ls.poisoned}};
    // Damage (a bad sector mid-log) found when the newest segment was opened, or skipped by
    // the engine's reader: the records after it were kept, the bytes in between are lost. The
    // reader may cross what the open found, so the larger of the two counts, not their sum.
    const log::ReaderStats rs = m.reader->stats();
    h["log"]["damaged_regions"] = std::max(rs.damaged_regions, ls.damaged_regions);
    h["log"]["damaged_bytes"] = std::max(rs.damaged_bytes, ls.damaged_bytes);
    if (rs.damaged_regions > 0 || ls.damaged_regions > 0) {
        h["log"]["last_damage"] = rs.last_damage;
        alarms.push_back("log_damaged");
    }
    h["checkpoint"] = {{"count", m.checkpoints},
                       {"age_ms", m.checkpoint_wall_ms ? wall_ms() - m.checkpoint_wall_ms : -1},
                       {"duration_ms", m.checkpoint_duration_ms},
                       {"log_offset", m.checkpoint_offset}};
    if (auto os = m.store->outbox_stats()) {
        h["outbox"] = {
            {"rows", os->rows},
            {"bytes", os->bytes},
            {"oldest_seq", os->oldest_seq},
            {"oldest_age_ms", os->oldest_enqueued_ms > 0
                                  ? json(std::max<int64_t>(wall_ms() - os->oldest_enqueued_ms, 0))
                                  : json(nullptr)},
            {"dropped", os->dropped},
            {"compacted", os->compacted},
            {"duplicates_skipped", os->duplicates_skipped}};
    }
    if (m.forwarder) {
        const mqtt::ForwarderStats fs = m.forwarder->stats();
        h["upstream"] = {{"link_up", fs.link_up},
                         {"sends", fs.sends},
                         {"acks", fs.acks},
                         {"reconnects", fs.reconnects},
                         {"inflight", fs.inflight},
                         {"rejected", fs.rejected},
                         {"first_row_after_reconnect_ms",
                          fs.first_row_after_reconnect_ms ? json(*fs.first_row_after_reconnect_ms)
                                                          : json(nullptr)},
                         {"offline_since_ms", fs.offline_since_ms},
                         {"last_error", fs.last_error}};
    } else {
        h["upstream"] = {{"configured", false}};
    }
    if (auto ss = m.store->side_stats())
        h["side"] = {{"rows", ss->rows}, {"bytes", ss->bytes}, {"dropped", ss->dropped}};
    if (auto used = m.store->map_used_bytes())
        h["map"] = {{"used_bytes", *used}, {"size_bytes", m.store->map_size_bytes()}};
    h["rss_kib"] = rss_kib();
    std::string text = h.dump(-1, ' ', false, json::error_handler_t::replace);
    std::string status;
    if (!alarms.empty())
        status = "alarm: " + alarms[0].get<std::string>();
    else if (m.forwarder && !m.forwarder->stats().link_up)
        status = "running, upstream offline";
    else
        status = "running";
    h["alarms"] = alarms;
    text = h.dump(-1, ' ', false, json::error_handler_t::replace);
    std::lock_guard<std::mutex> lk(m.health_mutex);
    m.health_json = std::move(text);
    m.status = std::move(status);
}

std::string ServiceParts::status_line() const {
    std::lock_guard<std::mutex> lk(impl_->health_mutex);
    return impl_->status;
}

void ServiceParts::reload(const std::string& config_path, Notifier& notifier) {
    notifier.reloading();
    auto loaded = config::load_config_file(config_path);
    if (!loaded) {
        const std::string why = config::format_errors(loaded.error());
        spdlog::error("reload refused, the running config stays: {}", why);
        notifier.status("reload refused: the new config has errors (see the journal)");
        notifier.ready();
        return;
    }
    const config::Config& now = impl_->config;
    std::vector<std::string> needs_restart;
    if (loaded->node_id != now.node_id) needs_restart.push_back("node_id");
    if (loaded->data_dir != now.data_dir) needs_restart.push_back("data_dir");
    if (loaded->source.uri != now.source.uri) needs_restart.push_back("source");
    if (loaded->pipelines.size() != now.pipelines.size()) needs_restart.push_back("pipelines");
    for (size_t i = 0; i < std::min(loaded->pipelines.size(), now.pipelines.size()); ++i)
        if (core::state_fingerprint(loaded->pipelines[i].spec) !=
                core::state_fingerprint(now.pipelines[i].spec) ||
            loaded->pipelines[i].spec.name != now.pipelines[i].spec.name)
            needs_restart.push_back("pipelines/" + std::to_string(i));
    if (!needs_restart.empty()) {
        std::string list;
        for (const auto& s : needs_restart)
            list += (list.empty() ? "" : ", ") + s;
        spdlog::warn(
            "reload: {} changed; these need a restart (systemctl restart tidemark), "
            "the running config stays",
            list);
        notifier.status("reload refused: " + list + " need a restart");
    } else {
        spdlog::set_level(spdlog::level::from_str(loaded->log_level));
        impl_->config.log_level = loaded->log_level;
        spdlog::info("reload: applied log_level {}", loaded->log_level);
        notifier.status("reloaded");
    }
    notifier.ready();
}

void ServiceParts::stop_clients() {
    if (impl_->forwarder) impl_->forwarder->stop(std::chrono::seconds(2));
    if (impl_->health) impl_->health->stop(std::chrono::seconds(2));
    impl_->forwarder.reset();
    impl_->health.reset();
}

}  // namespace tidemark::firmware
