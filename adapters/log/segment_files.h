// The segment files of a log directory: `DIR/%020llu.log`, named by the global offset of their
// first byte, so that sorting names sorts offsets and a record's offset finds its file.
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
    uint64_t bytes = 0;  // the file's size when listed
    std::string path;
};

/// DIR/00000000000000001234.log
std::string segment_path(const std::string& dir, uint64_t first_offset);

/// The segments of `dir`, oldest first. Files with other names are ignored.
Result<std::vector<SegmentFile>> list_segments(const std::string& dir);

}  // namespace tidemark::log
