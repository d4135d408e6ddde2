#include "adapters/log/segment_files.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>

namespace tidemark::log {

std::string segment_path(const std::string& dir, uint64_t first_offset) {
    char name[32];
    std::snprintf(name, sizeof(name), "%020llu.log", static_cast<unsigned long long>(first_offset));
    return dir + "/" + name;
}

Result<std::vector<SegmentFile>> list_segments(const std::string& dir) {
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) {
        return fail("cannot list log directory " + dir + ": " + std::strerror(errno));
    }
    std::vector<SegmentFile> segments;
    while (dirent* entry = ::readdir(d)) {
        std::string_view name(entry->d_name);
        if (name.size() != 24 || !name.ends_with(".log")) continue;
        uint64_t first = 0;
        auto [end, ec] = std::from_chars(name.data(), name.data() + 20, first);
        if (ec != std::errc{} || end != name.data() + 20) continue;
        if (segments.size() == segment_count_max) {
            ::closedir(d);
            return fail("log directory " + dir + " holds more than " +
                        std::to_string(segment_count_max) +
                        " segments; check storage.log_retention or remove old segments");
        }
        SegmentFile seg{first, 0, dir + "/" + std::string(name)};
        struct stat st {};
        if (::stat(seg.path.c_str(), &st) != 0) {
            if (errno == ENOENT) continue;  // removed by retention while we listed
            int err = errno;
            ::closedir(d);
            return fail("cannot stat log segment " + seg.path + ": " + std::strerror(err));
        }
        seg.bytes = static_cast<uint64_t>(st.st_size);
        segments.push_back(std::move(seg));
    }
    ::closedir(d);
    std::ranges::sort(segments, {}, &SegmentFile::first_offset);
    return segments;
}

}  // namespace tidemark::log
