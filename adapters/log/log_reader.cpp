#include "adapters/log/log_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "adapters/log/segment_files.h"
#include "adapters/log/segment_scan.h"

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
    source_.reset();
}

Result<bool> LogReader::open_segment(uint64_t first_offset) {
    auto source = SegmentSource::open(dir_, first_offset);
    if (!source) return std::unexpected(source.error());
    if (!*source) return false;
    close_segment();
    source_ = std::move(*source);
    segment_first_ = first_offset;
    segment_path_ = source_->path();
    context_.clear();
    return true;
}

Result<void> LogReader::seek(uint64_t offset) {
    auto segments = list_segments(dir_);
    if (!segments) return std::unexpected(segments.error());
    begin_ = end_ = 0;
    last_ingest_ms_ = ingest_ms_unknown;
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
    if (offset > seg.first_offset) {
        // Compact frames need what the segment's frames before the offset say: whether it is
        // compact, its base time and its topic dictionary. Read them (a walk over frame heads
        // and CRCs, as the writer's open() does).
        SegmentWindow window(*source_, seg.first_offset, offset - seg.first_offset,
                             size_t{1} << 20);
        auto scan = scan_segment(window, offset - seg.first_offset, context_);
        if (!scan) return std::unexpected(scan.error());
    }
    return {};
}

Result<size_t> LogReader::fill(uint64_t bytes_needed) {
    // Called when the buffer holds no more than the start of the frame at position_. Those
    // bytes are dropped and read again with the rest, never extended: a writer that rolled back
    // a failed write may have written other bytes at that place since they were read.
    begin_ = end_ = 0;
    if (bytes_needed > buffer_.size()) buffer_.resize(bytes_needed);  // bounded by the caller
    uint64_t file_pos = position_ - segment_first_;
    auto n = source_->read(buffer_.data(), buffer_.size(), file_pos);
    if (!n) return std::unexpected(n.error());
    end_ = *n;
    return end_;
}

Result<bool> LogReader::next_segment_exists() {
    auto size = source_->size();
    if (!size) return std::unexpected(size.error());
    // An empty segment has no successor of its own name (that name is its own).
    if (*size > 0 && segment_exists(dir_, segment_first_ + *size)) return true;
    // Also a later segment whose name does not chain (a gap) means this one is not the newest.
    auto segments = list_segments(dir_);
    if (!segments) return std::unexpected(segments.error());
    return !segments->empty() && segments->back().first_offset > segment_first_;
}

void LogReader::count_damage(uint64_t from_pos, uint64_t to_pos, const char* what) {
    std::lock_guard lock(stats_mutex_);
    ++stats_.damaged_regions;
    stats_.damaged_bytes += to_pos - from_pos;
    stats_.last_damage = "log segment " + segment_path_ + " is damaged at offsets [" +
                         std::to_string(segment_first_ + from_pos) + ", " +
                         std::to_string(segment_first_ + to_pos) + ") (" + what +
                         "): " + std::to_string(to_pos - from_pos) +
                         " bytes skipped, records there are lost";
}

ReaderStats LogReader::stats() const {
    std::lock_guard lock(stats_mutex_);
    return stats_;
}

Error LogReader::ends_below(uint64_t end_offset_max) const {
    return Error{"log segment " + segment_path_ + " ends before the writer's end offset " +
                 std::to_string(end_offset_max) + " (the reader is at offset " +
                 std::to_string(position_) +
                 "): the file was cut by something other than the writer, or the reader was "
                 "given an end past the writer's"};
}

Result<bool> LogReader::skip_damage(uint64_t end_offset_max) {
    begin_ = end_ = 0;
    // Sealed first, then the size: a sealed segment's size is final.
    auto sealed = next_segment_exists();
    if (!sealed) return std::unexpected(sealed.error());
    auto size = source_->size();
    if (!size) return std::unexpected(size.error());
    const uint64_t file_bytes = *size;
    const uint64_t from = position_ - segment_first_;
    const bool bounded = end_offset_max != UINT64_MAX;
    const bool bound_in_file = bounded && end_offset_max - segment_first_ <= file_bytes;
    const uint64_t limit = bound_in_file ? end_offset_max - segment_first_ : file_bytes;
    SegmentWindow window(*source_, segment_first_, limit, size_t{256} << 10);
    // Judge the frame again on what the file holds now: a frame that was incomplete may have
    // been finished by the writer meanwhile, and the search below must not skip it.
    Record rec;
    uint64_t frame = 0;
    FrameInfo info;
    auto status = window.decode_at(from, context_, rec, frame, info);
    if (!status) return std::unexpected(status.error());
    if (frame_decodes(*status) || *status == FrameStatus::bad_type) return true;
    const char* what = *status == FrameStatus::bad_length ? "invalid record length"
                       : *status == FrameStatus::bad_crc  ? "CRC mismatch"
                                                          : "record cut short";
    // After a CRC mismatch the damage may be in the body or in the length field: where the
    // length says the next frame starts is one cue, weighed by find_next_frame.
    std::optional<uint64_t> after_frame;
    if (*status == FrameStatus::bad_crc) after_frame = from + frame;
    auto found = find_next_frame(window, from, after_frame, last_ingest_ms_, context_);
    if (!found) return std::unexpected(found.error());
    if (*found) {
        count_damage(from, **found, what);
        position_ = segment_first_ + **found;
        return true;
    }
    if (*sealed || bound_in_file) {
        // Nothing valid follows up to the end of a final file, or up to where the writer says
        // its records end: all of it is damage.
        count_damage(from, limit, what);
        position_ = segment_first_ + limit;
        return limit == file_bytes && *sealed;
    }
    // The newest segment, and no bound inside it: a torn tail, a write in progress, or damage
    // that the writer's next record will end. Not counted until then.
    if (bounded) return std::unexpected(ends_below(end_offset_max));
    return false;
}

