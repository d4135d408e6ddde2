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
#include "adapters/log/segment_files.h"
#include "adapters/log/segment_scan.h"
#include "adapters/log/segment_source.h"
#include "adapters/log/zlog_block.h"
#include "core/bytes.h"
#include "core/crash_point.h"

namespace tidemark::log {
namespace {

constexpr size_t scan_block_bytes = size_t{1} << 20;

std::string errno_text(int err) {
    return std::strerror(err);
}

// The ingest time of a segment's first record, if it can be read.
int64_t first_ingest_ms(const std::string& dir, uint64_t first_offset) {
    auto source = SegmentSource::open(dir, first_offset);
    if (!source || !*source) return ingest_ms_unknown;
    // The first frame only (the first block's headers, not the segment's).
    SegmentWindow window(**source, first_offset, UINT64_MAX, 4096);
    Record rec;
    uint64_t frame = 0;
    auto status = window.decode_at(0, rec, frame);
    return status && *status == FrameStatus::ok ? rec.ingest_ms : ingest_ms_unknown;
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
        // A compressed log seals what it staged, so that a clean stop leaves no plain frames
        // to reach the flash; a plain one syncs. Best effort: call sync() for a clean stop.
        if (recovered_ && !poisoned_ && segments_.back().compressed) (void)seal();
        if (!poisoned_) ::fdatasync(active_fd_);
        ::close(active_fd_);
    }
    if (dir_fd_ >= 0) ::close(dir_fd_);
}

Result<std::unique_ptr<LogWriter>> LogWriter::open(const LogOptions& options) {
    if (options.dir.empty()) return fail("log: storage directory is empty");
    if (options.segment_bytes < anchor_frame_bytes + compact_frame_bytes_min) {
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
    const bool zstd = options_.compression == Compression::zstd;
    auto listed = list_segments(dir);
    if (!listed) return std::unexpected(listed.error());
    std::vector<SegmentFile>& files = *listed;
    // In zstd mode an empty plain newest segment (none was appended to it) becomes a stage.
    if (zstd && !files.empty() && !files.back().compressed && files.back().bytes == 0) {
        if (::unlink(files.back().path.c_str()) != 0) {
            return fail("cannot remove the empty log segment " + files.back().path + ": " +
                        errno_text(errno));
        }
        files.back().compressed = true;
        files.back().path = zlog_path(dir, files.back().first_offset);
    }
    if (files.empty()) {
        files.push_back(
            SegmentFile{0, 0, zstd ? zlog_path(dir, 0) : segment_path(dir, 0), zstd, 0});
    }

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

    for (size_t i = 0; i < files.size(); ++i) {
        Segment seg;
        seg.first_offset = files[i].first_offset;
        seg.bytes = files[i].bytes;
        seg.compressed = files[i].compressed;
        if (seg.compressed) {
            struct stat st {};
            seg.zlog_bytes =
                ::stat(files[i].path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
        }
        segments_.push_back(seg);
    }
    // Older compressed segments whose stage outlived them (a stop between a roll and the next
    // seal): their stage is complete and synced (roll() syncs it), so what the blocks lack is
    // sealed from it now; a stage the blocks cover already is simply removed.
    for (size_t i = 0; i + 1 < segments_.size(); ++i) {
        Segment& seg = segments_[i];
        if (!seg.compressed) continue;
        const std::string staged = stage_path(dir, seg.first_offset);
        if (::access(staged.c_str(), F_OK) != 0) {
            seg.sealed_bytes = seg.bytes;
            continue;
        }
        int zfd = ::open(files[i].path.c_str(), O_RDONLY | O_CLOEXEC);
        BlockScan blocks;
        if (zfd >= 0) {
            auto scanned = scan_blocks(zfd, files[i].path, seg.zlog_bytes, false, blocks);
            ::close(zfd);
            if (!scanned) return std::unexpected(scanned.error());
        }
        const uint64_t sealed =
            blocks.blocks.empty() ? 0 : blocks.blocks.back().end_offset() - seg.first_offset;
        if (sealed < seg.bytes) {
            if (blocks.good_file_bytes < seg.zlog_bytes) {
                if (::truncate(files[i].path.c_str(), static_cast<off_t>(blocks.good_file_bytes)) !=
                    0) {
                    return fail("cannot cut the torn tail of log segment " + files[i].path + ": " +
                                errno_text(errno));
                }
                seg.zlog_bytes = blocks.good_file_bytes;
            }
            auto zlog =
                seal_range(SealJob{seg.first_offset, sealed, seg.bytes, seg.zlog_bytes, false});
            if (!zlog) return std::unexpected(zlog.error());
            seg.zlog_bytes = *zlog;
        }
        seg.sealed_bytes = seg.bytes;
        if (::unlink(staged.c_str()) != 0 && errno != ENOENT) {
            return fail("cannot remove the sealed log stage " + staged + ": " + errno_text(errno));
        }
    }

    SegmentFile& last = files.back();
    Segment& newest = segments_.back();
    active_path_ = last.compressed ? stage_path(dir, last.first_offset) : last.path;
    active_fd_ = ::open(active_path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (active_fd_ < 0) {
        return fail("cannot open log segment " + active_path_ + ": " + errno_text(errno));
    }
    uint64_t stage_bytes = 0;
    uint64_t sealed = 0;
    if (last.compressed) {
        // The blocks are checked whole (data CRCs too): a last block that fails is a seal torn by
        // a crash or a power loss, cut here. Its frames are still in the stage (a seal punches the
        // stage only after its blocks are synced), or they were not durable.
        int zfd = ::open(last.path.c_str(), O_RDWR | O_CLOEXEC);
        if (zfd >= 0) {
            BlockScan blocks;
            auto scanned = scan_blocks(zfd, last.path, newest.zlog_bytes, true, blocks);
            if (scanned && blocks.good_file_bytes < newest.zlog_bytes &&
                ::ftruncate(zfd, static_cast<off_t>(blocks.good_file_bytes)) != 0) {
                scanned = fail("cannot cut the torn tail of log segment " + last.path + ": " +
                               errno_text(errno));
            }
            ::close(zfd);
            if (!scanned) return std::unexpected(scanned.error());
            if (blocks.good_file_bytes < newest.zlog_bytes) {
                counters_.tail_truncations = 1;
                counters_.tail_bytes_cut += newest.zlog_bytes - blocks.good_file_bytes;
            }
            newest.zlog_bytes = blocks.good_file_bytes;
            sealed =
                blocks.blocks.empty() ? 0 : blocks.blocks.back().end_offset() - last.first_offset;
        }
        struct stat st {};
        if (::fstat(active_fd_, &st) != 0) {
            return fail("cannot stat log stage " + active_path_ + ": " + errno_text(errno));
        }
        stage_bytes = static_cast<uint64_t>(st.st_size);
    } else {
        stage_bytes = last.bytes;
    }
    FrameContext context;
    Result<SegmentSource> source =
        last.compressed ? SegmentSource::compressed(dir, last.first_offset, active_fd_)
                        : Result<SegmentSource>(SegmentSource::plain(active_fd_, last.path));
    if (!source) return std::unexpected(source.error());
    const uint64_t logical = std::max(stage_bytes, sealed);
    SegmentWindow window(*source, last.first_offset, logical, scan_block_bytes);
    auto scan = scan_segment(window, UINT64_MAX, context);
    if (!scan) return std::unexpected(scan.error());
    // Sealed blocks were durable: they are never cut, whatever the frames in them say.
    const uint64_t good = std::max(scan->good_bytes, sealed);
    if (good < stage_bytes) {
        // Only what follows the last good record is cut; nothing before it is touched.
        if (::ftruncate(active_fd_, static_cast<off_t>(good)) != 0) {
            return fail("cannot cut the torn tail of log segment " + active_path_ + " at byte " +
                        std::to_string(good) + ": " + errno_text(errno));
        }
        counters_.tail_truncations = 1;
        counters_.tail_bytes_cut += stage_bytes - good;
    }
    counters_.damaged_regions = scan->damaged_regions;
    counters_.damaged_bytes = scan->damaged_bytes;
    newest.bytes = good;
    newest.sealed_bytes = sealed;
    if (last.compressed && sealed < good) {
        // Re-seal what the stage holds past the blocks: a crash before (or inside) the last seal.
        auto zlog = seal_range(SealJob{last.first_offset, sealed, good, newest.zlog_bytes, true});
        if (!zlog) return std::unexpected(zlog.error());
        newest.zlog_bytes = *zlog;
        newest.sealed_bytes = good;
    }
    if (last.compressed) punch_stage(newest);
    // A previous process may have died with its appends only in the page cache: make them
    // (and the cut) durable, so durable_offset() starts true. The directory entry too.
    if (::fdatasync(active_fd_) != 0 || ::fsync(dir_fd_) != 0) {
        return fail("cannot sync log segment " + active_path_ + ": " + errno_text(errno));
    }

    for (size_t i = 0; i < segments_.size(); ++i) {
        segments_[i].first_ingest_ms = i + 1 == segments_.size()
                                           ? scan->first_ingest_ms
                                           : first_ingest_ms(dir, segments_[i].first_offset);
    }
    Segment& active = segments_.back();
    active.max_ingest_ms = scan->last_ingest_ms;
    // The ingest time never decreases along the log, so a segment's newest record is no newer
    // than the next segment's first.
    for (size_t i = 0; i + 1 < segments_.size(); ++i) {
        segments_[i].max_ingest_ms = segments_[i + 1].first_ingest_ms;
    }
    if (scan->records == 0 && segments_.size() >= 2) {
        // The active segment is empty: the newest ingest time is the previous segment's last.
        const Segment& prev = segments_[segments_.size() - 2];
        auto prev_source = SegmentSource::open(dir, prev.first_offset);
        if (!prev_source) return std::unexpected(prev_source.error());
        if (!*prev_source) {
            return fail("log segment " + files[files.size() - 2].path +
                        " disappeared while opening");
        }
        FrameContext prev_context;
        SegmentWindow prev_window(**prev_source, prev.first_offset, prev.bytes, scan_block_bytes);
        auto prev_scan = scan_segment(prev_window, UINT64_MAX, prev_context);
        if (!prev_scan) return std::unexpected(prev_scan.error());
        segments_[segments_.size() - 2].max_ingest_ms = prev_scan->last_ingest_ms;
        // An anchor alone in the active segment carries the newest time (its record was cut).
        last_ingest_ms_ = std::max(prev_scan->last_ingest_ms, scan->last_ingest_ms);
    } else {
        last_ingest_ms_ = scan->last_ingest_ms;
    }
    // Appends go on in the active segment's compact part with its dictionary; a segment of the
    // old format, one with damage (whose definitions may be lost), or one of the other storage
    // format than storage.log_compression asks for is closed instead: the first append starts a
    // new segment.
    if (good > 0) {
        if (context.compact && scan->damaged_regions == 0 && last.compressed == zstd) {
            dictionary_.adopt(context);
        } else {
            roll_due_ = true;
        }
    }
    publish_extent();
    durable_offset_.store(end_offset_.load());
    recovered_ = true;
    return {};
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

Error LogWriter::poison(std::string message) {
    if (!poisoned_) {
        poisoned_ = message + " (the log writer stopped; restart the process to rescan the log)";
        poisoned_flag_.store(true, std::memory_order_release);
    }
    return Error{*poisoned_};
}

Error LogWriter::poison_after_failed_sync(const std::string& path, int err) {
    std::string message = "cannot sync log segment " + path + ": " + errno_text(err);
    Segment& active = segments_.back();
    const uint64_t durable = durable_offset();
    // Only the active segment can hold bytes past the durable offset (roll() syncs a segment
    // before it creates the next). If `path` is no longer active, a roll synced it since.
    if (poisoned_ || path != active_path_ || durable >= active.first_offset + active.bytes) {
        return poison(std::move(message));
    }
    TM_ASSERT(durable >= active.first_offset);
    const uint64_t keep_bytes = durable - active.first_offset;
    const uint64_t cut_bytes = active.bytes - keep_bytes;
    // The bytes past the durable offset may live only in the page cache now (Linux marks pages
    // whose writeback failed clean): a restarted process would read them as valid records and
    // its own fdatasync would report success. Cutting them makes the file say what the disk
    // may hold; records appended since the last good sync are lost, like on a power loss.
    if (::ftruncate(active_fd_, static_cast<off_t>(keep_bytes)) != 0) {
        return poison(message + "; and cannot cut the segment back to its durable end at byte " +
                      std::to_string(keep_bytes) + " (" + errno_text(errno) +
                      "): after a restart, records past offset " + std::to_string(durable) +
                      " may be read although the disk may not hold them");
    }
    active.bytes = keep_bytes;
    publish_extent();
    return poison(message + "; cut the " + std::to_string(cut_bytes) +
                  " bytes appended after the durable offset " + std::to_string(durable) +
                  ", which the disk may not hold");
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

Result<bool> LogWriter::maybe_sync(int64_t now_ms) {
    if (poisoned()) return fail(poison_error());  // the ingest loop's regular call hears of it
    // A compressed log under fsync=always seals on the interval too (its records are durable in
    // the stage already; the seal is for the disk bytes).
    const bool seals =
        options_.fsync == FsyncPolicy::always && options_.compression == Compression::zstd;
    if (options_.fsync != FsyncPolicy::interval && !seals) return false;
    int64_t last = last_sync_ms_.load(std::memory_order_relaxed);
    if (last != ingest_ms_unknown && now_ms - last < options_.fsync_interval_ms) return false;
    last_sync_ms_.store(now_ms, std::memory_order_relaxed);
    if (seals) {
        auto sealed = seal();
        if (!sealed) return std::unexpected(sealed.error());
        return true;
    }
    if (durable_offset() >= end_offset()) return false;
    auto synced = sync();
    if (!synced) return std::unexpected(synced.error());
    return true;
}

Result<void> LogWriter::sync() {
    int fd = -1;
    uint64_t end = 0;
    std::string path;
    bool sealing = false;
    {
        std::lock_guard lock(mutex_);
        if (poisoned_) return fail(*poisoned_);
        for (const Segment& seg : segments_)
            sealing = sealing || (seg.compressed && seg.sealed_bytes < seg.bytes);
    }
    if (sealing) {
        // For a compressed active segment the seal is the sync: its blocks are fdatasynced, the
        // stage never is (that is what keeps the staged frames off the flash).
        auto sealed = seal();
        if (!sealed) return std::unexpected(sealed.error());
    }
    {
        std::lock_guard lock(mutex_);
        if (poisoned_) return fail(*poisoned_);
        if (segments_.back().compressed && options_.fsync != FsyncPolicy::always) {
            return {};  // sealed up to where it was; appends since are for the next seal
        }
        end = end_offset();
        if (durable_offset() >= end) return {};
        // A file description of its own (not a dup of active_fd_): Linux reports a writeback
        // error once per open file description, so with a shared one whichever of this
        // fdatasync and roll()'s or append()'s ran second would be told all is well and count
        // lost bytes as durable. fdatasync on a read-only descriptor syncs the file on Linux.
        // Segments closed meanwhile were synced by roll().
        fd = ::open(active_path_.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            return fail("cannot sync log segment " + active_path_ + ": " + errno_text(errno));
        path = active_path_;
    }
    int rc = ::fdatasync(fd);
    int err = errno;
    ::close(fd);
    std::lock_guard lock(mutex_);
    if (rc != 0) return std::unexpected(poison_after_failed_sync(path, err));
    if (poisoned_) return fail(*poisoned_);  // the bytes synced may have been cut meanwhile
    ++counters_.syncs;
    raise_to(durable_offset_, end);
    return {};
}

Result<RetentionResult> LogWriter::apply_retention(uint64_t keep_from_offset, int64_t now_ms) {
    // One retention at a time: a failed unlink puts its segments back at the front (below),
    // which is only right if no other call removed segments after them meanwhile.
    std::lock_guard retention_lock(retention_mutex_);
    // No seal runs meanwhile: a segment whose seal is due may go (its stage with it).
    std::lock_guard seal_lock(seal_mutex_);
    RetentionResult result;
    std::vector<Segment> doomed;
    {
        std::lock_guard lock(mutex_);
        uint64_t total = disk_bytes();  // what the segments take on disk
        const uint64_t bytes_max = options_.retention_bytes_max;
        const int64_t age_max = options_.retention_age_ms_max;
        while (segments_.size() > 1) {
            const Segment& oldest = segments_.front();
            if (oldest.first_offset + oldest.bytes > keep_from_offset) break;
            bool over_bytes = bytes_max > 0 && total > bytes_max;
            bool over_age = age_max > 0 && oldest.max_ingest_ms != ingest_ms_unknown &&
                            oldest.max_ingest_ms < now_ms - age_max;
            if (!over_bytes && !over_age) break;
            total -= oldest.disk();
            doomed.push_back(oldest);
            segments_.pop_front();
        }
        publish_extent();
    }
    // Unlinked outside the lock: appends need not wait for the filesystem. Readers holding a
    // removed file open keep reading it; the space returns when they close it. Oldest first,
    // stopping at the first failure, so that what stays is contiguous.
    size_t removed = 0;
    std::optional<std::string> failure;
    for (; removed < doomed.size(); ++removed) {
        const Segment& seg = doomed[removed];
        const std::string path = seg.compressed ? zlog_path(options_.dir, seg.first_offset)
                                                : segment_path(options_.dir, seg.first_offset);
        if (seg.compressed) (void)::unlink(stage_path(options_.dir, seg.first_offset).c_str());
        if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
            const int err = errno;
            failure = "cannot remove log segment " + path + " for retention: " + errno_text(err);
            break;
        }
        ++result.segments_removed;
        result.bytes_removed += seg.disk();
    }
    std::lock_guard lock(mutex_);
    // A segment that could not be removed is still on disk, and so is everything after it: it
    // stays in the log (counted, readable, and tried again by the next retention) rather than
    // leak, unseen, the space retention is there to free.
    for (size_t i = doomed.size(); i > removed; --i)
        segments_.push_front(doomed[i - 1]);
    counters_.segments_removed += result.segments_removed;
    counters_.bytes_removed += result.bytes_removed;
    publish_extent();
    result.first_offset = segments_.front().first_offset;
    if (failure) return fail(*failure);
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
    stats.disk_bytes = disk_bytes();
    stats.oldest_ingest_ms = oldest_ingest_ms();
    stats.last_ingest_ms = last_ingest_ms_;
    stats.poisoned = poisoned_.has_value();
    return stats;
}

std::string LogWriter::poison_error() const {
    std::lock_guard lock(mutex_);
    return poisoned_.value_or(std::string());
}

}  // namespace tidemark::log
