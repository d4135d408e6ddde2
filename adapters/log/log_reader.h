// The reading end of the ingest log: replay from any record offset, and tail a live writer.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "adapters/log/record.h"
#include "adapters/log/segment_source.h"
#include "core/result.h"

namespace tidemark::log {

struct ReaderOptions {
    /// Bytes read per syscall. A record larger than this grows the buffer to fit it (at most
    /// frame_header_bytes + record_body_bytes_max).
    uint64_t buffer_bytes = uint64_t{1} << 20;
};

/// Damage a reader skipped over (see LogReader). Non-zero means the storage lost data: alarm.
struct ReaderStats {
    uint64_t damaged_regions = 0;  // runs of invalid bytes skipped, each ended by a valid record
    uint64_t damaged_bytes = 0;    // (or by the end of a sealed segment, or end_offset_max)
    std::string last_damage;       // names the segment, the offsets and the cause; "" if none
};

/// Reads the records of the log in DIR in order, following segment rollover.
///
/// Operation: open() positions at the oldest retained record; seek() at any record offset (one
/// returned by LogWriter::append or a Record's offset/next_offset). next() returns false at the
/// current end of the log: call it again later to tail a writer. Reads go through a large
/// buffer, not a syscall per record. An incomplete frame is never completed from the buffer:
/// the next attempt re-reads it from its start, since a writer that rolled back a failed write
/// (ENOSPC) writes other bytes at that place, which stale ones would garble.
/// Damage: at an invalid frame the reader searches on for a valid one (segment_scan.h, the
/// same rule as LogWriter::open()). If one follows, the bytes in between are skipped and
/// counted in stats(), and reading resumes there: records after damage keep their offsets.
/// If none follows: in a sealed segment the damage runs to its end and is skipped; at the end
/// of the newest segment it is a torn tail (or damage that the writer's next record will end)
/// and next() returns false without counting it, unless end_offset_max says the writer's
/// records go further, when it is skipped up to end_offset_max. A file that ends below
/// end_offset_max, and a valid record of an unknown type, are errors.
/// Compact segments (record.h): anchors are read and never returned; seek() into the middle of
/// a segment first walks the segment's frames before the offset (heads and CRCs, as the
/// writer's open() does) for its topic dictionary, so a seek costs up to a segment's read. A
/// message whose topic definition was lost to damage is lost with it: skipped and counted as
/// damage (the writer defines each topic again after the next anchor). next() may also move
/// position() past an anchor when it returns false.
/// Concurrency: one thread per reader, except stats(), which any thread may call. Any number
/// of readers may run beside a writer in another thread or process; the reader never modifies
/// the files. A segment removed by retention while being read stays readable through the open
/// file; moving into a removed one is an error.
/// Limits: memory is the buffer (see ReaderOptions), plus a 256 KiB block (or one frame, if
/// larger) while searching past damage. Offsets that are not record starts are not detected by
/// seek(); next() then skips to the next record as if the bytes were damage. The search takes the
/// first plausible frame (valid CRC, known type, ingest time not before the last record read); a
/// payload that embeds such a frame can be taken for a record when damage lands just before it.
class LogReader {
  public:
    static Result<std::unique_ptr<LogReader>> open(const std::string& dir,
                                                   ReaderOptions options = {});
    ~LogReader();
    LogReader(const LogReader&) = delete;
    LogReader& operator=(const LogReader&) = delete;

    /// Positions at `offset`. An offset below the oldest retained segment (removed by
    /// retention) or past the end of the newest is an error naming both.
    Result<void> seek(uint64_t offset);
    /// Reads the record at position(), skipping damage (see the class comment). Returns false
    /// at the end of the data written so far or when position() >= end_offset_max (pass the
    /// writer's end_offset() or durable_offset() to read exactly what it has published). The
    /// position moves on a false return only past damage skipped up to end_offset_max.
    Result<bool> next(Record& out, uint64_t end_offset_max = UINT64_MAX);
    /// Up to out.size() records, as next() returns them one by one, whose views all stay valid
    /// until the next call to next() or next_batch(): a caller may look at the records ahead of
    /// the one it processes (issue 31). The batch ends early where next() would read the file
    /// again or skip damage, before a frame that gives a topic id a topic it does not have yet
    /// (the dictionary's block may move), and where next() returns false. Returns how many; 0 means
    /// what next() returning false means.
    Result<size_t> next_batch(std::span<Record> out, uint64_t end_offset_max = UINT64_MAX);
    /// The offset of the record the next call to next() returns.
    uint64_t position() const { return position_; }
    /// The damage skipped so far by this reader.
    ReaderStats stats() const;

  private:
    LogReader(std::string dir, ReaderOptions options);
    void close_segment();
    /// next(); with `may_read` false it returns false instead of reading the file, skipping
    /// damage or applying a topic definition (the rest of a batch, see next_batch).
    Result<bool> read_next(Record& out, uint64_t end_offset_max, bool may_read);
    Result<bool> open_segment(uint64_t first_offset);  // false: no such file
    Result<size_t> fill(uint64_t bytes_needed);        // bytes buffered from position_ on
    Result<bool> next_segment_exists();
    /// At an invalid or unfinished frame at position_: true when next() should read on (at a
    /// valid frame past the damage, at the end of a sealed segment, or the frame is valid by
    /// now), false when next() should return false.
    Result<bool> skip_damage(uint64_t end_offset_max);
    void count_damage(uint64_t from_pos, uint64_t to_pos, const char* what);
    Error ends_below(uint64_t end_offset_max) const;
    /// What next() does when it has read all of its file and the frame at position_ is still
    /// incomplete (`need` bytes): stop, read the file once more, or go on from a fresh state
    /// (past damage, or in the next segment).
    enum class AtEnd { stop, read_again, go_on };
    Result<AtEnd> at_file_end(uint64_t need, uint64_t end_offset_max, bool rechecked);

    const std::string dir_;
    const ReaderOptions options_;
    std::optional<SegmentSource> source_;  // the segment being read
    uint64_t segment_first_ = 0;
    std::string segment_path_;
    std::vector<char> buffer_;
    size_t begin_ = 0;  // buffer_[begin_, end_) holds the file's bytes from position_ on
    size_t end_ = 0;
    uint64_t position_ = 0;
    int64_t last_ingest_ms_ = ingest_ms_unknown;  // of the last record returned since seek()
    FrameContext context_;                        // of the segment being read, up to position_

    mutable std::mutex stats_mutex_;
    ReaderStats stats_;
};

}  // namespace tidemark::log
