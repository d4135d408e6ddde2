// The frame bytes of one segment, whichever its format (segment_files.h): what the reader and the
// writer's scans read, by segment position (log offset less the segment's first offset).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "adapters/log/zlog_block.h"
#include "core/result.h"

namespace tidemark::log {

/// Operation: a plain segment is its file. A compressed one is its blocks (decompressed one at a
/// time, the last one kept) followed by its stage's plain frames from the blocks' end on. A
/// stage's bytes below the blocks' end may be punched out (zeros) by the time they are read: the
/// writer seals a range into blocks and fdatasyncs them before it punches, so after reading the
/// stage the source looks at the blocks again and takes any range they cover by now from them.
/// A block whose data is damaged reads as its stage's bytes if a stage is open (a block being
/// written reads so too), else as zeros, like a range between blocks lost to a damaged header:
/// zeros are never a valid frame, so the frame scans (segment_scan.h) count the range as damage
/// and resume at the next valid frame.
/// Concurrency: one thread. The files may be appended to, sealed and punched by a writer in
/// another thread or process; a stage unlinked by a seal stays readable through the open file.
/// Limits: memory is one entry per block, and one block (block_raw_bytes_max) decompressed.
class SegmentSource {
  public:
    /// The segment at first_offset in dir; nullopt if no file of it exists.
    static Result<std::optional<SegmentSource>> open(const std::string& dir, uint64_t first_offset);
    /// A plain segment whose fd stays the caller's.
    static SegmentSource plain(int fd, std::string path);
    /// A compressed segment whose stage fd (or -1) stays the caller's (the writer's).
    static Result<SegmentSource> compressed(const std::string& dir, uint64_t first_offset,
                                            int stage_fd);
    SegmentSource(SegmentSource&& other) noexcept;
    SegmentSource& operator=(SegmentSource&& other) noexcept;
    SegmentSource(const SegmentSource&) = delete;
    SegmentSource& operator=(const SegmentSource&) = delete;
    ~SegmentSource();

    /// Up to n bytes at segment position pos; fewer only where the segment ends.
    Result<size_t> read(char* buf, size_t n, uint64_t pos);
    /// Its frame bytes now (a tailed segment grows).
    Result<uint64_t> size();
    /// The end of its blocks (0 for a plain segment), as last looked at.
    uint64_t sealed_bytes() const;
    const std::string& path() const { return path_; }
    bool is_compressed() const { return compressed_; }
    /// Blocks found damaged so far (data CRC or a lost header): also counted as frame damage.
    uint64_t damaged_blocks() const { return damaged_blocks_; }

  private:
    SegmentSource() = default;
    void close_owned();
    /// Opens the .zlog once it exists and walks its headers far enough to cover segment
    /// position `need` (all of them for UINT64_MAX), picking up blocks appended since.
    Result<void> refresh(uint64_t need = UINT64_MAX);
    Result<size_t> read_blocks(char* buf, size_t n, uint64_t pos);
    Result<size_t> read_stage(char* buf, size_t n, uint64_t pos);

    std::string dir_;
    std::string path_;
    uint64_t first_offset_ = 0;
    bool compressed_ = false;
    int fd_ = -1;  // the plain file, or the .zlog (-1 until it exists)
    bool owns_fd_ = false;
    int stage_fd_ = -1;
    bool owns_stage_ = false;
    BlockScan scan_{0};             // first_offset set by compressed()
    uint64_t scanned_bytes_ = 0;    // the .zlog's size at the last walk
    bool scan_stopped_ = false;     // that walk stopped early (at a `need`)
    std::optional<size_t> cached_;  // index of the block in raw_
    bool cached_ok_ = false;
    std::string raw_;
    std::string stored_;
    uint64_t damaged_blocks_ = 0;
};

}  // namespace tidemark::log
