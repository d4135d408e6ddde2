// Reading a segment file frame by frame, and finding where frames resume after damage: shared
// by the writer's open() scan and the reader's resynchronisation, so that both draw the line
// between a torn tail and damage in the middle in the same place.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "adapters/log/record.h"
#include "adapters/log/segment_source.h"
#include "core/result.h"

namespace tidemark::log {

/// Reads exactly n bytes at pos unless the file ends first; returns the count read.
Result<size_t> pread_full(int fd, char* buf, size_t n, uint64_t pos, const std::string& path);

/// The bytes of one segment file up to a limit, read a block at a time: a syscall per block,
/// not per frame or per byte searched.
/// Limits: memory is one block, or one frame where a frame is larger (at most
/// frame_header_bytes + record_body_bytes_max). The file is not locked: if it shrinks while
/// being read, views come back shorter than asked.
class SegmentWindow {
  public:
    /// source stays the caller's (and names the file in errors); first_offset is the log offset
    /// of the segment's first byte; positions are segment positions (offset - first_offset).
    SegmentWindow(SegmentSource& source, uint64_t first_offset, uint64_t file_bytes,
                  size_t block_bytes);
    /// The file's bytes [pos, pos + n), cut short where file_bytes (or the file) ends first.
    /// Valid until the next call.
    Result<std::string_view> view(uint64_t pos, uint64_t n);
    /// Decodes the frame at pos (see decode_frame), reading as much of the file as it needs.
    Result<FrameStatus> decode_at(uint64_t pos, const FrameContext& context, Record& out,
                                  uint64_t& frame_bytes_out, FrameInfo& info);
    Result<FrameStatus> decode_at(uint64_t pos, Record& out, uint64_t& frame_bytes_out) {
        static const FrameContext start;
        FrameInfo info;
        return decode_at(pos, start, out, frame_bytes_out, info);
    }
    uint64_t first_offset() const { return first_offset_; }
    /// The limit given, or less once a read found the file shorter.
    uint64_t file_bytes() const { return file_bytes_; }
    const std::string& path() const { return source_.path(); }

  private:
    SegmentSource& source_;
    const uint64_t first_offset_;
    uint64_t file_bytes_;
    const size_t block_bytes_;
    std::vector<char> buffer_;  // allocated on the first read
    uint64_t buffer_pos_ = 0;   // file position of buffer_[0]
    size_t have_ = 0;
};

/// Where frames resume after damage at file position damaged_at: the first position after it
/// where a frame starts that decodes ok in `context` (a compact frame whose topic id is not
/// defined counts: its bytes are a frame), ends within window.file_bytes(), and whose ingest time
/// is at least ingest_ms_min (the log's ingest time never decreases, so an older "frame" is a
/// payload's bytes, not a record). `after_damaged_frame` is where the damaged frame's own
/// length field says the next frame starts (given after a CRC mismatch, when the damage may be
/// in the body or in the length). If a valid frame starts there and the search finds another
/// before it, the earlier one wins only if valid frames chain from it to there or past it (the
/// length field was damaged); otherwise it lies in the damaged record's payload and the length
/// field is believed. nullopt: no frame follows; at the end of the newest segment, that is a
/// torn tail.
/// Limits: a byte-by-byte search that computes a CRC only where peek_frame_head() passes,
/// linear in the bytes searched unless the data is made to pass that filter. Random bytes pass
/// for a frame with a 2^-32 chance; a payload built to hold frames with a plausible ingest time
/// can be taken for records when the damage lands just before it.
Result<std::optional<uint64_t>> find_next_frame(SegmentWindow& window, uint64_t damaged_at,
                                                std::optional<uint64_t> after_damaged_frame,
                                                int64_t ingest_ms_min, const FrameContext& context);

/// What a walk over a segment's frames found.
struct ScanResult {
    uint64_t good_bytes = 0;  // where the walk stopped: the end of the last valid frame (or upto)
    uint64_t records = 0;     // anchors are not records
    int64_t first_ingest_ms = ingest_ms_unknown;
    int64_t last_ingest_ms = ingest_ms_unknown;
    uint64_t damaged_regions = 0;  // invalid bytes with valid frames after them: left in place
    uint64_t damaged_bytes = 0;
};

/// Walks the frames of a segment from its start up to file position `upto` (or its end),
/// applying each to `context` (which starts clear): what the writer's open() scans, and what a
/// reader that seeks into the middle of a segment reads first for the segment's topic
/// dictionary. At an invalid or incomplete frame it searches for a valid frame further on
/// (find_next_frame): if one follows, the bytes in between are damage in the middle, counted
/// and skipped; if none follows, the walk ends there (a torn tail, for the writer). A valid
/// frame of an unknown type is an error naming the segment: a newer version wrote it.
Result<ScanResult> scan_segment(SegmentWindow& window, uint64_t upto, FrameContext& context);

}  // namespace tidemark::log
