// LogWriter's sync, poison and retention: what makes appended records durable (fdatasync, or a
// compressed segment's seal), what a failed sync does to the writer (poisoned, its unsynced tail
// cut), and the removal of old segments by bytes on disk and age.
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

std::string LogWriter::poison_error() const {
    std::lock_guard lock(mutex_);
    return poisoned_.value_or(std::string());
}

}  // namespace tidemark::log
