#include "firmware/sink/spool.h"

#include <fcntl.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <random>

#include "adapters/log/log_reader.h"
#include "adapters/log/segment_files.h"

namespace tidemark::firmware::sink {

namespace {

constexpr size_t spool_id_bytes = 16;

std::string errno_text(const std::string& what) {
    return what + ": " + std::strerror(errno);
}

// The spool's id: read, or made and written durably (file, then directory) when missing.
Result<std::string> spool_id(const std::string& dir) {
    const std::string path = dir + "/spool-id";
    if (std::ifstream in(path); in) {
        std::string id;
        std::getline(in, id);
        if (id.size() == 2 * spool_id_bytes) return id;
        return fail("the spool id in " + path + " is damaged ('" + id +
                    "'): move the spool directory aside to start a new spool");
    }
    std::random_device random;
    static constexpr char digits[] = "0123456789abcdef";
    std::string id;
    for (size_t i = 0; i < spool_id_bytes; ++i) {
        const unsigned byte = random() & 0xFF;
        id += digits[byte >> 4];
        id += digits[byte & 15];
    }
    const std::string tmp = path + ".tmp";
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
    if (fd < 0) return fail(errno_text("cannot create " + tmp));
    const std::string line = id + "\n";
    const bool written =
        ::write(fd, line.data(), line.size()) == ssize_t(line.size()) && ::fdatasync(fd) == 0;
    ::close(fd);
    if (!written || ::rename(tmp.c_str(), path.c_str()) != 0)
        return fail(errno_text("cannot write " + path));
    const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd >= 0) {
        ::fsync(dir_fd);
        ::close(dir_fd);
    }
    return id;
}

}  // namespace

Spool::Spool(SpoolOptions options, const core::Clock& clock)
    : options_(std::move(options)), clock_(clock), log_dir_(options_.dir + "/log") {}

Spool::~Spool() = default;

Result<std::unique_ptr<Spool>> Spool::open(const SpoolOptions& options, const core::Clock& clock) {
    std::unique_ptr<Spool> spool(new Spool(options, clock));
    std::error_code ec;
    std::filesystem::create_directories(options.dir, ec);
    if (ec) return fail("cannot create the spool directory " + options.dir + ": " + ec.message());
    auto id = spool_id(options.dir);
    if (!id) return std::unexpected(id.error());
    spool->id_ = std::move(*id);
    log::LogOptions lo;
    lo.dir = spool->log_dir_;
    lo.fsync = options.fsync;
    lo.fsync_interval_ms = options.fsync_interval_ms;
    // Segments go whole once committed: small enough that the disk holds little more than the
    // backlog, large enough that a busy sink rolls rarely.
    lo.segment_bytes = std::clamp<uint64_t>(options.max_bytes / 8, 1ULL << 20, 64ULL << 20);
    // Everything the database holds may go (apply_retention keeps what is past the offset).
    lo.retention_bytes_max = 1;
    auto writer = log::LogWriter::open(lo);
    if (!writer) return std::unexpected(writer.error());
    spool->writer_ = std::move(*writer);
    spool->end_offset_at_open_ = spool->writer_->end_offset();
    spool->committed_ = spool->writer_->first_offset();
    spool->last_sync_steady_ms_ = clock.steady_ms();
    if (auto seeded = spool->seed_redelivery_filter(); !seeded)
        return std::unexpected(seeded.error());
    return spool;
}

// The spool's last messages: a broker that lost their PUBACKs redelivers them first on our
// first connection. The newest segment, and the one before when it holds too few (the engine
// host seeds the gateway's filter the same way).
Result<void> Spool::seed_redelivery_filter() {
    auto segments = log::list_segments(log_dir_);
    if (!segments) return std::unexpected(segments.error());
    if (segments->empty()) return {};
    auto reader = log::LogReader::open(log_dir_);
    if (!reader) return std::unexpected(reader.error());
    std::deque<std::pair<std::string, std::string>> tail;
    const size_t want = mqtt::RedeliveryFilter::candidates_max;
    for (size_t first = segments->size() - 1;; --first) {
        tail.clear();
        const uint64_t from = std::max((*segments)[first].first_offset, writer_->first_offset());
        if (auto ok = (*reader)->seek(from); !ok) return std::unexpected(ok.error());
        log::Record record;
        for (;;) {
            auto next = (*reader)->next(record, writer_->end_offset());
            if (!next) return std::unexpected(next.error());
            if (!*next) break;
            if (record.type != log::RecordType::message) continue;
            tail.emplace_back(std::string(record.topic), std::string(record.payload));
            if (tail.size() > want) tail.pop_front();
        }
        if (tail.size() >= want || first == 0) break;
    }
    for (const auto& [topic, payload] : tail)
        filter_.seed(topic, payload);
    return {};
}

