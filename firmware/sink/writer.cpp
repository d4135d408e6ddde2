#include "firmware/sink/writer.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <random>

#include "core/backoff.h"

namespace tidemark::firmware::sink {

namespace {

constexpr int64_t idle_wait_ms = 100;  // the loop's pulse while the spool is empty
constexpr int64_t wait_slice_ms = 100;

bool is_kind(const Error& e, postgres::ErrorKind kind) {
    return e.code == static_cast<int>(kind);
}

}  // namespace

SinkWriter::SinkWriter(WriterOptions options, Spool& spool, const core::Clock& clock)
    : options_(std::move(options)), spool_(spool), clock_(clock) {
    TM_ASSERT(options_.batch_rows_max > 0);
}

SinkWriter::~SinkWriter() {
    stop();
}

Result<void> SinkWriter::start() {
    TM_ASSERT(!thread_.joinable());
    heartbeat_ms_ = clock_.steady_ms();
    attempted_end_ = spool_.end_offset_at_open();
    try {
        thread_ = std::thread([this] { run(); });
    } catch (const std::system_error& e) {
        return fail(std::string("sink: cannot start the writer thread: ") + e.what());
    }
    return {};
}

void SinkWriter::stop() {
    {
        std::lock_guard lock(mutex_);
        stopping_ = true;
        wake_.notify_all();
    }
    if (thread_.joinable()) thread_.join();
}

WriterStats SinkWriter::stats(bool take_lag) {
    std::lock_guard lock(mutex_);
    WriterStats out = stats_;
    if (take_lag) {
        stats_.commit_lag = {};
        stats_.watermark_lag = {};
    }
    return out;
}

std::string SinkWriter::fatal_error() const {
    std::lock_guard lock(mutex_);
    return stats_.fatal ? stats_.fatal_error : std::string();
}

// The one reconnect backoff (core/backoff.h), its jitter drawn here: sinks that lost the same
// database spread their reconnects.
int64_t SinkWriter::backoff_ms(int failures) {
    const core::Backoff backoff{options_.reconnect_delay_min_ms, options_.reconnect_delay_max_ms};
    return backoff.wait_ms(failures, std::uniform_real_distribution<double>(0.0, 1.0)(rng_));
}

void SinkWriter::wait(int64_t ms) {
    const int64_t until = clock_.steady_ms() + ms;
    std::unique_lock lock(mutex_);
    for (int64_t left = ms; left > 0 && !stopping_; left = until - clock_.steady_ms()) {
        heartbeat_ms_ = clock_.steady_ms();
        wake_.wait_for(lock, std::chrono::milliseconds(std::min(left, wait_slice_ms)));
    }
}

void SinkWriter::disconnected(const Error& error) {
    const bool lost =
        is_kind(error, postgres::ErrorKind::connection) || (store_ != nullptr && store_->broken());
    {
        std::lock_guard lock(mutex_);
        ++stats_.postgres_failures;
        if (stats_.postgres_error != error.message)
            spdlog::warn("sink: PostgreSQL: {}{}", error.message,
                         lost ? "; reconnecting" : "; trying again");
        stats_.postgres_up = false;
        stats_.postgres_error = error.message;
        stats_.last_postgres_error = error.message;
    }
    // Anything but a refusal leaves the transaction's outcome to the offset read back at the
    // next connect, so a new connection is the simple and always-right answer.
    store_.reset();
}

bool SinkWriter::connect() {
    auto store = postgres::SinkStore::open(options_.store);
    if (!store) {
        disconnected(store.error());
        return false;
    }
    auto mark = (*store)->read_mark(options_.client_id);
    if (!mark) {
        disconnected(mark.error());
        return false;
    }
    const uint64_t first = spool_.first_offset();
    const uint64_t highest = std::max(attempted_end_, spool_.end_offset_at_open());
    uint64_t position = first;
    std::string problem;
    if (!*mark) {
        // A new sink (or a new client_id): everything the spool holds is new.
    } else if ((*mark)->spool_id != spool_.id()) {
        spdlog::warn(
            "sink: the database's offset belongs to spool {}, not {} (a spool made "
            "anew): committing this one from its start",
            (*mark)->spool_id, spool_.id());
    } else if ((*mark)->offset < first) {
        problem = "the database holds the spool up to " + std::to_string((*mark)->offset) +
                  " but the spool starts at " + std::to_string(first) +
                  " (a database restored from an older backup?): messages in between are "
                  "missing from the database";
    } else if ((*mark)->offset > highest) {
        problem = "the database holds the spool up to " + std::to_string((*mark)->offset) +
                  " but it ends at " + std::to_string(highest) +
                  " (the spool lost its tail): resuming at its end";
        position = highest;
    } else {
        position = (*mark)->offset;
    }
    if (!problem.empty()) spdlog::warn("sink: {}", problem);
    auto reader = log::LogReader::open(spool_.log_dir());
    if (!reader) {
        disconnected(Error{"opening the spool: " + reader.error().message});
        return false;
    }
    if (auto sought = (*reader)->seek(position); !sought) {
        disconnected(Error{"reading the spool: " + sought.error().message});
        return false;
    }
    reader_ = std::move(*reader);
    position_ = position;
    if (auto ok = spool_.committed(position_); !ok)
        spdlog::warn("sink: removing committed spool segments: {}", ok.error().message);
    std::lock_guard lock(mutex_);
    if (!stats_.postgres_up && stats_.postgres_connects > 0)
        spdlog::info("sink: PostgreSQL is back; resuming the spool at {}", position_);
    ++stats_.postgres_connects;
    stats_.postgres_up = true;
    stats_.postgres_error.clear();
    if (!problem.empty()) stats_.resume_problem = problem;
    stats_.schema_version = (*store)->schema_version();
    stats_.server_version = (*store)->server_version();
    store_ = std::move(*store);
    return true;
}

Result<void> SinkWriter::read_batch(Pending& out) {
    core::SinkBatchBuilder builder;
    int64_t deadline_ms = INT64_MAX;
    log::Record record;
    while (builder.records() < options_.batch_rows_max) {
        {
            std::lock_guard lock(mutex_);
            if (stopping_) break;
        }
        auto next = reader_->next(record, spool_.end_offset());
        if (!next) return std::unexpected(next.error());
        if (*next) {
            if (record.type == log::RecordType::tick) continue;  // none are written; harmless
            core::UpstreamRecord parsed =
                record.type == log::RecordType::malformed
                    ? core::UpstreamRecord(core::Refusal{std::string(record.reason)})
                    : parser_.parse(record.topic, record.payload);
            if (const auto* r = std::get_if<core::ReceivedResult>(&parsed))
                out.watermark_ms.push_back(r->watermark_ms);
            out.receive_ms.push_back(record.ingest_ms);
            builder.add(std::move(parsed), record.topic, record.payload, record.ingest_ms,
                        record.offset);
            if (deadline_ms == INT64_MAX)
                deadline_ms = clock_.steady_ms() + options_.batch_delay_ms;
            continue;
        }
        heartbeat_ms_ = clock_.steady_ms();
        if (builder.records() == 0) {
            spool_.wait_for_data(reader_->position(), idle_wait_ms);
            break;  // back to the loop (heartbeat, stop) after one wait
        }
        const int64_t now = clock_.steady_ms();
        if (now >= deadline_ms) break;
        spool_.wait_for_data(reader_->position(), deadline_ms - now);
    }
    out.end_offset = reader_->position();
    out.batch = builder.take();
    return {};
}

Result<std::vector<core::SinkBatch>> SinkWriter::read_parts(uint64_t from, uint64_t to) {
    auto reader = log::LogReader::open(spool_.log_dir());
    if (!reader) return std::unexpected(reader.error());
    if (auto ok = (*reader)->seek(from); !ok) return std::unexpected(ok.error());
    std::vector<core::SinkBatch> parts;
    log::Record record;
    while ((*reader)->position() < to) {
        auto next = (*reader)->next(record, to);
        if (!next) return std::unexpected(next.error());
        if (!*next) break;
        if (record.type == log::RecordType::tick) continue;
        core::SinkBatchBuilder builder;
        builder.add(record.type == log::RecordType::malformed
                        ? core::UpstreamRecord(core::Refusal{std::string(record.reason)})
                        : parser_.parse(record.topic, record.payload),
                    record.topic, record.payload, record.ingest_ms, record.offset);
        core::SinkBatch part = builder.take();
        part.sources.push_back({std::string(record.topic), std::string(record.payload), "",
                                record.ingest_ms, record.offset});
        parts.push_back(std::move(part));
    }
    return parts;
}

Result<void> SinkWriter::start_commit(Pending& p) {
    // The database must never hold an offset past what the spool has made durable: after a
    // power cut the spool would be shorter than the offset says.
    if (spool_.durable_offset() < p.end_offset) {
        if (auto synced = spool_.sync(); !synced) {
            std::lock_guard lock(mutex_);
            stats_.fatal = true;
            stats_.fatal_error = "the spool cannot be made durable: " + synced.error().message;
            return std::unexpected(Error{stats_.fatal_error});
        }
    }
    attempted_end_ = std::max(attempted_end_, p.end_offset);
    return store_->start_commit(p.batch, {options_.client_id, spool_.id(), p.end_offset});
}

Result<postgres::CommitOutcome> SinkWriter::finish_commit(Pending& p) {
    auto outcome = store_->finish_commit();
    if (!outcome && is_kind(outcome.error(), postgres::ErrorKind::refused)) {
        spdlog::warn(
            "sink: PostgreSQL refused a batch of {} messages ({}); committing them one "
            "by one",
            p.batch.records, outcome.error().message);
        auto parts = read_parts(position_, p.end_offset);
        if (!parts) return std::unexpected(Error{"rereading the spool: " + parts.error().message});
        outcome = store_->commit_parts(*parts, {options_.client_id, spool_.id(), p.end_offset});
        if (outcome) {
            std::lock_guard lock(mutex_);
            ++stats_.isolated_commits;
        }
    }
    return outcome;
}

void SinkWriter::record(const Pending& p, const postgres::CommitOutcome& outcome,
                        int64_t started_ms) {
    const int64_t now_wall = clock_.wall_ms();
    std::lock_guard lock(mutex_);
    WriterStats& s = stats_;
    s.rows_written += outcome.rows_written;
    s.rows_older += outcome.rows_older;
    s.rejected += outcome.rejected;
    s.side_rows += outcome.side_rows;
    s.health_rows += outcome.health_rows;
    s.health_older += outcome.health_older;
    s.late_rows += outcome.late_rows;
    s.late_older += outcome.late_older;
    s.versions_changed += outcome.versions_changed;
    s.versions_older += outcome.versions_older;
    s.versions_removed += outcome.versions_removed;
    s.views_updated += outcome.views_updated;
    s.records_committed += p.batch.records;
    ++s.commits;
    s.last_batch_records = p.batch.records;
    s.last_commit_ms = now_wall;
    s.last_commit_duration_ms = clock_.steady_ms() - started_ms;
    for (const auto& problem : outcome.view_problems) {
        spdlog::warn("sink: {}", problem);
        s.view_problems.push_back(problem);
    }
    if (s.view_problems.size() > view_problems_max)
        s.view_problems.erase(s.view_problems.begin(), s.view_problems.end() - view_problems_max);
    // DESIGN.md section 10: refused input is logged with its topic, never fatal. At most a line
    // every rejected_log_interval_ms, so that a flood of garbage does not flood the journal.
    rejected_unlogged_ += p.batch.rejected.size();
    if (!p.batch.rejected.empty() &&
        clock_.steady_ms() - rejected_logged_ms_ >= rejected_log_interval_ms) {
        const core::RejectedMessage& r = p.batch.rejected.back();
        spdlog::warn("sink: {} message(s) rejected (in the table rejected), the latest on '{}': {}",
                     rejected_unlogged_, r.topic, r.reason);
        rejected_unlogged_ = 0;
        rejected_logged_ms_ = clock_.steady_ms();
    }
    for (const int64_t received : p.receive_ms)
        s.commit_lag.add(now_wall - received);
    for (const int64_t watermark : p.watermark_ms)
        s.watermark_lag.add(now_wall - watermark);
}

void SinkWriter::run() {
    int failures = 0;
    Pending next;  // read while the previous batch was committing
    auto fail_over = [&](const Error& error) {
        disconnected(error);  // the next connect reads the offset back and seeks there
        next = Pending{};
        wait(backoff_ms(failures++));
    };
    while (true) {
        {
            std::lock_guard lock(mutex_);
            if (stopping_ || stats_.fatal) return;
        }
        heartbeat_ms_ = clock_.steady_ms();
        if (!store_) {
            next = Pending{};
            if (!connect()) {
                wait(backoff_ms(failures++));
                continue;
            }
            failures = 0;
        }
        Pending current = std::move(next);
        next = Pending{};
        if (current.batch.empty()) {
            if (auto read = read_batch(current); !read) {
                fail_over(Error{"reading the spool: " + read.error().message});
                continue;
            }
            if (current.batch.empty()) continue;  // nothing new yet
        }
        const int64_t started_ms = clock_.steady_ms();
        if (auto started = start_commit(current); !started) {
            fail_over(started.error());
            continue;
        }
        // While the database works on this batch, read the next one.
        auto read = read_batch(next);
        auto outcome = finish_commit(current);
        if (!outcome) {
            fail_over(outcome.error());
            continue;
        }
        failures = 0;
        position_ = current.end_offset;
        if (auto ok = spool_.committed(position_); !ok)
            spdlog::warn("sink: removing committed spool segments: {}", ok.error().message);
        record(current, *outcome, started_ms);
        if (!read) fail_over(Error{"reading the spool: " + read.error().message});
    }
}

}  // namespace tidemark::firmware::sink
