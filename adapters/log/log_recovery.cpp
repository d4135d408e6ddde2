// LogWriter's recovery: the open of a log directory and the scan that finds where the log ends
// (a torn tail cut, damage counted, a compressed segment's stage sealed again or dropped) before
// the first append.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <string>
#include <vector>

#include "adapters/log/log_writer.h"
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

constexpr size_t scan_block_bytes = size_t{1} << 20;

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

}  // namespace

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
        BlockScan blocks(seg.first_offset);
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
            if (!zlog && seal_failure_ == SealFailure::write) {
                // No room for the blocks (a full disk): the synced stage keeps the frames and
                // the first sync seals them; opening must not wait for room.
                seal_error_ = zlog.error().message;
                seg.sealed_bytes = sealed;
                continue;
            }
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
            BlockScan blocks(newest.first_offset);
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
        if (zlog) {
            newest.zlog_bytes = *zlog;
            newest.sealed_bytes = good;
        } else if (seal_failure_ == SealFailure::write) {
            // As above: the stage, synced below, holds the frames until the first sync seals them.
            seal_error_ = zlog.error().message;
        } else {
            return std::unexpected(zlog.error());
        }
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
    if (!seal_error_.empty()) ++counters_.seals_deferred;
    publish_extent();
    durable_offset_.store(end_offset_.load());
    recovered_ = true;
    return {};
}

}  // namespace tidemark::log
