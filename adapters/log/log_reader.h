// The reading end of the ingest log: replay from any record offset, and tail a live writer.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "adapters/log/record.h"
#include "core/result.h"

namespace tidemark::log {

struct ReaderOptions {
    /// Bytes read per syscall. A record larger than this grows the buffer to fit it (at most
    /// frame_header_bytes + record_body_bytes_max).
    uint64_t buffer_bytes = uint64_t{1} << 20;
};

/// Reads the records of the log in DIR in order, following segment rollover.
///
/// Operation: open() positions at the oldest retained record; seek() at any record offset (one
/// returned by LogWriter::append or a Record's offset/next_offset). next() returns false at the
/// current end of the log: call it again later to tail a writer. Reads go through a large
/// buffer, not a syscall per record. A damaged record is an error naming the segment and offset,
/// except at the tail of the newest segment, where an incomplete frame, or an invalid one
/// followed by nothing but zero bytes (what a power loss leaves before the writer's restart cuts
/// it), reads as the end of the data. Given an end_offset_max from the writer, any invalid
/// record below it is an error.
/// Concurrency: one thread per reader. Any number of readers may run beside a writer in another
/// thread or process; the reader never modifies the files. A segment removed by retention while
/// being read stays readable through the open file; moving into a removed one is an error.
/// Limits: memory is the buffer (see ReaderOptions). Offsets that are not record starts are not
/// detected by seek(); next() then reports a damaged record (or the end, at the tail).
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
    /// Reads the record at position(). Returns false, leaving the position unchanged, at the end
    /// of the data written so far or when position() >= end_offset_max (pass the writer's
    /// end_offset() to read exactly what it has published).
    Result<bool> next(Record& out, uint64_t end_offset_max = UINT64_MAX);
    /// The offset of the record the next call to next() returns.
    uint64_t position() const { return position_; }

  private:
    LogReader(std::string dir, ReaderOptions options);
    void close_segment();
    Result<bool> open_segment(uint64_t first_offset);  // false: no such file
    Result<size_t> fill(uint64_t bytes_needed);        // bytes added to the buffer
    Result<bool> rest_is_zero(uint64_t file_pos);
    Result<bool> next_segment_exists();
    void drop_partial();
    Error damaged(const char* what) const;

    const std::string dir_;
    const ReaderOptions options_;
    int fd_ = -1;
    uint64_t segment_first_ = 0;
    std::string segment_path_;
    std::vector<char> buffer_;
    size_t begin_ = 0;  // buffer_[begin_, end_) holds the file's bytes from position_ on
    size_t end_ = 0;
    uint64_t position_ = 0;
};

}  // namespace tidemark::log
