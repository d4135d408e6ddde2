// LogWriter's seals: a compressed segment's staged frames compressed into blocks (zlog_block.h).
//
// Why a stage: an acknowledged record must be in the file before its PUBACK, not in a
// compression buffer, so records are appended plain to the segment's stage exactly as to a plain
// segment. A seal (each sync(): the fsync interval's, a checkpoint's) compresses the stage's
// unsealed frames into blocks appended to the .zlog, fdatasyncs the .zlog, and only then punches
// the sealed part out of the stage. The stage itself is never fdatasynced under fsync=interval:
// its pages are dropped by the punch within the interval, before the kernel writes them back
// (dirty_expire_centisecs is 30 s), so what reaches the flash is the blocks (the kernel counts the
// dropped pages in cancelled_write_bytes). A power cut loses at most what was staged since the
// last seal: the interval, as for a plain log. Recovery (LogWriter::recover): a .zlog's torn last
// block is cut; the stage's frames past the blocks' end are sealed again; a stage the blocks cover
// is dropped.
#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "adapters/log/log_writer.h"
#include "adapters/log/log_writer_internal.h"
#include "adapters/log/segment_files.h"
#include "adapters/log/segment_scan.h"
#include "adapters/log/zlog_block.h"
#include "core/crash_point.h"

