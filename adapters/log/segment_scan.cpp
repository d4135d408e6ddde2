#include "adapters/log/segment_scan.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace tidemark::log {

Result<size_t> pread_full(int fd, char* buf, size_t n, uint64_t pos, const std::string& path) {
    size_t done = 0;
    while (done < n) {
        ssize_t r = ::pread(fd, buf + done, n - done, static_cast<off_t>(pos + done));
        if (r < 0) {
            if (errno == EINTR) continue;
            return fail("cannot read log segment " + path + ": " + std::strerror(errno));
        }
        if (r == 0) break;
        done += static_cast<size_t>(r);
    }
    return done;
}

SegmentWindow::SegmentWindow(SegmentSource& source, uint64_t first_offset, uint64_t file_bytes,
                             size_t block_bytes)
    : source_(source),
      first_offset_(first_offset),
      file_bytes_(file_bytes),
      block_bytes_(block_bytes) {}

Result<std::string_view> SegmentWindow::view(uint64_t pos, uint64_t n) {
    if (pos >= file_bytes_) return std::string_view();
    n = std::min(n, file_bytes_ - pos);
    if (pos < buffer_pos_ || pos + n > buffer_pos_ + have_) {
        // Scans move forward: the block starts at pos, so a byte-by-byte search refills once a
        // block. A frame larger than a block gets a buffer of its size (n is bounded by the
        // frame size bound through decode_at and find_next_frame).
        auto want = static_cast<size_t>(
            std::min<uint64_t>(std::max<uint64_t>(block_bytes_, n), file_bytes_ - pos));
        if (want > buffer_.size()) buffer_.resize(want);
        have_ = 0;
        auto got = source_.read(buffer_.data(), want, pos);
        if (!got) return std::unexpected(got.error());
        buffer_pos_ = pos;
        have_ = *got;
        if (have_ < want) file_bytes_ = pos + have_;  // cut meanwhile (a writer's rollback)
        n = std::min<uint64_t>(n, have_);
    }
    return std::string_view(buffer_.data() + (pos - buffer_pos_), n);
}

Result<FrameStatus> SegmentWindow::decode_at(uint64_t pos, const FrameContext& context, Record& out,
                                             uint64_t& frame_bytes_out, FrameInfo& info) {
    auto bytes = view(pos, frame_header_bytes);
    if (!bytes) return std::unexpected(bytes.error());
    FrameStatus status =
        decode_frame(*bytes, context, first_offset_ + pos, out, frame_bytes_out, info);
    if (status == FrameStatus::incomplete && frame_bytes_out > bytes->size()) {
        bytes = view(pos, frame_bytes_out);
        if (!bytes) return std::unexpected(bytes.error());
        status = decode_frame(*bytes, context, first_offset_ + pos, out, frame_bytes_out, info);
    }
    return status;
}

Result<std::optional<uint64_t>> find_next_frame(SegmentWindow& window, uint64_t damaged_at,
                                                std::optional<uint64_t> after_damaged_frame,
                                                int64_t ingest_ms_min,
                                                const FrameContext& context) {
    // A frame whose time runs back is a payload's bytes, whatever its CRC says.
    auto is_frame = [&](uint64_t pos) -> Result<bool> {
        const uint64_t end = window.file_bytes();
        auto head_bytes = window.view(pos, frame_head_peek_bytes);
        if (!head_bytes) return std::unexpected(head_bytes.error());
        std::optional<FrameHead> head = peek_frame_head(*head_bytes, context);
        if (!head || head->frame_bytes > end - pos || head->ingest_ms < ingest_ms_min) {
            return false;
        }
        Record rec;
        uint64_t frame = 0;
        FrameInfo info;
        auto status = window.decode_at(pos, context, rec, frame, info);
        if (!status) return std::unexpected(status.error());
        return frame_decodes(*status);
    };
    std::optional<uint64_t> hint;
    if (after_damaged_frame && *after_damaged_frame > damaged_at &&
        *after_damaged_frame < window.file_bytes()) {
        auto found = is_frame(*after_damaged_frame);
        if (!found) return std::unexpected(found.error());
        if (*found) hint = after_damaged_frame;
    }
    // Whether valid frames follow each other from pos up to `to` or past it: then pos is a
    // record, not bytes of the damaged record's payload (whose frames, if any, end inside it).
    auto chains_to = [&](uint64_t pos, uint64_t to) -> Result<bool> {
        while (pos < to) {
            Record rec;
            uint64_t frame = 0;
            FrameInfo info;
            auto status = window.decode_at(pos, context, rec, frame, info);
            if (!status) return std::unexpected(status.error());
            if (!frame_decodes(*status)) return false;
            pos += frame;
        }
        return true;
    };
    const uint64_t frame_bytes_min =
        context.compact ? compact_frame_bytes_min : frame_header_bytes + body_prefix_bytes;
    for (uint64_t pos = damaged_at + 1; pos + frame_bytes_min <= window.file_bytes(); ++pos) {
        if (hint && pos == *hint) return hint;
        auto found = is_frame(pos);
        if (!found) return std::unexpected(found.error());
        if (!*found) continue;
        if (!hint) return pos;
        // Two cues disagree: a frame here, and the damaged frame's length pointing further on.
        // If this frame chains to there, the length field was the damaged part (it skipped
        // valid records); if not, this frame is inside the damaged record's payload.
        auto chained = chains_to(pos, *hint);
        if (!chained) return std::unexpected(chained.error());
        return *chained ? pos : *hint;
    }
    if (hint) return hint;
    return std::nullopt;
}

Result<ScanResult> scan_segment(SegmentWindow& window, uint64_t upto, FrameContext& context) {
    ScanResult scan;
    context.clear();
    uint64_t pos = 0;
    while (pos < upto && pos < window.file_bytes()) {
        Record rec;
        uint64_t frame = 0;
        FrameInfo info;
        auto status = window.decode_at(pos, context, rec, frame, info);
        if (!status) return std::unexpected(status.error());
        if (frame_decodes(*status)) {
            if (*status == FrameStatus::ok) apply_frame(context, rec, info);
            if (!info.anchor) {
                if (scan.records == 0) scan.first_ingest_ms = rec.ingest_ms;
                ++scan.records;
            }
            scan.last_ingest_ms = rec.ingest_ms;
            pos += frame;
            continue;
        }
        if (*status == FrameStatus::bad_type) {
            return fail("log segment " + window.path() + ": the record at offset " +
                        std::to_string(window.first_offset() + pos) +
                        " has an unknown type; it was written by a newer tidemark. Upgrade, or "
                        "move the log directory away to start a new log.");
        }
        std::optional<uint64_t> hint;
        if (*status == FrameStatus::bad_crc) hint = pos + frame;
        auto next = find_next_frame(window, pos, hint, scan.last_ingest_ms, context);
        if (!next) return std::unexpected(next.error());
        if (!*next) break;  // a torn tail: nothing valid follows
        ++scan.damaged_regions;
        scan.damaged_bytes += **next - pos;
        pos = **next;
    }
    scan.good_bytes = pos;
    return scan;
}

}  // namespace tidemark::log
