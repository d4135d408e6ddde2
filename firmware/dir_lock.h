// One process per data_dir: a second one would append to the same log and corrupt it.
#pragma once

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "core/result.h"

namespace tidemark::firmware {

/// Operation: an exclusive flock on DIR/lock, held for the object's life (the kernel drops it
/// when the process dies, so a killed service never leaves it behind).
/// Concurrency: one per process and directory; the service and the commands that write to the
/// store (`inspect --drop-pipeline`) take it, the read-only commands do not.
class DirLock {
  public:
    static Result<DirLock> take(const std::string& dir) {
        const std::string path = dir + "/lock";
        const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (fd < 0)
            return fail("cannot open " + path + ": " + std::strerror(errno) +
                        " (is data_dir writable by this user?)");
        if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
            ::close(fd);
            return fail("another tidemark process is using " + dir +
                        ": stop it first, or give this one another data_dir");
        }
        return DirLock(fd);
    }
    DirLock(DirLock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
    DirLock(const DirLock&) = delete;
    DirLock& operator=(const DirLock&) = delete;
    DirLock& operator=(DirLock&&) = delete;
    ~DirLock() {
        if (fd_ >= 0) ::close(fd_);
    }

  private:
    explicit DirLock(int fd) : fd_(fd) {}
    int fd_;
};

}  // namespace tidemark::firmware
