// LogWriter: framing and append (anchors, compact frames, the dictionary), rolls and the
// bookkeeping of the extent. Recovery is in log_recovery.cpp, sync, poison and retention in
// log_sync.cpp, the seals of compressed segments in log_seal.cpp.
#include "adapters/log/log_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "adapters/log/crc32c.h"
#include "adapters/log/log_writer_internal.h"
#include "adapters/log/segment_files.h"
#include "adapters/log/segment_scan.h"
#include "adapters/log/segment_source.h"
#include "adapters/log/zlog_block.h"
#include "core/bytes.h"
#include "core/crash_point.h"

namespace tidemark::log {

using detail::errno_text;
using detail::raise_to;
namespace {

// pwritev until every byte is written or an error occurs.
int write_all_at(int fd, iovec* iov, int count, uint64_t pos) {
    while (count > 0) {
        ssize_t n = ::pwritev(fd, iov, count, static_cast<off_t>(pos));
        if (n < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        if (n == 0) return EIO;
        pos += static_cast<uint64_t>(n);
        auto left = static_cast<size_t>(n);
        while (count > 0 && left >= iov->iov_len) {
            left -= iov->iov_len;
            ++iov;
            --count;
        }
        if (count > 0) {
            iov->iov_base = static_cast<char*>(iov->iov_base) + left;
            iov->iov_len -= left;
        }
    }
    return 0;
}

}  // namespace

LogWriter::LogWriter(LogOptions options) : options_(std::move(options)) {}

LogWriter::~LogWriter() {
    if (active_fd_ >= 0) {
        // A compressed log seals what it staged, so that a clean stop leaves no plain frames
        // to reach the flash; a plain one syncs. Best effort: call sync() for a clean stop.
        if (recovered_ && !poisoned_ && segments_.back().compressed) (void)seal();
        if (!poisoned_) ::fdatasync(active_fd_);
        ::close(active_fd_);
    }
    if (dir_fd_ >= 0) ::close(dir_fd_);
}

void LogWriter::publish_extent() {
    const Segment& active = segments_.back();
    uint64_t total = 0;
    uint64_t disk = 0;
    for (const Segment& seg : segments_) {
        total += seg.bytes;
        disk += seg.disk();
    }
    first_offset_.store(segments_.front().first_offset, std::memory_order_release);
    total_bytes_.store(total, std::memory_order_release);
    disk_bytes_.store(disk, std::memory_order_release);
    oldest_ingest_ms_.store(segments_.front().first_ingest_ms, std::memory_order_release);
    end_offset_.store(active.first_offset + active.bytes, std::memory_order_release);
}

Result<void> LogWriter::roll() {
    Segment& closing = segments_.back();
    // Sync the closing segment before its successor exists: then only the newest segment can
    // have a torn tail, and a reader that sees the next file knows this one is final.
    if (::fdatasync(active_fd_) != 0) {
        return std::unexpected(poison_after_failed_sync(active_path_, errno));
    }
    uint64_t next_first = closing.first_offset + closing.bytes;
    raise_to(durable_offset_, next_first);
    const bool zstd = options_.compression == Compression::zstd;
    // A compressed segment's frames go to its stage; the closing one's unsealed frames (synced
    // above) are sealed by the next sync(), which reads them from its stage.
    std::string path =
        zstd ? stage_path(options_.dir, next_first) : segment_path(options_.dir, next_first);
    // O_TRUNC: a file of this name can only be left by an earlier attempt that failed here.
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return fail("cannot create log segment " + path + ": " + errno_text(errno));
    if (::fsync(dir_fd_) != 0) {
        int err = errno;
        ::close(fd);
        return fail("cannot sync log directory " + options_.dir + ": " + errno_text(err));
    }
    ::close(active_fd_);
    if (closing.compressed && closing.sealed_bytes >= closing.bytes) {
        // Sealed whole already (the seal before this roll): its stage has nothing left to give.
        (void)::unlink(active_path_.c_str());
    }
    active_fd_ = fd;
    active_path_ = std::move(path);
    Segment next;
    next.first_offset = next_first;
    next.compressed = zstd;
    segments_.push_back(next);
    ++counters_.rollovers;
    dictionary_.clear();
    roll_due_ = false;
    return {};
}

Result<uint64_t> LogWriter::append(RecordType type, int64_t ingest_ms, std::string_view topic,
                                   std::string_view payload, bool redeliverable) {
    TM_ASSERT(redeliverable || type == RecordType::message);
    const std::string_view topic_parts[3] = {topic, {}, {}};
    return append_frame(type, ingest_ms, topic_parts, payload, redeliverable);
}

Result<uint64_t> LogWriter::append_malformed(int64_t ingest_ms, std::string_view reason,
                                             std::string_view topic, std::string_view payload,
                                             bool redeliverable) {
    TM_ASSERT(reason.find(malformed_reason_separator) == std::string_view::npos);
    static constexpr char separator[1] = {malformed_reason_separator};
    const std::string_view topic_parts[3] = {reason, std::string_view(separator, 1), topic};
    return append_frame(RecordType::malformed, ingest_ms, topic_parts, payload, redeliverable);
}

Result<uint64_t> LogWriter::append_frame(RecordType type, int64_t ingest_ms,
                                         const std::string_view (&topic_parts)[3],
                                         std::string_view payload, bool redeliverable) {
    if (type == RecordType::malformed && payload.size() > malformed_payload_bytes_max) {
        payload = payload.substr(0, malformed_payload_bytes_max);
    }
    const uint64_t topic_bytes =
        topic_parts[0].size() + topic_parts[1].size() + topic_parts[2].size();
    std::unique_lock lock(mutex_);
    if (poisoned_) return fail(*poisoned_);
    if (topic_bytes > topic_bytes_max ||
        topic_bytes + payload.size() > record_topic_payload_bytes_max) {
        ++counters_.append_errors;
        return fail("log: record too large (topic " + std::to_string(topic_bytes) +
                    " bytes, payload " + std::to_string(payload.size()) + " bytes; limits " +
                    std::to_string(topic_bytes_max) + " and " +
                    std::to_string(record_topic_payload_bytes_max) + " bytes per record)");
    }
    // A clock that steps back does not move the log's time back (nor before the segment's base).
    if (last_ingest_ms_ != ingest_ms_unknown) ingest_ms = std::max(ingest_ms, last_ingest_ms_);
    if (dictionary_.compact()) ingest_ms = std::max(ingest_ms, dictionary_.base_ms());

    // A new segment when this record (and the anchor before it, if one is due) would not fit,
    // when the dictionary is full, or after open() found an old or damaged one. A message's
    // topic is looked up once, here.
    const bool message = type == RecordType::message;
    TopicDictionary::Use use = message ? dictionary_.use(topic_parts[0]) : TopicDictionary::Use{};
    bool anchor_due = !dictionary_.compact() || dictionary_.anchor_due();
    const Segment& current = segments_.back();
    const uint64_t needed =
        (anchor_due ? anchor_frame_bytes : 0) +
        compact_frame_bytes(type, ingest_ms, topic_bytes, payload.size(), use, anchor_due);
    if (current.bytes > 0 &&
        (roll_due_ || current.bytes + needed > options_.segment_bytes ||
         (message && use.entry == nullptr && dictionary_.full_for(topic_parts[0])))) {
        if (auto rolled = roll(); !rolled) {
            ++counters_.append_errors;
            return std::unexpected(rolled.error());
        }
        if (message) use = dictionary_.use(topic_parts[0]);  // the new segment's dictionary
        anchor_due = true;
    }
    if (anchor_due) {
        if (auto anchored = write_anchor(ingest_ms); !anchored) {
            return std::unexpected(anchored.error());
        }
        use.define = true;  // every topic is defined again after an anchor
    }
    auto written = write_compact(type, ingest_ms, topic_parts, payload, use, redeliverable);
    if (!written) return std::unexpected(written.error());
    const uint64_t frame = *written;
    Segment& active = segments_.back();
    const uint64_t offset = active.first_offset + active.bytes;
    account(offset, frame, ingest_ms);
    ++counters_.records_appended;

    if (options_.fsync == FsyncPolicy::always) {
        if (::fdatasync(active_fd_) != 0) {
            // The record is cut with the rest of what is not durable: nothing was appended.
            int err = errno;
            --counters_.records_appended;
            counters_.bytes_appended -= frame;
            ++counters_.append_errors;
            return std::unexpected(poison_after_failed_sync(active_path_, err));
        }
        ++counters_.syncs;
        durable_offset_.store(offset + frame, std::memory_order_release);
    }
    lock.unlock();
    core::crash_point(core::CrashPoint::after_log_append);
    return offset;
}

// The bookkeeping of a frame written at `offset` (mutex_ held).
void LogWriter::account(uint64_t offset, uint64_t frame, int64_t ingest_ms) {
    Segment& active = segments_.back();
    active.bytes += frame;
    if (active.first_ingest_ms == ingest_ms_unknown) {
        active.first_ingest_ms = ingest_ms;
        if (segments_.size() == 1) oldest_ingest_ms_.store(ingest_ms, std::memory_order_release);
    }
    active.max_ingest_ms = ingest_ms;
    last_ingest_ms_ = ingest_ms;
    counters_.bytes_appended += frame;
    total_bytes_.fetch_add(frame, std::memory_order_acq_rel);
    disk_bytes_.fetch_add(frame, std::memory_order_acq_rel);  // in the stage until sealed
    end_offset_.store(offset + frame, std::memory_order_release);
}

// The anchor before a record: at a segment's start, and every anchor_interval_bytes (then the
// dictionary's topics are defined again at their next use).
Result<void> LogWriter::write_anchor(int64_t ingest_ms) {
    const int64_t base_ms = dictionary_.compact() ? dictionary_.base_ms() : ingest_ms;
    char frame[anchor_frame_bytes] = {};
    char* body = frame + frame_header_bytes;
    body[0] = 4;  // the anchor's type (record.h)
    store_le(body + 1, static_cast<uint64_t>(ingest_ms), 8);
    store_le(body + 9, 0, 2);
    body[body_prefix_bytes] = static_cast<char>(compact_format);
    store_le(body + body_prefix_bytes + 1, static_cast<uint64_t>(base_ms), 8);
    Segment& active = segments_.back();
    const uint64_t offset = active.first_offset + active.bytes;
    store_le(body + body_prefix_bytes + 9, offset, 8);
    store_le(frame, anchor_body_bytes, 4);
    store_le(frame + 4, crc32c(0, std::string_view(body, anchor_body_bytes)), 4);
    iovec iov[1] = {{frame, sizeof frame}};
    if (auto ok = write_iov(iov, 1); !ok) return std::unexpected(ok.error());
    account(offset, anchor_frame_bytes, ingest_ms);
    dictionary_.anchored(base_ms);
    return {};
}

// The size of the record's compact frame, written now (after an anchor, when `after_anchor`):
// the arithmetic of write_compact().
uint64_t LogWriter::compact_frame_bytes(RecordType type, int64_t ingest_ms, uint64_t topic_bytes,
                                        uint64_t payload_bytes, const TopicDictionary::Use& use,
                                        bool after_anchor) const {
    const int64_t base_ms = dictionary_.compact() ? dictionary_.base_ms() : ingest_ms;
    uint64_t body =
        1 + core::bytes::varint_bytes(static_cast<uint64_t>(ingest_ms - base_ms)) + payload_bytes;
    const bool carries_topic = type != RecordType::message || use.define || after_anchor;
    if (type == RecordType::message) body += core::bytes::varint_bytes(use.id);
    if (carries_topic) body += core::bytes::varint_bytes(topic_bytes) + topic_bytes;
    return core::bytes::varint_bytes(body) + 4 + body;
}

// One pwritev() of the record's compact frame at the end of the active segment, no copy of
// topic or payload. Returns the frame's size.
Result<uint64_t> LogWriter::write_compact(RecordType type, int64_t ingest_ms,
                                          const std::string_view (&topic_parts)[3],
                                          std::string_view payload, const TopicDictionary::Use& use,
                                          bool redeliverable) {
    using core::bytes::put_varint;
    // Body head: type, ingest delta, then the topic id (and a definition's topic length) or the
    // inline topic field's length.
    char head[4 + 4 + compact_body_head_bytes_max];
    char body_head[compact_body_head_bytes_max];
    size_t n = 0;
    const uint64_t topic_bytes =
        topic_parts[0].size() + topic_parts[1].size() + topic_parts[2].size();
    const uint64_t delta = static_cast<uint64_t>(ingest_ms - dictionary_.base_ms());
    const bool message = type == RecordType::message;
    const bool carries_topic = !message || use.define;
    // record.h's compact types: 1 ref, 5 def, 2 tick, 3 malformed; 6, 7, 8 for the records of
    // a message that is never redelivered.
    const int once = redeliverable ? 0 : 1;
    body_head[n++] = static_cast<char>(message ? (use.define ? 5 + 2 * once : 1 + 5 * once)
                                               : (type == RecordType::tick ? 2 : 3 + 5 * once));
    n += put_varint(body_head + n, delta);
    if (message) n += put_varint(body_head + n, use.id);
    if (carries_topic) n += put_varint(body_head + n, topic_bytes);
    const uint64_t body_bytes = n + (carries_topic ? topic_bytes : 0) + payload.size();
    const Segment& active = segments_.back();
    uint32_t crc =
        crc32c(frame_crc_seed(active.first_offset + active.bytes), std::string_view(body_head, n));
    if (carries_topic) {
        for (std::string_view part : topic_parts)
            crc = crc32c(crc, part);
    }
    crc = crc32c(crc, payload);
    size_t h = put_varint(head, body_bytes);
    store_le(head + h, crc, 4);
    h += 4;
    std::memcpy(head + h, body_head, n);
    h += n;

    auto iov_of = [](std::string_view s) { return iovec{const_cast<char*>(s.data()), s.size()}; };
    const std::string_view none;
    iovec iov[5] = {{head, h},
                    iov_of(carries_topic ? topic_parts[0] : none),
                    iov_of(carries_topic ? topic_parts[1] : none),
                    iov_of(carries_topic ? topic_parts[2] : none),
                    iov_of(payload)};
    if (auto ok = write_iov(iov, 5); !ok) return std::unexpected(ok.error());
    if (message) dictionary_.used(topic_parts[0], use);
    const uint64_t frame = h - n + body_bytes;
    dictionary_.wrote(frame);
    return frame;
}

// pwritev of iov at the end of the active segment; a failed write is rolled back so the next
// append starts at a frame boundary.
Result<void> LogWriter::write_iov(iovec* iov, int count) {
    Segment& active = segments_.back();
    if (int err = write_all_at(active_fd_, iov, count, active.bytes); err != 0) {
        ++counters_.append_errors;
        std::string message =
            "cannot append to log segment " + active_path_ + ": " + errno_text(err);
        // Whatever part of the frame reached the file goes, so the next append starts at a
        // record boundary and the tail stays readable.
        if (::ftruncate(active_fd_, static_cast<off_t>(active.bytes)) != 0) {
            return std::unexpected(
                poison(message + "; and cannot roll back the partial write: " + errno_text(errno)));
        }
        return fail(message);
    }
    return {};
}

LogStats LogWriter::stats() const {
    std::lock_guard lock(mutex_);
    LogStats stats = counters_;
    stats.segments = segments_.size();
    stats.first_offset = first_offset();
    stats.end_offset = end_offset();
    stats.durable_offset = durable_offset();
    stats.total_bytes = total_bytes();
    stats.disk_bytes = disk_bytes();
    stats.oldest_ingest_ms = oldest_ingest_ms();
    stats.last_ingest_ms = last_ingest_ms_;
    stats.poisoned = poisoned_.has_value();
    stats.seal_deferred = !seal_error_.empty();
    return stats;
}

std::string LogWriter::seal_error() const {
    std::lock_guard lock(mutex_);
    return seal_error_;
}

}  // namespace tidemark::log
