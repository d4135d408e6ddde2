#include "adapters/log/log_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

#include "adapters/log/segment_files.h"

namespace tidemark::log {

LogReader::LogReader(std::string dir, ReaderOptions options)
    : dir_(std::move(dir)), options_(options) {}

LogReader::~LogReader() {
    close_segment();
}

Result<std::unique_ptr<LogReader>> LogReader::open(const std::string& dir, ReaderOptions options) {
    if (options.buffer_bytes < frame_bytes(0, 0)) options.buffer_bytes = frame_bytes(0, 0);
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
        return fail("log directory " + dir + " does not exist (has the service run yet?)");
    }
    std::unique_ptr<LogReader> reader(new LogReader(dir, options));
    reader->buffer_.resize(options.buffer_bytes);
    auto segments = list_segments(dir);
    if (!segments) return std::unexpected(segments.error());
    if (!segments->empty()) {
        auto sought = reader->seek(segments->front().first_offset);
        if (!sought) return std::unexpected(sought.error());
    }
    return reader;
}

void LogReader::close_segment() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
}

Result<bool> LogReader::open_segment(uint64_t first_offset) {
    std::string path = segment_path(dir_, first_offset);
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT) return false;
        return fail("cannot open log segment " + path + ": " + std::strerror(errno));
    }
    close_segment();
    fd_ = fd;
    segment_first_ = first_offset;
    segment_path_ = std::move(path);
    return true;
}

Result<void> LogReader::seek(uint64_t offset) {
    auto segments = list_segments(dir_);
    if (!segments) return std::unexpected(segments.error());
    begin_ = end_ = 0;
    if (segments->empty()) {
        close_segment();
        if (offset != 0) {
            return fail("cannot seek the log in " + dir_ + " to offset " + std::to_string(offset) +
                        ": the log is empty");
        }
        position_ = 0;
        return {};
    }
    const SegmentFile& oldest = segments->front();
    if (offset < oldest.first_offset) {
        return fail("cannot seek the log to offset " + std::to_string(offset) +
                    ": it is before the oldest retained segment " + oldest.path +
                    " (first offset " + std::to_string(oldest.first_offset) +
                    "); older records were removed by retention");
    }
    auto it = std::ranges::upper_bound(*segments, offset, {}, &SegmentFile::first_offset);
    const SegmentFile& seg = *std::prev(it);
    if (offset > seg.first_offset + seg.bytes) {
        return fail("cannot seek the log to offset " + std::to_string(offset) +
                    ": it is past the end of the newest segment " + seg.path + " (end offset " +
                    std::to_string(seg.first_offset + seg.bytes) + ")");
    }
    auto opened = open_segment(seg.first_offset);
    if (!opened) return std::unexpected(opened.error());
    if (!*opened) {
        return fail("cannot seek the log to offset " + std::to_string(offset) + ": segment " +
                    seg.path + " was removed while seeking");
    }
    position_ = offset;
    return {};
}

Result<size_t> LogReader::fill(uint64_t bytes_needed) {
    if (begin_ > 0) {
        std::memmove(buffer_.data(), buffer_.data() + begin_, end_ - begin_);
        end_ -= begin_;
        begin_ = 0;
    }
    if (bytes_needed > buffer_.size()) buffer_.resize(bytes_needed);  // bounded by the caller
    uint64_t file_pos = position_ - segment_first_ + end_;
    while (true) {
        ssize_t n = ::pread(fd_, buffer_.data() + end_, buffer_.size() - end_,
                            static_cast<off_t>(file_pos));
        if (n < 0) {
            if (errno == EINTR) continue;
            return fail("cannot read log segment " + segment_path_ + ": " + std::strerror(errno));
        }
        end_ += static_cast<size_t>(n);
        return static_cast<size_t>(n);
    }
}

Result<bool> LogReader::rest_is_zero(uint64_t file_pos) {
    std::array<char, 65536> block;
    while (true) {
        ssize_t n = ::pread(fd_, block.data(), block.size(), static_cast<off_t>(file_pos));
        if (n < 0) {
            if (errno == EINTR) continue;
            return fail("cannot read log segment " + segment_path_ + ": " + std::strerror(errno));
        }
        if (n == 0) return true;
        if (std::any_of(block.begin(), block.begin() + n, [](char c) { return c != 0; })) {
            return false;
        }
        file_pos += static_cast<uint64_t>(n);
    }
}

