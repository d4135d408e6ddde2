#include "adapters/mqtt/ingest_subscriptions.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

namespace tidemark::mqtt::detail {

namespace {

Result<void> fail_errno(const std::string& what, const std::string& path) {
    return fail(what + " " + path + ": " + std::strerror(errno));
}

Result<void> sync_path(const std::string& path, int flags) {
    const int fd = ::open(path.c_str(), flags | O_CLOEXEC);
    if (fd < 0) return fail_errno("opening", path);
    const int rc = ::fsync(fd);
    ::close(fd);
    if (rc != 0) return fail_errno("syncing", path);
    return {};
}

}  // namespace

Result<std::vector<std::string>> read_subscriptions(const std::string& path) {
    std::vector<std::string> filters;
    std::ifstream in(path);
    if (!in) {
        if (errno == ENOENT) return filters;
        return std::unexpected(fail_errno("reading", path).error());
    }
    std::string line;
    // Bounded like the filters themselves: a damaged or foreign file is not read without end.
    while (std::getline(in, line) && filters.size() < 4096)
        if (!line.empty()) filters.push_back(line);
    return filters;
}

Result<void> write_subscriptions(const std::string& path, const std::vector<std::string>& filters) {
    const std::string tmp = path + ".tmp";
    {
        std::ofstream out(tmp, std::ios::trunc);
        for (const std::string& f : filters)
            out << f << '\n';
        out.flush();
        if (!out) return fail_errno("writing", tmp);
    }
    if (auto ok = sync_path(tmp, O_WRONLY); !ok) return ok;
    if (::rename(tmp.c_str(), path.c_str()) != 0) return fail_errno("renaming", tmp);
    const auto slash = path.rfind('/');
    return sync_path(slash == std::string::npos ? "." : path.substr(0, slash), O_RDONLY);
}

}  // namespace tidemark::mqtt::detail