uint64_t Spool::backlog_bytes() const {
    const uint64_t end = writer_->end_offset();
    const uint64_t done = committed_.load(std::memory_order_acquire);
    return end > done ? end - done : 0;
}

mqtt::HandleResult Spool::handle(const mqtt::IncomingMessage& message) {
    if (message.connection != connection_seen_) {
        connection_seen_ = message.connection;
        filter_.connection_started();
    }
    if (message.duplicate &&
        filter_.is_redelivery(message.packet_id, message.topic, message.payload)) {
        skipped_.fetch_add(1, std::memory_order_relaxed);
        return mqtt::HandleResult::accepted;
    }
    const bool oversized = message.payload.size() > options_.max_payload_bytes;
    const uint64_t bytes =
        log::frame_bytes(message.topic.size(),
                         oversized ? log::malformed_payload_bytes_max : message.payload.size());
    if (backlog_bytes() + bytes > options_.max_bytes) {
        held_.fetch_add(1, std::memory_order_relaxed);
        return mqtt::HandleResult::retry_later;
    }
    const int64_t now_ms = clock_.wall_ms();
    Result<uint64_t> appended =
        oversized
            ? writer_->append_malformed(now_ms,
                                        "oversized: " + std::to_string(message.payload.size()) +
                                            " bytes, more than source.max_payload " +
                                            std::to_string(options_.max_payload_bytes),
                                        message.topic, message.payload)
            : writer_->append(log::RecordType::message, now_ms, message.topic, message.payload);
    if (!appended) {
        held_.fetch_add(1, std::memory_order_relaxed);
        failing_ = true;
        std::lock_guard lock(mutex_);
        if (last_error_ != appended.error().message)
            spdlog::error("spool: {}", appended.error().message);
        last_error_ = appended.error().message;
        return mqtt::HandleResult::retry_later;  // the broker keeps it; health has the alarm
    }
    filter_.remember(message.packet_id, message.topic, message.payload);
    appended_.fetch_add(1, std::memory_order_relaxed);
    if (oversized) oversized_.fetch_add(1, std::memory_order_relaxed);
    if (failing_.load(std::memory_order_relaxed)) failing_ = false;
    // A notification missed by the race with wait_for_data() costs its timeout, not a message.
    if (waiting_.load()) {
        std::lock_guard lock(mutex_);
        grew_.notify_all();
    }
    return mqtt::HandleResult::accepted;
}

Result<void> Spool::sync() {
    last_sync_steady_ms_ = clock_.steady_ms();
    return writer_->sync();
}

Result<void> Spool::sync_if_due(int64_t now_steady_ms) {
    if (options_.fsync != log::FsyncPolicy::interval) return {};
    if (now_steady_ms - last_sync_steady_ms_.load() < options_.fsync_interval_ms) return {};
    if (writer_->durable_offset() >= writer_->end_offset()) {
        last_sync_steady_ms_ = now_steady_ms;
        return {};
    }
    return sync();
}

Result<void> Spool::committed(uint64_t offset) {
    committed_.store(offset, std::memory_order_release);
    auto removed = writer_->apply_retention(offset, clock_.wall_ms());
    if (!removed) return std::unexpected(removed.error());
    return {};
}

bool Spool::wait_for_data(uint64_t offset, int64_t timeout_ms) {
    if (writer_->end_offset() > offset) return true;
    std::unique_lock lock(mutex_);
    waiting_.store(true);
    const bool grew = grew_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                                     [&] { return writer_->end_offset() > offset; });
    waiting_.store(false);
    return grew;
}

SpoolStats Spool::stats() const {
    SpoolStats s;
    s.appended = appended_.load(std::memory_order_relaxed);
    s.oversized = oversized_.load(std::memory_order_relaxed);
    s.redeliveries_skipped = skipped_.load(std::memory_order_relaxed);
    s.held = held_.load(std::memory_order_relaxed);
    s.append_failing = failing_.load(std::memory_order_relaxed);
    s.backlog_bytes = backlog_bytes();
    s.end_offset = writer_->end_offset();
    s.committed_offset = committed_.load(std::memory_order_acquire);
    const log::LogStats log = writer_->stats();
    s.disk_bytes = log.disk_bytes;
    s.segments = log.segments;
    std::lock_guard lock(mutex_);
    s.last_error = last_error_;
    return s;
}

}  // namespace tidemark::firmware::sink