Result<bool> LogReader::next_segment_exists() {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) {
        return fail("cannot stat log segment " + segment_path_ + ": " + std::strerror(errno));
    }
    std::string next = segment_path(dir_, segment_first_ + static_cast<uint64_t>(st.st_size));
    // An empty segment has no successor of its own name (that name is its own).
    if (st.st_size > 0 && ::access(next.c_str(), F_OK) == 0) return true;
    // Also a later segment whose name does not chain (a gap) means this one is not the newest.
    auto segments = list_segments(dir_);
    if (!segments) return std::unexpected(segments.error());
    return !segments->empty() && segments->back().first_offset > segment_first_;
}

void LogReader::drop_partial() {
    // The bytes of an unfinished frame are read again next time: a writer that hit ENOSPC cuts
    // its partial frame and writes another in its place, which stale bytes would garble.
    begin_ = end_ = 0;
}

Error LogReader::damaged(const char* what) const {
    return Error{"log segment " + segment_path_ + " is damaged at offset " +
                 std::to_string(position_) + " (" + what +
                 ") with data after it; records from there on cannot be read"};
}

Result<bool> LogReader::next(Record& out, uint64_t end_offset_max) {
    if (position_ >= end_offset_max) return false;
    if (fd_ < 0) {
        // The log had no segment yet: tail until the writer creates the one at position_.
        auto opened = open_segment(position_);
        if (!opened) return std::unexpected(opened.error());
        if (!*opened) return false;
    }
    const bool bounded = end_offset_max != UINT64_MAX;
    bool rechecked = false;  // re-read once after seeing a successor segment (see below)
    while (true) {
        uint64_t frame = 0;
        FrameStatus status =
            decode_frame(std::string_view(buffer_.data() + begin_, end_ - begin_), out, frame);
        if (status == FrameStatus::ok) {
            out.offset = position_;
            out.next_offset = position_ + frame;
            begin_ += frame;
            position_ += frame;
            return true;
        }
        if (status == FrameStatus::bad_type) {
            return fail("log segment " + segment_path_ + ": the record at offset " +
                        std::to_string(position_) +
                        " has an unknown type; it was written by a newer tidemark");
        }
        const uint64_t file_pos = position_ - segment_first_;
        if (status == FrameStatus::bad_length || status == FrameStatus::bad_crc) {
            // Past the frame's header (bad length) or the frame (bad CRC) the file must hold
            // nothing but zeros, in the newest segment, for this to be a torn tail.
            uint64_t after =
                file_pos + (status == FrameStatus::bad_length ? frame_header_bytes : frame);
            const char* what =
                status == FrameStatus::bad_length ? "invalid record length" : "CRC mismatch";
            if (bounded) return std::unexpected(damaged(what));
            auto zero = rest_is_zero(after);
            if (!zero) return std::unexpected(zero.error());
            if (!*zero) return std::unexpected(damaged(what));
            auto successor = next_segment_exists();
            if (!successor) return std::unexpected(successor.error());
            if (*successor) return std::unexpected(damaged(what));
            drop_partial();
            return false;
        }
        // Incomplete: read more, growing the buffer to the frame's size if it is larger.
        uint64_t need = std::max<uint64_t>(frame, frame_header_bytes);
        auto got = fill(need);
        if (!got) return std::unexpected(got.error());
        if (*got > 0) continue;
        // The end of this file. The writer syncs and finishes a segment before it creates the
        // next, so once a successor exists this file is final; re-read once, since it may have
        // grown between our read and that check.
        auto successor = next_segment_exists();
        if (!successor) return std::unexpected(successor.error());
        if (!*successor) {
            if (bounded && position_ + need <= end_offset_max) {
                return std::unexpected(damaged("incomplete record below the writer's end"));
            }
            if (end_ == begin_) {
                // A retention sweep may have removed this file and its successors: then no
                // successor shows up, ever. Say so instead of tailing forever.
                if (::access(segment_path_.c_str(), F_OK) != 0 && errno == ENOENT) {
                    return fail("log segment " + segment_path_ +
                                " was removed by retention while the reader was at offset " +
                                std::to_string(position_) + "; the reader fell behind");
                }
            }
            drop_partial();
            return false;
        }
        if (!rechecked) {
            rechecked = true;
            continue;
        }
        if (end_ != begin_) return std::unexpected(damaged("incomplete record at segment end"));
        uint64_t next_first = position_;
        auto opened = open_segment(next_first);
        if (!opened) return std::unexpected(opened.error());
        if (!*opened) {
            return fail("the log in " + dir_ + " has no segment at offset " +
                        std::to_string(next_first) +
                        " although later segments exist (a gap: "
                        "segments were removed by retention or by hand)");
        }
        begin_ = end_ = 0;
        rechecked = false;
    }
}

}  // namespace tidemark::log
