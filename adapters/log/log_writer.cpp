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

#include "adapters/crash/crash_point.h"
#include "adapters/log/crc32c.h"
#include "adapters/log/segment_files.h"

namespace tidemark::log {
namespace {

constexpr size_t scan_block_bytes = size_t{1} << 20;

std::string errno_text(int err) {
    return std::strerror(err);
}

void store_le(char* p, uint64_t v, int n) {
    for (int i = 0; i < n; ++i)
        p[i] = static_cast<char>(v >> (8 * i));
}

// Reads exactly n bytes at pos unless the file ends first; returns the count read.
Result<size_t> pread_full(int fd, char* buf, size_t n, uint64_t pos, const std::string& path) {
    size_t done = 0;
    while (done < n) {
        ssize_t r = ::pread(fd, buf + done, n - done, static_cast<off_t>(pos + done));
        if (r < 0) {
            if (errno == EINTR) continue;
            return fail("cannot read log segment " + path + ": " + errno_text(errno));
        }
        if (r == 0) break;
        done += static_cast<size_t>(r);
    }
    return done;
}

struct ScanResult {
    uint64_t good_bytes = 0;  // end of the last good record, relative to the segment start
    uint64_t records = 0;
    int64_t first_ingest_ms = ingest_ms_unknown;
    int64_t last_ingest_ms = ingest_ms_unknown;
};

// Walks the frames of a segment from its start and stops at the first that is incomplete or
// invalid. A valid frame of an unknown type is an error: a newer version wrote it, and cutting
// it off would destroy data this version cannot read.
Result<ScanResult> scan_segment(int fd, uint64_t file_bytes, uint64_t first_offset,
                                const std::string& path) {
    ScanResult scan;
    std::vector<char> buf(scan_block_bytes);
    uint64_t buf_pos = 0;  // file position of buf[0]
    size_t have = 0;
    size_t at = 0;
    while (true) {
        Record rec;
        uint64_t frame = 0;
        FrameStatus status = decode_frame(std::string_view(buf.data() + at, have - at), rec, frame);
        if (status == FrameStatus::ok) {
            if (scan.records == 0) scan.first_ingest_ms = rec.ingest_ms;
            scan.last_ingest_ms = rec.ingest_ms;
            ++scan.records;
            at += frame;
            scan.good_bytes = buf_pos + at;
            continue;
        }
        if (status == FrameStatus::bad_type) {
            return fail("log segment " + path + ": the record at offset " +
                        std::to_string(first_offset + buf_pos + at) +
                        " has an unknown type; it was written by a newer tidemark. Upgrade, or "
                        "move the log directory away to start a new log.");
        }
        if (status != FrameStatus::incomplete) break;
        uint64_t need = std::max<uint64_t>(frame, frame_header_bytes);
        if (buf_pos + at + need > file_bytes) break;  // torn: the file ends inside this frame
        // Slide the unread bytes to the front and fill the buffer; grow it (bounded by the
        // frame size bound) for a record larger than the block.
        std::memmove(buf.data(), buf.data() + at, have - at);
        buf_pos += at;
        have -= at;
        at = 0;
        if (need > buf.size()) buf.resize(need);
        auto got = pread_full(fd, buf.data() + have, buf.size() - have, buf_pos + have, path);
        if (!got) return std::unexpected(got.error());
        if (*got == 0) break;
        have += *got;
    }
    return scan;
}

// The ingest time of a segment's first record, if it can be read.
int64_t first_ingest_ms(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ingest_ms_unknown;
    char header[frame_header_bytes];
    int64_t result = ingest_ms_unknown;
    auto got = pread_full(fd, header, sizeof(header), 0, path);
    if (got && *got == sizeof(header)) {
        uint64_t body = 0;
        for (int i = 0; i < 4; ++i)
            body |= uint64_t{static_cast<unsigned char>(header[i])} << (8 * i);
        if (body >= body_prefix_bytes && body <= record_body_bytes_max) {
            std::vector<char> frame(frame_header_bytes + body);
            auto full = pread_full(fd, frame.data(), frame.size(), 0, path);
            Record rec;
            uint64_t frame_len = 0;
            if (full && *full == frame.size() &&
                decode_frame(std::string_view(frame.data(), frame.size()), rec, frame_len) ==
                    FrameStatus::ok) {
                result = rec.ingest_ms;
            }
        }
    }
    ::close(fd);
    return result;
}

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

void raise_to(std::atomic<uint64_t>& value, uint64_t to) {
    uint64_t seen = value.load(std::memory_order_relaxed);
    while (seen < to && !value.compare_exchange_weak(seen, to, std::memory_order_acq_rel)) {
    }
}

}  // namespace

LogWriter::LogWriter(LogOptions options) : options_(std::move(options)) {}

LogWriter::~LogWriter() {
    if (active_fd_ >= 0) {
        if (!poisoned_) ::fdatasync(active_fd_);
        ::close(active_fd_);
    }
    if (dir_fd_ >= 0) ::close(dir_fd_);
}

Result<std::unique_ptr<LogWriter>> LogWriter::open(const LogOptions& options) {
    if (options.dir.empty()) return fail("log: storage directory is empty");
    if (options.segment_bytes < frame_bytes(0, 0)) {
        return fail("log: segment_bytes " + std::to_string(options.segment_bytes) +
                    " is smaller than one record");
    }
    if (options.fsync == FsyncPolicy::interval && options.fsync_interval_ms <= 0) {
        return fail("log: fsync_interval must be positive with fsync=interval (got " +
                    std::to_string(options.fsync_interval_ms) + " ms)");
    }
    std::error_code ec;
    std::filesystem::create_directories(options.dir, ec);
    if (ec) return fail("cannot create log directory " + options.dir + ": " + ec.message());
    std::unique_ptr<LogWriter> writer(new LogWriter(options));
    writer->dir_fd_ = ::open(options.dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (writer->dir_fd_ < 0) {
        return fail("cannot open log directory " + options.dir + ": " + errno_text(errno));
    }
    auto recovered = writer->recover();
    if (!recovered) return std::unexpected(recovered.error());
    return writer;
}

Result<void> LogWriter::recover() {
    const std::string& dir = options_.dir;
    auto listed = list_segments(dir);
    if (!listed) return std::unexpected(listed.error());
    std::vector<SegmentFile>& files = *listed;
    if (files.empty()) files.push_back(SegmentFile{0, 0, segment_path(dir, 0)});

    // Every segment but the newest was complete and synced before its successor was created:
    // their sizes must chain. A gap or overlap means files were copied or removed by hand.
    for (size_t i = 0; i + 1 < files.size(); ++i) {
        if (files[i].first_offset + files[i].bytes != files[i + 1].first_offset) {
            return fail("log directory " + dir + " is not contiguous: " + files[i].path + " (" +
                        std::to_string(files[i].bytes) + " bytes) should be followed by offset " +
                        std::to_string(files[i].first_offset + files[i].bytes) + ", found " +
                        files[i + 1].path + ". Restore the missing segment or move the log away.");
        }
    }

    SegmentFile& last = files.back();
    active_path_ = last.path;
    active_fd_ = ::open(last.path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (active_fd_ < 0) {
        return fail("cannot open log segment " + last.path + ": " + errno_text(errno));
    }
    auto scan = scan_segment(active_fd_, last.bytes, last.first_offset, last.path);
    if (!scan) return std::unexpected(scan.error());
    if (scan->good_bytes < last.bytes) {
        // Only what follows the last good record is cut; nothing before it is touched.
        if (::ftruncate(active_fd_, static_cast<off_t>(scan->good_bytes)) != 0) {
            return fail("cannot cut the torn tail of log segment " + last.path + " at byte " +
                        std::to_string(scan->good_bytes) + ": " + errno_text(errno));
        }
        counters_.tail_truncations = 1;
        counters_.tail_bytes_cut = last.bytes - scan->good_bytes;
    }
    // A previous process may have died with its appends only in the page cache: make them
    // (and the cut) durable, so durable_offset() starts true. The directory entry too.
    if (::fdatasync(active_fd_) != 0 || ::fsync(dir_fd_) != 0) {
        return fail("cannot sync log segment " + last.path + ": " + errno_text(errno));
    }

    for (size_t i = 0; i < files.size(); ++i) {
        Segment seg;
        seg.first_offset = files[i].first_offset;
        seg.bytes = files[i].bytes;
        seg.first_ingest_ms =
            i + 1 == files.size() ? scan->first_ingest_ms : first_ingest_ms(files[i].path);
        segments_.push_back(seg);
    }
    Segment& active = segments_.back();
    active.bytes = scan->good_bytes;
    active.max_ingest_ms = scan->last_ingest_ms;
    // The ingest time never decreases along the log, so a segment's newest record is no newer
    // than the next segment's first.
    for (size_t i = 0; i + 1 < segments_.size(); ++i) {
        segments_[i].max_ingest_ms = segments_[i + 1].first_ingest_ms;
    }
    if (scan->records == 0 && segments_.size() >= 2) {
        // The active segment is empty: the newest ingest time is the previous segment's last.
        const SegmentFile& prev = files[files.size() - 2];
        int fd = ::open(prev.path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) return fail("cannot open log segment " + prev.path + ": " + errno_text(errno));
        auto prev_scan = scan_segment(fd, prev.bytes, prev.first_offset, prev.path);
        ::close(fd);
        if (!prev_scan) return std::unexpected(prev_scan.error());
        segments_[segments_.size() - 2].max_ingest_ms = prev_scan->last_ingest_ms;
        last_ingest_ms_ = prev_scan->last_ingest_ms;
    } else {
        last_ingest_ms_ = scan->last_ingest_ms;
    }
    publish_extent();
    durable_offset_.store(end_offset_.load());
    return {};
}

void LogWriter::publish_extent() {
    const Segment& active = segments_.back();
    uint64_t total = 0;
    for (const Segment& seg : segments_)
        total += seg.bytes;
    first_offset_.store(segments_.front().first_offset, std::memory_order_release);
    total_bytes_.store(total, std::memory_order_release);
    oldest_ingest_ms_.store(segments_.front().first_ingest_ms, std::memory_order_release);
    end_offset_.store(active.first_offset + active.bytes, std::memory_order_release);
}

Error LogWriter::poison(std::string message) {
    poisoned_ = message + " (the log writer stopped; restart to rescan the log tail)";
    return Error{*poisoned_};
}

Result<void> LogWriter::roll() {
    Segment& closing = segments_.back();
    // Sync the closing segment before its successor exists: then only the newest segment can
    // have a torn tail, and a reader that sees the next file knows this one is final.
    if (::fdatasync(active_fd_) != 0) {
        return std::unexpected(
            poison("cannot sync log segment " + active_path_ + ": " + errno_text(errno)));
    }
    uint64_t next_first = closing.first_offset + closing.bytes;
    raise_to(durable_offset_, next_first);
    std::string path = segment_path(options_.dir, next_first);
    // O_TRUNC: a file of this name can only be left by an earlier attempt that failed here.
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return fail("cannot create log segment " + path + ": " + errno_text(errno));
    if (::fsync(dir_fd_) != 0) {
        int err = errno;
        ::close(fd);
        return fail("cannot sync log directory " + options_.dir + ": " + errno_text(err));
    }
    ::close(active_fd_);
    active_fd_ = fd;
    active_path_ = std::move(path);
    segments_.push_back(Segment{next_first, 0, ingest_ms_unknown, ingest_ms_unknown});
    ++counters_.rollovers;
    return {};
}

Result<uint64_t> LogWriter::append(RecordType type, int64_t ingest_ms, std::string_view topic,
                                   std::string_view payload) {
    if (type == RecordType::malformed && payload.size() > malformed_payload_bytes_max) {
        payload = payload.substr(0, malformed_payload_bytes_max);
    }
    uint64_t body_bytes = body_prefix_bytes + topic.size() + payload.size();
    std::unique_lock lock(mutex_);
    if (poisoned_) return fail(*poisoned_);
    if (topic.size() > topic_bytes_max || body_bytes > record_body_bytes_max) {
        ++counters_.append_errors;
        return fail("log: record too large (topic " + std::to_string(topic.size()) +
                    " bytes, payload " + std::to_string(payload.size()) + " bytes; limits " +
                    std::to_string(topic_bytes_max) + " and " +
                    std::to_string(record_body_bytes_max) + " bytes per record)");
    }
    // A clock that steps back does not move the log's time back.
    if (last_ingest_ms_ != ingest_ms_unknown) ingest_ms = std::max(ingest_ms, last_ingest_ms_);

    uint64_t frame = frame_header_bytes + body_bytes;
    if (segments_.back().bytes > 0 && segments_.back().bytes + frame > options_.segment_bytes) {
        auto rolled = roll();
        if (!rolled) {
            ++counters_.append_errors;
            return std::unexpected(rolled.error());
        }
    }
    Segment& active = segments_.back();

    char head[frame_header_bytes + body_prefix_bytes];
    char* prefix = head + frame_header_bytes;
    prefix[0] = static_cast<char>(type);
    store_le(prefix + 1, static_cast<uint64_t>(ingest_ms), 8);
    store_le(prefix + 9, topic.size(), 2);
    uint32_t crc = crc32c(0, std::string_view(prefix, body_prefix_bytes));
    crc = crc32c(crc, topic);
    crc = crc32c(crc, payload);
    store_le(head, body_bytes, 4);
    store_le(head + 4, crc, 4);

    iovec iov[3] = {{head, sizeof(head)},
                    {const_cast<char*>(topic.data()), topic.size()},
                    {const_cast<char*>(payload.data()), payload.size()}};
    if (int err = write_all_at(active_fd_, iov, 3, active.bytes); err != 0) {
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
    uint64_t offset = active.first_offset + active.bytes;
    active.bytes += frame;
    if (active.first_ingest_ms == ingest_ms_unknown) {
        active.first_ingest_ms = ingest_ms;
        if (segments_.size() == 1) oldest_ingest_ms_.store(ingest_ms, std::memory_order_release);
    }
    active.max_ingest_ms = ingest_ms;
    last_ingest_ms_ = ingest_ms;
    ++counters_.records_appended;
    counters_.bytes_appended += frame;
    total_bytes_.fetch_add(frame, std::memory_order_acq_rel);
    end_offset_.store(offset + frame, std::memory_order_release);

    if (options_.fsync == FsyncPolicy::always) {
        if (::fdatasync(active_fd_) != 0) {
            return std::unexpected(
                poison("cannot sync log segment " + active_path_ + ": " + errno_text(errno)));
        }
        ++counters_.syncs;
        durable_offset_.store(offset + frame, std::memory_order_release);
    }
    lock.unlock();
    crash::crash_point(crash::CrashPoint::after_log_append);
    return offset;
}

Result<bool> LogWriter::maybe_sync(int64_t now_ms) {
    if (options_.fsync != FsyncPolicy::interval) return false;
    int64_t last = last_sync_ms_.load(std::memory_order_relaxed);
    if (last != ingest_ms_unknown && now_ms - last < options_.fsync_interval_ms) return false;
    last_sync_ms_.store(now_ms, std::memory_order_relaxed);
    if (durable_offset() >= end_offset()) return false;
    auto synced = sync();
    if (!synced) return std::unexpected(synced.error());
    return true;
}

Result<void> LogWriter::sync() {
    int fd = -1;
    uint64_t end = 0;
    std::string path;
    {
        std::lock_guard lock(mutex_);
        if (poisoned_) return fail(*poisoned_);
        end = end_offset();
        if (durable_offset() >= end) return {};
        // A dup shares the open file: fdatasync on it syncs the segment, while append() goes on
        // under the mutex. Segments closed meanwhile were synced by roll().
        fd = ::fcntl(active_fd_, F_DUPFD_CLOEXEC, 0);
        if (fd < 0)
            return fail("cannot sync log segment " + active_path_ + ": " + errno_text(errno));
        path = active_path_;
    }
    int rc = ::fdatasync(fd);
    int err = errno;
    ::close(fd);
    std::lock_guard lock(mutex_);
    if (rc != 0) {
        return std::unexpected(poison("cannot sync log segment " + path + ": " + errno_text(err)));
    }
    ++counters_.syncs;
    raise_to(durable_offset_, end);
    return {};
}

Result<RetentionResult> LogWriter::apply_retention(uint64_t keep_from_offset, int64_t now_ms) {
    RetentionResult result;
    std::vector<std::string> doomed;
    {
        std::lock_guard lock(mutex_);
        uint64_t total = total_bytes();
        const uint64_t bytes_max = options_.retention_bytes_max;
        const int64_t age_max = options_.retention_age_ms_max;
        while (segments_.size() > 1) {
            const Segment& oldest = segments_.front();
            if (oldest.first_offset + oldest.bytes > keep_from_offset) break;
            bool over_bytes = bytes_max > 0 && total > bytes_max;
            bool over_age = age_max > 0 && oldest.max_ingest_ms != ingest_ms_unknown &&
                            oldest.max_ingest_ms < now_ms - age_max;
            if (!over_bytes && !over_age) break;
            total -= oldest.bytes;
            result.bytes_removed += oldest.bytes;
            ++result.segments_removed;
            doomed.push_back(segment_path(options_.dir, oldest.first_offset));
            segments_.pop_front();
        }
        counters_.segments_removed += result.segments_removed;
        counters_.bytes_removed += result.bytes_removed;
        publish_extent();
        result.first_offset = segments_.front().first_offset;
    }
    // Unlinked outside the lock: appends need not wait for the filesystem. Readers holding a
    // removed file open keep reading it; the space returns when they close it.
    for (const std::string& path : doomed) {
        if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
            return fail("cannot remove log segment " + path +
                        " for retention: " + errno_text(errno));
        }
    }
    return result;
}

LogStats LogWriter::stats() const {
    std::lock_guard lock(mutex_);
    LogStats stats = counters_;
    stats.segments = segments_.size();
    stats.first_offset = first_offset();
    stats.end_offset = end_offset();
    stats.durable_offset = durable_offset();
    stats.total_bytes = total_bytes();
    stats.oldest_ingest_ms = oldest_ingest_ms();
    stats.last_ingest_ms = last_ingest_ms_;
    return stats;
}

}  // namespace tidemark::log
