#include "adapters/log/segment_source.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "adapters/log/segment_files.h"
#include "adapters/log/segment_scan.h"

namespace tidemark::log {

Result<std::optional<SegmentSource>> SegmentSource::open(const std::string& dir,
                                                         uint64_t first_offset) {
    const std::string plain_path = segment_path(dir, first_offset);
    int fd = ::open(plain_path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        SegmentSource source = plain(fd, plain_path);
        source.owns_fd_ = true;
        return std::optional<SegmentSource>(std::move(source));
    }
    if (errno != ENOENT) {
        return fail("cannot open log segment " + plain_path + ": " + std::strerror(errno));
    }
    // The .zlog before the stage: a seal writes blocks before it removes the stage, so a segment
    // whose stage is gone by the time it is opened has its blocks.
    auto source = compressed(dir, first_offset, -1);
    if (!source) return std::unexpected(source.error());
    const std::string staged = stage_path(dir, first_offset);
    int stage = ::open(staged.c_str(), O_RDONLY | O_CLOEXEC);
    if (stage < 0 && errno != ENOENT) {
        return fail("cannot open log stage " + staged + ": " + std::strerror(errno));
    }
    if (stage < 0 && source->fd_ < 0) return std::optional<SegmentSource>();
    source->stage_fd_ = stage;
    source->owns_stage_ = stage >= 0;
    return std::optional<SegmentSource>(std::move(*source));
}

SegmentSource SegmentSource::plain(int fd, std::string path) {
    SegmentSource source;
    source.fd_ = fd;
    source.path_ = std::move(path);
    return source;
}

Result<SegmentSource> SegmentSource::compressed(const std::string& dir, uint64_t first_offset,
                                                int stage_fd) {
    SegmentSource source;
    source.dir_ = dir;
    source.first_offset_ = first_offset;
    source.scan_ = BlockScan(first_offset);
    source.compressed_ = true;
    source.path_ = zlog_path(dir, first_offset);
    source.stage_fd_ = stage_fd;
    auto refreshed = source.refresh(0);  // opens the .zlog; its headers are walked as needed
    if (!refreshed) return std::unexpected(refreshed.error());
    return source;
}

SegmentSource::SegmentSource(SegmentSource&& other) noexcept {
    *this = std::move(other);
}

SegmentSource& SegmentSource::operator=(SegmentSource&& other) noexcept {
    if (this == &other) return *this;
    close_owned();
    dir_ = std::move(other.dir_);
    path_ = std::move(other.path_);
    first_offset_ = other.first_offset_;
    compressed_ = other.compressed_;
    fd_ = std::exchange(other.fd_, -1);
    owns_fd_ = std::exchange(other.owns_fd_, false);
    stage_fd_ = std::exchange(other.stage_fd_, -1);
    owns_stage_ = std::exchange(other.owns_stage_, false);
    scan_ = std::move(other.scan_);
    scanned_bytes_ = other.scanned_bytes_;
    scan_stopped_ = other.scan_stopped_;
    cached_ = other.cached_;
    cached_ok_ = other.cached_ok_;
    raw_ = std::move(other.raw_);
    damaged_blocks_ = other.damaged_blocks_;
    return *this;
}

SegmentSource::~SegmentSource() {
    close_owned();
}

void SegmentSource::close_owned() {
    if (owns_fd_ && fd_ >= 0) ::close(fd_);
    if (owns_stage_ && stage_fd_ >= 0) ::close(stage_fd_);
    fd_ = stage_fd_ = -1;
    owns_fd_ = owns_stage_ = false;
}

Result<void> SegmentSource::refresh(uint64_t need) {
    if (!compressed_) return {};
    if (fd_ < 0) {
        fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd_ < 0) {
            if (errno == ENOENT) return {};  // no block sealed yet
            return fail("cannot open log segment " + path_ + ": " + std::strerror(errno));
        }
        owns_fd_ = true;
    }
    struct stat st {};
    if (::fstat(fd_, &st) != 0) {
        return fail("cannot stat log segment " + path_ + ": " + std::strerror(errno));
    }
    const auto bytes = static_cast<uint64_t>(st.st_size);
    if (bytes < scanned_bytes_) {  // cut (a writer's recovery): start over
        scan_ = BlockScan(first_offset_);
        cached_.reset();
        scanned_bytes_ = 0;
        scan_stopped_ = false;
    }
    if (need != UINT64_MAX && sealed_bytes() > need) return {};
    if (bytes == scanned_bytes_ && !scan_stopped_) return {};
    const uint64_t stop = need == UINT64_MAX ? UINT64_MAX : first_offset_ + need;
    auto scanned = scan_blocks(fd_, path_, bytes, false, scan_, stop);
    if (!scanned) return std::unexpected(scanned.error());
    scanned_bytes_ = bytes;
    scan_stopped_ = scan_.stopped;
    return {};
}

