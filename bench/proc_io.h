// What this process has written, as the kernel accounts it in /proc/self/io (Linux): the
// benchmarks' measure of flash wear.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>

namespace tidemark::bench {

/// wchar: bytes passed to write(2) and its kin, whether or not they reach storage.
/// write_bytes: bytes sent to storage, counted when a page is dirtied (a page dirtied again
/// before writeback counts once); cancelled_write_bytes: dirty bytes truncated before writeback,
/// which never reach the device. All 0 where the kernel does not say.
struct ProcIo {
    uint64_t wchar = 0;
    uint64_t write_bytes = 0;
    uint64_t cancelled_write_bytes = 0;
    /// What reached (or will reach) storage.
    uint64_t stored() const { return write_bytes - cancelled_write_bytes; }
};

inline ProcIo read_proc_io() {
    std::ifstream in("/proc/self/io");
    ProcIo io;
    std::string k;
    uint64_t v = 0;
    while (in >> k >> v) {
        if (k == "wchar:") io.wchar = v;
        if (k == "write_bytes:") io.write_bytes = v;
        if (k == "cancelled_write_bytes:") io.cancelled_write_bytes = v;
    }
    return io;
}

}  // namespace tidemark::bench
