// Helpers shared by LogWriter's files (log_writer.cpp, log_recovery.cpp, log_sync.cpp,
// log_seal.cpp); not part of the log's interface.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>

namespace tidemark::log::detail {

inline std::string errno_text(int err) {
    return std::strerror(err);
}

// Raises `value` to `to` if it is below (a durable offset only grows, whichever thread syncs).
inline void raise_to(std::atomic<uint64_t>& value, uint64_t to) {
    uint64_t seen = value.load(std::memory_order_relaxed);
    while (seen < to && !value.compare_exchange_weak(seen, to, std::memory_order_acq_rel)) {
    }
}

}  // namespace tidemark::log::detail