uint64_t SegmentSource::sealed_bytes() const {
    return scan_.blocks.empty() ? 0 : scan_.blocks.back().end_offset() - first_offset_;
}

Result<uint64_t> SegmentSource::size() {
    struct stat st {};
    if (!compressed_) {
        if (::fstat(fd_, &st) != 0) {
            return fail("cannot stat log segment " + path_ + ": " + std::strerror(errno));
        }
        return static_cast<uint64_t>(st.st_size);
    }
    auto refreshed = refresh();
    if (!refreshed) return std::unexpected(refreshed.error());
    uint64_t bytes = sealed_bytes();
    if (stage_fd_ >= 0) {
        if (::fstat(stage_fd_, &st) != 0) {
            return fail("cannot stat log stage of " + path_ + ": " + std::strerror(errno));
        }
        bytes = std::max(bytes, static_cast<uint64_t>(st.st_size));
    }
    return bytes;
}

Result<size_t> SegmentSource::read_stage(char* buf, size_t n, uint64_t pos) {
    if (stage_fd_ < 0) return 0;
    return pread_full(stage_fd_, buf, n, pos, path_ + ".stage");
}

// From pos, below sealed_bytes(): the blocks' bytes (a gap between blocks, or a damaged block
// without a stage behind it, as zeros).
Result<size_t> SegmentSource::read_blocks(char* buf, size_t n, uint64_t pos) {
    const uint64_t offset = first_offset_ + pos;
    const auto& blocks = scan_.blocks;
    auto it = std::ranges::upper_bound(blocks, offset, {},
                                       [](const BlockEntry& b) { return b.header.first_offset; });
    if (it == blocks.begin() || std::prev(it)->end_offset() <= offset) {
        // Between blocks (or before the first): bytes lost with a damaged header.
        const uint64_t gap_end = it == blocks.end() ? offset + n : it->header.first_offset;
        const auto k = static_cast<size_t>(std::min<uint64_t>(n, gap_end - offset));
        std::memset(buf, 0, k);
        return k;
    }
    const auto index = static_cast<size_t>(std::prev(it) - blocks.begin());
    const BlockEntry& block = blocks[index];
    const auto k = static_cast<size_t>(std::min<uint64_t>(n, block.end_offset() - offset));
    const uint64_t within = offset - block.header.first_offset;
    if (cached_ != index) {
        stored_.resize(block.header.stored_bytes);
        auto got = pread_full(fd_, stored_.data(), stored_.size(),
                              block.file_pos + block_header_bytes, path_);
        if (!got) return std::unexpected(got.error());
        stored_.resize(*got);
        cached_ = index;
        cached_ok_ = decode_block(block.header, stored_, raw_);
        if (!cached_ok_) ++damaged_blocks_;
    }
    if (cached_ok_) {
        std::memcpy(buf, raw_.data() + within, k);
        return k;
    }
    // Damaged, or being written: the stage may still hold the bytes (zeros once punched).
    auto got = read_stage(buf, k, pos);
    if (!got) return std::unexpected(got.error());
    std::memset(buf + *got, 0, k - *got);
    return k;
}

Result<size_t> SegmentSource::read(char* buf, size_t n, uint64_t pos) {
    if (!compressed_) return pread_full(fd_, buf, n, pos, path_);
    size_t done = 0;
    while (done < n) {
        if (pos + done >= sealed_bytes()) {
            auto refreshed = refresh(pos + done);
            if (!refreshed) return std::unexpected(refreshed.error());
        }
        if (pos + done < sealed_bytes()) {
            auto got = read_blocks(buf + done, n - done, pos + done);
            if (!got) return std::unexpected(got.error());
            done += *got;
            continue;
        }
        const size_t want = n - done;
        auto got = read_stage(buf + done, want, pos + done);
        if (!got) return std::unexpected(got.error());
        // The writer may have sealed and punched part of what was just read: the blocks win
        // wherever they reach now.
        auto refreshed = refresh(pos + done);
        if (!refreshed) return std::unexpected(refreshed.error());
        if (sealed_bytes() > pos + done) continue;
        done += *got;
        if (*got < want) break;  // the stage ends here
    }
    return done;
}

}  // namespace tidemark::log
