#include "adapters/log/crc32c.h"

#include <array>
#include <cstring>

#include "core/result.h"

#if defined(__x86_64__)
#include <nmmintrin.h>
#elif defined(__aarch64__) || defined(__arm__)
#include <sys/auxv.h>
#endif

namespace tidemark::log {
namespace {

using Tables = std::array<std::array<uint32_t, 256>, 8>;

constexpr Tables make_tables() {
    Tables t{};
    for (uint32_t i = 0; i < 256; ++i) {
        uint32_t c = i;
        for (int k = 0; k < 8; ++k)
            c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i) {
        for (size_t s = 1; s < 8; ++s)
            t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xFF];
    }
    return t;
}

constexpr Tables tables = make_tables();

#if defined(__x86_64__)
// SSE4.2 has a CRC-32C instruction (8 bytes a cycle or so): several times the table's speed,
// which matters when replay reads a million records a second. Chosen at run time, so the binary
// still runs on x86-64 CPUs without it.
__attribute__((target("sse4.2"))) uint32_t crc32c_hardware(uint32_t crc, const unsigned char* p,
                                                           size_t n) {
    uint64_t c = ~crc;
    while (n >= 8) {
        uint64_t word;
        std::memcpy(&word, p, 8);
        c = _mm_crc32_u64(c, word);
        p += 8;
        n -= 8;
    }
    uint32_t c32 = static_cast<uint32_t>(c);
    while (n-- > 0)
        c32 = _mm_crc32_u8(c32, *p++);
    return ~c32;
}

bool cpu_has_crc32c() {
    return __builtin_cpu_supports("sse4.2");
}
constexpr std::string_view hardware_name = "sse4.2";

#elif defined(__aarch64__)
// The ARMv8 CRC32 extension (optional in ARMv8.0, so asked of the kernel rather than assumed):
// CRC32CX takes 8 bytes a step. The words are loaded little-endian (memcpy on a little-endian
// target), which is the order the reflected CRC consumes bytes in.
__attribute__((target("+crc"))) uint32_t crc32c_hardware(uint32_t crc, const unsigned char* p,
                                                         size_t n) {
    uint32_t c = ~crc;
    while (n >= 8) {
        uint64_t word;
        std::memcpy(&word, p, 8);
        c = __builtin_aarch64_crc32cx(c, word);
        p += 8;
        n -= 8;
    }
    while (n-- > 0)
        c = __builtin_aarch64_crc32cb(c, *p++);
    return ~c;
}

// HWCAP_CRC32 from <asm/hwcap.h>, spelled out so the file needs no kernel headers.
bool cpu_has_crc32c() {
    return (getauxval(AT_HWCAP) & (1UL << 7)) != 0;
}
constexpr std::string_view hardware_name = "armv8";

#elif defined(__arm__)
// armhf is built for ARMv7, which has no CRC instruction; an ARMv8 CPU running 32-bit code
// (a Raspberry Pi 3/4 with a 32-bit OS, say) has it in AArch32 and the kernel reports it in
// HWCAP2. Only this function is compiled for ARMv8 (+simd keeps the hard-float ABI's FPU);
// the builtins are used because <arm_acle.h> declares the intrinsics only when the whole file
// targets ARMv8.
__attribute__((target("arch=armv8-a+crc+simd"))) uint32_t crc32c_hardware(uint32_t crc,
                                                                          const unsigned char* p,
                                                                          size_t n) {
    uint32_t c = ~crc;
    while (n >= 4) {
        uint32_t word;
        std::memcpy(&word, p, 4);
        c = __builtin_arm_crc32cw(c, word);
        p += 4;
        n -= 4;
    }
    while (n-- > 0)
        c = __builtin_arm_crc32cb(c, *p++);
    return ~c;
}

// HWCAP2_CRC32 from the arm <asm/hwcap.h>.
bool cpu_has_crc32c() {
    return (getauxval(AT_HWCAP2) & (1UL << 4)) != 0;
}
constexpr std::string_view hardware_name = "armv8";

#else
uint32_t crc32c_hardware(uint32_t, const unsigned char*, size_t) {
    TM_ASSERT(false);  // never chosen: cpu_has_crc32c() is false
    return 0;
}
bool cpu_has_crc32c() {
    return false;
}
constexpr std::string_view hardware_name = "software";
#endif

const bool use_hardware = cpu_has_crc32c();

}  // namespace

uint32_t crc32c(uint32_t crc, std::string_view bytes) {
    if (use_hardware)
        return crc32c_hardware(crc, reinterpret_cast<const unsigned char*>(bytes.data()),
                               bytes.size());
    return crc32c_portable(crc, bytes);
}

std::string_view crc32c_implementation() {
    return use_hardware ? hardware_name : "software";
}

uint32_t crc32c_portable(uint32_t crc, std::string_view bytes) {
    const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
    size_t n = bytes.size();
    uint32_t c = ~crc;
    while (n >= 8) {
        // Assembled byte by byte: correct on either endianness and for unaligned input.
        uint32_t lo = c ^ (uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 |
                           uint32_t{p[3]} << 24);
        c = tables[7][lo & 0xFF] ^ tables[6][(lo >> 8) & 0xFF] ^ tables[5][(lo >> 16) & 0xFF] ^
            tables[4][lo >> 24] ^ tables[3][p[4]] ^ tables[2][p[5]] ^ tables[1][p[6]] ^
            tables[0][p[7]];
        p += 8;
        n -= 8;
    }
    while (n-- > 0)
        c = (c >> 8) ^ tables[0][(c ^ *p++) & 0xFF];
    return ~c;
}

}  // namespace tidemark::log