Result<bool> LogReader::next(Record& out, uint64_t end_offset_max) {
    return read_next(out, end_offset_max, true);
}

Result<size_t> LogReader::next_batch(std::span<Record> out, uint64_t end_offset_max) {
    size_t n = 0;
    while (n < out.size()) {
        auto got = read_next(out[n], end_offset_max, n == 0);
        // An error after the first: those read are returned, and the next call meets it again
        // (the position stays at the frame that caused it).
        if (!got && n > 0) break;
        if (!got) return std::unexpected(got.error());
        if (!*got) break;
        ++n;
    }
    return n;
}

Result<bool> LogReader::read_next(Record& out, uint64_t end_offset_max, bool may_read) {
    if (position_ >= end_offset_max) return false;
    if (!source_) {
        if (!may_read) return false;
        // The log had no segment yet: tail until the writer creates the one at position_.
        auto opened = open_segment(position_);
        if (!opened) return std::unexpected(opened.error());
        if (!*opened) return false;
    }
    bool read_to_end = false;  // the last fill() found no more bytes than were buffered
    bool rechecked = false;    // re-read once after seeing a successor segment (see below)
    while (true) {
        if (position_ >= end_offset_max) return false;  // moved there by skipped damage
        uint64_t frame = 0;
        FrameInfo info;
        FrameStatus status = decode_frame(std::string_view(buffer_.data() + begin_, end_ - begin_),
                                          context_, position_, out, frame, info);
        if (frame_decodes(status)) {
            // A definition ends a batch unless it gives the id the topic it has (the writer
            // defines every topic again after each anchor): only then does the dictionary stay.
            if (!may_read && info.defines_topic && context_.topics.find(info.topic_id) != out.topic)
                return false;
            out.offset = position_;
            out.next_offset = position_ + frame;
            begin_ += frame;
            position_ += frame;
            last_ingest_ms_ = out.ingest_ms;
            if (status == FrameStatus::unknown_topic) {
                // Its topic's definition was in bytes lost to damage: the record is lost too.
                count_damage(out.offset - segment_first_, out.next_offset - segment_first_,
                             "a message whose topic definition was lost");
                continue;
            }
            apply_frame(context_, out, info);
            if (info.anchor) continue;  // not a record
            return true;
        }
        if (status == FrameStatus::bad_type) {
            return fail("log segment " + segment_path_ + ": the record at offset " +
                        std::to_string(position_) +
                        " has an unknown type; it was written by a newer tidemark");
        }
        if (!may_read) return false;  // damage, or the frame is not all buffered
        if (status == FrameStatus::bad_length || status == FrameStatus::bad_crc) {
            auto skipped = skip_damage(end_offset_max);
            if (!skipped) return std::unexpected(skipped.error());
            if (!*skipped) return false;
            read_to_end = rechecked = false;
            continue;
        }
        // Incomplete: read more, growing the buffer to the frame's size if it is larger.
        uint64_t need = std::max<uint64_t>(frame, frame_header_bytes);
        if (!read_to_end) {
            size_t buffered = end_ - begin_;
            auto got = fill(need);
            if (!got) return std::unexpected(got.error());
            read_to_end = *got <= buffered;
            continue;
        }
        auto step = at_file_end(need, end_offset_max, rechecked);
        if (!step) return std::unexpected(step.error());
        if (*step == AtEnd::stop) return false;
        rechecked = *step == AtEnd::read_again;
        read_to_end = false;
    }
}

// The end of this file. The writer syncs and finishes a segment before it creates the next, so
// once a successor exists this file is final; it is read once more, since it may have grown
// between our read and that check.
Result<LogReader::AtEnd> LogReader::at_file_end(uint64_t need, uint64_t end_offset_max,
                                                bool rechecked) {
    const bool bounded = end_offset_max != UINT64_MAX;
    auto past_damage = [&]() -> Result<AtEnd> {
        auto skipped = skip_damage(end_offset_max);
        if (!skipped) return std::unexpected(skipped.error());
        return *skipped ? AtEnd::go_on : AtEnd::stop;
    };
    auto successor = next_segment_exists();
    if (!successor) return std::unexpected(successor.error());
    if (!*successor) {
        if (bounded && position_ + need <= end_offset_max) {
            return std::unexpected(ends_below(end_offset_max));
        }
        if (end_ == begin_) {
            // A retention sweep may have removed this file and its successors: then no
            // successor shows up, ever. Say so instead of tailing forever.
            if (!segment_exists(dir_, segment_first_)) {
                return fail("log segment " + segment_path_ +
                            " was removed by retention while the reader was at offset " +
                            std::to_string(position_) + "; the reader fell behind");
            }
            return AtEnd::stop;
        }
        // A partial frame at the end of the newest segment: a write in progress or a torn
        // tail, unless a valid frame follows it (then its length field is damaged).
        return past_damage();
    }
    if (!rechecked) return AtEnd::read_again;
    if (end_ != begin_) return past_damage();
    uint64_t next_first = position_;
    // An empty file before a later segment would name itself as its successor: reopening it
    // would loop forever. The records between it and the later segment are missing: a gap.
    Result<bool> opened =
        next_first == segment_first_ ? Result<bool>(false) : open_segment(next_first);
    if (!opened) return std::unexpected(opened.error());
    if (!*opened) {
        return fail("the log in " + dir_ + " has no segment at offset " +
                    std::to_string(next_first) +
                    " although later segments exist (a gap: "
                    "segments were removed by retention or by hand)");
    }
    begin_ = end_ = 0;
    return AtEnd::go_on;
}

}  // namespace tidemark::log
