// How the ingest log is stored: where, how often it is made durable, and how much is kept.
#pragma once

#include <cstdint>
#include <string>

namespace tidemark::log {

/// When appended records reach the disk (not just the page cache).
enum class FsyncPolicy {
    always,    // fdatasync before append() returns: nothing acknowledged is lost on power loss
    interval,  // maybe_sync() syncs every fsync_interval_ms: power loss can cost that interval
    never,     // only sync() calls (checkpoints) and segment rollover sync: the kernel decides
};

/// How the segments the writer creates store their frames (segment_files.h). Either way the log
/// reads segments of both formats, so the setting can change between runs.
enum class Compression {
    none,  // plain segments: the frames as written
    zstd,  // frames staged plain, sealed into zstd blocks at each sync (zlog_block.h)
};

struct LogOptions {
    std::string dir;  // created if missing
    FsyncPolicy fsync = FsyncPolicy::interval;
    int64_t fsync_interval_ms = 1000;
    /// A segment is closed before a record would take it past this size (a record larger than
    /// this gets a segment of its own). Retention deletes whole segments, so this is also its
    /// granularity.
    uint64_t segment_bytes = uint64_t{64} << 20;
    uint64_t retention_bytes_max = 0;  // 0 = unbounded
    int64_t retention_age_ms_max = 0;  // 0 = unbounded
    Compression compression = Compression::none;
};

}  // namespace tidemark::log
