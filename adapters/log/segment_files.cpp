#include "adapters/log/segment_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <map>

#include "adapters/log/zlog_block.h"

namespace tidemark::log {
namespace {

std::string named(const std::string& dir, uint64_t first_offset, const char* suffix) {
    char name[40];
    std::snprintf(name, sizeof(name), "%020llu%s", static_cast<unsigned long long>(first_offset),
                  suffix);
    return dir + "/" + name;
}

// The frame bytes of a compressed segment with no stage: its blocks' end.
Result<uint64_t> blocks_end(const std::string& path, uint64_t first_offset) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT) return 0;
        return fail("cannot open log segment " + path + ": " + std::strerror(errno));
    }
    struct stat st {};
    BlockScan scan(first_offset);
    Result<void> scanned =
        ::fstat(fd, &st) == 0
            ? scan_blocks(fd, path, static_cast<uint64_t>(st.st_size), false, scan)
            : fail("cannot stat log segment " + path + ": " + std::strerror(errno));
    ::close(fd);
    if (!scanned) return std::unexpected(scanned.error());
    return scan.blocks.empty() ? 0 : scan.blocks.back().end_offset() - first_offset;
}

}  // namespace

std::string segment_path(const std::string& dir, uint64_t first_offset) {
    return named(dir, first_offset, ".log");
}

std::string zlog_path(const std::string& dir, uint64_t first_offset) {
    return named(dir, first_offset, ".zlog");
}

std::string stage_path(const std::string& dir, uint64_t first_offset) {
    return named(dir, first_offset, ".zlog.stage");
}

uint64_t file_disk_bytes(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return 0;
    return static_cast<uint64_t>(st.st_blocks) * 512;
}

bool segment_exists(const std::string& dir, uint64_t first_offset) {
    return ::access(segment_path(dir, first_offset).c_str(), F_OK) == 0 ||
           ::access(zlog_path(dir, first_offset).c_str(), F_OK) == 0 ||
           ::access(stage_path(dir, first_offset).c_str(), F_OK) == 0;
}

Result<std::vector<SegmentFile>> list_segments(const std::string& dir) {
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) {
        return fail("cannot list log directory " + dir + ": " + std::strerror(errno));
    }
    // Per first offset: which of .log (1), .zlog (2), .zlog.stage (4) exist, and their stats.
    struct Found {
        int kinds = 0;
        uint64_t log_bytes = 0, zlog_disk = 0, stage_bytes = 0, stage_disk = 0;
    };
    std::map<uint64_t, Found> found;
    while (dirent* entry = ::readdir(d)) {
        std::string_view name(entry->d_name);
        if (name.size() < 24) continue;
        const std::string_view suffix = name.substr(20);
        const int kind = suffix == ".log"          ? 1
                         : suffix == ".zlog"       ? 2
                         : suffix == ".zlog.stage" ? 4
                                                   : 0;
        if (kind == 0) continue;
        uint64_t first = 0;
        auto [end, ec] = std::from_chars(name.data(), name.data() + 20, first);
        if (ec != std::errc{} || end != name.data() + 20) continue;
        if (found.size() == segment_count_max && !found.contains(first)) {
            ::closedir(d);
            return fail("log directory " + dir + " holds more than " +
                        std::to_string(segment_count_max) +
                        " segments; check storage.log_retention or remove old segments");
        }
        const std::string path = dir + "/" + std::string(name);
        struct stat st {};
        if (::stat(path.c_str(), &st) != 0) {
            if (errno == ENOENT) continue;  // removed by retention (or sealed) while we listed
            int err = errno;
            ::closedir(d);
            return fail("cannot stat log segment " + path + ": " + std::strerror(err));
        }
        Found& f = found[first];
        f.kinds |= kind;
        const auto size = static_cast<uint64_t>(st.st_size);
        const auto disk = static_cast<uint64_t>(st.st_blocks) * 512;
        if (kind == 1) f.log_bytes = size;
        if (kind == 2) f.zlog_disk = disk;
        if (kind == 4) f.stage_bytes = size, f.stage_disk = disk;
    }
    ::closedir(d);
    std::vector<SegmentFile> segments;
    segments.reserve(found.size());
    for (auto it = found.begin(); it != found.end(); ++it) {
        const auto& [first, f] = *it;
        if ((f.kinds & 1) && (f.kinds & 6)) {
            return fail("log directory " + dir + " holds both " + segment_path(dir, first) +
                        " and " + zlog_path(dir, first) +
                        ": one segment in two formats. Move the one that was copied in away.");
        }
        SegmentFile seg;
        seg.first_offset = first;
        if (f.kinds & 1) {
            seg.bytes = f.log_bytes;
            seg.path = segment_path(dir, first);
            seg.disk_bytes = f.log_bytes;
        } else {
            seg.compressed = true;
            seg.path = zlog_path(dir, first);
            seg.disk_bytes = f.zlog_disk + f.stage_disk;
            if (std::next(it) != found.end()) {
                seg.bytes = std::next(it)->first - first;
            } else if (f.kinds & 4) {
                seg.bytes = f.stage_bytes;
            } else {
                auto end = blocks_end(seg.path, first);
                if (!end) return std::unexpected(end.error());
                seg.bytes = *end;
            }
        }
        segments.push_back(std::move(seg));
    }
    return segments;
}

}  // namespace tidemark::log
