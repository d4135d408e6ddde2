// The segment files of a log directory, named by the global offset of their first byte, so that
// sorting names sorts offsets and a record's offset finds its file. A segment is either
//   DIR/%020llu.log         plain: its frames (record.h) as written, or
//   DIR/%020llu.zlog        compressed: its frames in zstd blocks (zlog_block.h), with, while
//   DIR/%020llu.zlog.stage  frames are appended to it, the frames not sealed into blocks yet,
//                           plain, each at its segment position (a sparse file: the part already
//                           in blocks is punched out; see LogWriter). Either file may be absent
//                           (a segment's first second has only a stage; a sealed one, no stage).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/result.h"

namespace tidemark::log {

/// A directory holding more segments than this is refused rather than listed: at the default
/// 64 MiB a segment that is 64 TiB, far past any retention a gateway can hold.
inline constexpr size_t segment_count_max = 1u << 20;

struct SegmentFile {
    uint64_t first_offset = 0;
    /// Its frame bytes (log offsets it covers) when listed: the file's size for a plain segment;
    /// for a compressed one, up to the next segment's first offset, or, for the newest, its
    /// stage's size (or its last block's end when it has no stage).
    uint64_t bytes = 0;
    std::string path;  // the .log, or the .zlog (which may not exist yet: see above)
    bool compressed = false;
    /// What it takes on disk: allocated blocks (st_blocks), so a stage's punched part and any
    /// other hole count for nothing.
    uint64_t disk_bytes = 0;
};

/// DIR/00000000000000001234.log
std::string segment_path(const std::string& dir, uint64_t first_offset);
/// DIR/00000000000000001234.zlog
std::string zlog_path(const std::string& dir, uint64_t first_offset);
/// DIR/00000000000000001234.zlog.stage
std::string stage_path(const std::string& dir, uint64_t first_offset);

/// The segments of `dir`, oldest first. Files with other names are ignored. A first offset with
/// both a plain and a compressed segment is an error (only a person can have made it).
Result<std::vector<SegmentFile>> list_segments(const std::string& dir);

/// Whether a segment of either format starts at first_offset.
bool segment_exists(const std::string& dir, uint64_t first_offset);

/// The bytes a file takes on disk (st_blocks x 512); 0 if it does not exist.
uint64_t file_disk_bytes(const std::string& path);

}  // namespace tidemark::log