namespace tidemark::log {
namespace {

constexpr uint64_t punch_align_bytes = 4096;  // whole pages only: a partial one would be zeroed
// What a seal reads and compresses at a time: a few blocks, so that a long deferred range is
// sealed in bounded memory.
constexpr uint64_t seal_piece_bytes = 4 * block_raw_bytes_max;

}  // namespace

Result<uint64_t> LogWriter::seal_range(const SealJob& job) {
    const std::string& dir = options_.dir;
    const std::string staged = stage_path(dir, job.first_offset);
    const std::string zpath = zlog_path(dir, job.first_offset);
    seal_failure_ = SealFailure::none;
    int sfd = ::open(staged.c_str(), O_RDONLY | O_CLOEXEC);
    if (sfd < 0) return fail("cannot open log stage " + staged + ": " + std::strerror(errno));
    int fd = -1;
    uint64_t written = 0;  // block bytes past job.zlog_bytes
    std::string raw;
    std::string blocks;
    std::string failed;
    // Piece by piece, so that a seal deferred for long (a full disk) needs no more memory than a
    // normal one: the pieces' blocks are fdatasynced together at the end.
    for (uint64_t from = job.from; from < job.to && failed.empty();) {
        const uint64_t piece = std::min(seal_piece_bytes, job.to - from);
        raw.resize(static_cast<size_t>(piece));
        auto got = pread_full(sfd, raw.data(), raw.size(), from, staged);
        if (!got) {
            failed = got.error().message;
            break;
        }
        if (*got != raw.size()) {
            failed = "log stage " + staged + " ends at byte " + std::to_string(from + *got) +
                     " before the " + std::to_string(job.to) + " bytes appended to it";
            break;
        }
        blocks.clear();
        auto encoded = encode_blocks(raw, job.first_offset + from, blocks);
        if (!encoded) {
            failed = encoded.error().message;
            seal_failure_ = SealFailure::write;
            break;
        }
        if (fd < 0) {
            core::crash_point(core::CrashPoint::before_log_seal_write);
            fd = ::open(zpath.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
            if (fd < 0) {
                failed = "cannot open log segment " + zpath + ": " + std::strerror(errno);
                seal_failure_ = SealFailure::write;
                break;
            }
        }
        size_t done = 0;
        while (done < blocks.size()) {
            ssize_t n = ::pwrite(fd, blocks.data() + done, blocks.size() - done,
                                 static_cast<off_t>(job.zlog_bytes + written + done));
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) {
                failed =
                    "cannot write log segment " + zpath + ": " + std::strerror(n < 0 ? errno : EIO);
                seal_failure_ = SealFailure::write;
                break;
            }
            done += static_cast<size_t>(n);
        }
        written += done;
        from += piece;
    }
    ::close(sfd);
    if (failed.empty() && ::fdatasync(fd) != 0) {
        // The blocks may be in the page cache only: cut them, so that a restart seals the stage
        // (which still holds their frames) again instead of believing them.
        failed = std::string("cannot sync log segment ") + zpath + ": " + std::strerror(errno);
        seal_failure_ = SealFailure::sync;
    }
    if (!failed.empty()) {
        if (fd >= 0 && ::ftruncate(fd, static_cast<off_t>(job.zlog_bytes)) != 0) {
            failed += std::string("; and cannot cut the blocks back: ") + std::strerror(errno);
            seal_failure_ = SealFailure::sync;
        }
        if (fd >= 0) ::close(fd);
        return fail(failed);
    }
    ::close(fd);
    // A new .zlog's name must survive a power cut before the stage it replaces is punched.
    if (job.zlog_bytes == 0 && ::fsync(dir_fd_) != 0) {
        seal_failure_ = SealFailure::sync;
        return fail("cannot sync log directory " + dir + ": " + std::strerror(errno));
    }
    core::crash_point(core::CrashPoint::after_log_seal_write);
    return job.zlog_bytes + written;
}

Result<void> LogWriter::sync_stage(const SealJob& job) {
    const std::string staged = stage_path(options_.dir, job.first_offset);
    // A file description of its own, as sync() uses for a plain segment (writeback errors are
    // reported once per description).
    int fd = ::open(staged.c_str(), O_RDONLY | O_CLOEXEC);
    int err = fd < 0 ? errno : 0;
    if (fd >= 0) {
        if (::fdatasync(fd) != 0) err = errno;
        ::close(fd);
    }
    std::lock_guard lock(mutex_);
    if (err != 0) return std::unexpected(poison_after_failed_sync(staged, err));
    if (poisoned_) return fail(*poisoned_);
    ++counters_.syncs;
    detail::raise_to(durable_offset_, job.first_offset + job.to);
    publish_extent();
    return {};
}

Result<void> LogWriter::seal() {
    std::lock_guard seal_lock(seal_mutex_);
    std::vector<SealJob> jobs;
    {
        std::lock_guard lock(mutex_);
        if (poisoned_) return fail(*poisoned_);
        for (size_t i = 0; i < segments_.size(); ++i) {
            const Segment& seg = segments_[i];
            if (!seg.compressed || seg.sealed_bytes >= seg.bytes) continue;
            jobs.push_back(SealJob{seg.first_offset, seg.sealed_bytes, seg.bytes, seg.zlog_bytes,
                                   i + 1 == segments_.size()});
        }
    }
    // Compressed and written outside mutex_: appends go on meanwhile (into the stage, past `to`).
    std::string deferred;  // why a job's blocks could not be written, if one's could not
    for (const SealJob& job : jobs) {
        auto zlog = seal_range(job);
        if (!zlog && seal_failure_ == SealFailure::write) {
            // The blocks could not be made (a full disk, most likely: ENOSPC, EDQUOT): the stage
            // still holds every frame of the range, so the stage is made durable instead, as a
            // plain segment would be, and the next seal tries again. Until then the range takes
            // its plain size on disk and its pages reach the flash; sync(), and so checkpoints,
            // go on (the full-disk path needs them to trim the log).
            deferred = zlog.error().message;
            // A closed segment's stage was synced by its roll.
            if (!job.active) continue;
            auto synced = sync_stage(job);
            if (!synced) return synced;
            continue;
        }
        std::lock_guard lock(mutex_);
        if (!zlog && seal_failure_ == SealFailure::none) return std::unexpected(zlog.error());
        if (!zlog) {
            // As after a failed fdatasync of a plain segment (see the class comment).
            poison_after_failed_sync(active_path_, EIO);
            return std::unexpected(poison(zlog.error().message));
        }
        if (poisoned_) return fail(*poisoned_);
        Segment* seg = nullptr;
        for (Segment& s : segments_)
            if (s.first_offset == job.first_offset) seg = &s;
        TM_ASSERT(seg != nullptr);  // retention waits for seal_mutex_
        seg->sealed_bytes = job.to;
        seg->zlog_bytes = *zlog;
        ++counters_.seals;
        counters_.sealed_bytes += job.to - job.from;
        counters_.block_bytes += *zlog - job.zlog_bytes;
        if (job.active) ++counters_.syncs;
        detail::raise_to(durable_offset_, job.first_offset + job.to);
        if (seg == &segments_.back()) {
            punch_stage(*seg);
        } else if (seg->sealed_bytes == seg->bytes) {
            // Sealed whole: its stage goes (a reader that has it open keeps reading it).
            const std::string staged = stage_path(options_.dir, seg->first_offset);
            if (::unlink(staged.c_str()) != 0 && errno != ENOENT) {
                return fail("cannot remove the sealed log stage " + staged + ": " +
                            std::strerror(errno));
            }
        }
        publish_extent();
    }
    std::lock_guard lock(mutex_);
    if (!deferred.empty()) ++counters_.seals_deferred;
    seal_error_ = std::move(deferred);
    return {};
}

void LogWriter::punch_stage(Segment& segment) {
    const uint64_t to = segment.sealed_bytes / punch_align_bytes * punch_align_bytes;
    if (to <= segment.punched_bytes) return;
    // A file system without holes (EOPNOTSUPP) keeps the stage's bytes until the segment is
    // sealed whole and its stage removed: more disk for a while, nothing lost.
    if (::fallocate(active_fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                    static_cast<off_t>(segment.punched_bytes),
                    static_cast<off_t>(to - segment.punched_bytes)) == 0) {
        segment.punched_bytes = to;
    }
}

}  // namespace tidemark::log
