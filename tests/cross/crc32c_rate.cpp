// Prints CRC-32C's throughput on this machine for the path crc32c() chose and for the tables:
//   crc32c.PATH_mib_per_s: N MiB/s      (PATH = sse4_2, armv8 or software)
// Run by scripts/cross-test natively and under qemu-user. Under qemu the figures are the
// emulator's, not an ARM CPU's: they show that the hardware path is taken and how it compares
// with the tables there, nothing more.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "adapters/log/crc32c.h"

namespace {

// Best of three: the machine is shared, and the best run is the least disturbed.
template <typename Fn>
double mib_per_s(Fn fn, std::string_view bytes, int rounds) {
    double best = 0;
    for (int attempt = 0; attempt < 3; ++attempt) {
        uint32_t crc = 0;
        const auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < rounds; ++i)
            crc = fn(crc, bytes);
        const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
        // The result is printed so that the loop cannot be dropped.
        std::fprintf(stderr, "crc %08x\n", static_cast<unsigned>(crc));
        const double rate =
            static_cast<double>(bytes.size()) * rounds / (1024.0 * 1024.0) / elapsed.count();
        if (rate > best) best = rate;
    }
    return best;
}

}  // namespace

int main() {
    // 64 KiB: about a log read's buffer, and small enough to stay in cache.
    std::string buffer(64 * 1024, '\0');
    uint64_t state = 1;
    for (char& c : buffer) {
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        c = static_cast<char>(state >> 56);
    }
    const int rounds = 400;  // 25 MiB a run: well under a second natively, seconds under qemu
    std::string path(tidemark::log::crc32c_implementation());
    if (path != "software") {
        for (char& c : path)
            if (c == '.') c = '_';  // "sse4.2": a figure's name has no dots inside a part
        std::printf("crc32c.%s_mib_per_s: %.0f MiB/s\n", path.c_str(),
                    mib_per_s(tidemark::log::crc32c, buffer, rounds));
    }
    std::printf("crc32c.software_mib_per_s: %.0f MiB/s\n",
                mib_per_s(tidemark::log::crc32c_portable, buffer, rounds));
    return 0;
}
