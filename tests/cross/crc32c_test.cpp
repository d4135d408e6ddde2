// CRC-32C: the hardware path chosen at run time (SSE4.2, ARMv8 CRC32) gives the table's value,
// so a log written on one CPU verifies on another.
#if defined(__aarch64__) || defined(__arm__)
#include <sys/auxv.h>
#endif

#include <catch2/catch.hpp>
#include <cstdint>
#include <string>

#include "adapters/log/crc32c.h"

using tidemark::log::crc32c;
using tidemark::log::crc32c_implementation;
using tidemark::log::crc32c_portable;

namespace {

// What the CPU offers, asked the way the dispatch should have asked.
std::string expected_implementation() {
#if defined(__x86_64__)
    return __builtin_cpu_supports("sse4.2") ? "sse4.2" : "software";
#elif defined(__aarch64__)
    return (getauxval(AT_HWCAP) & (1UL << 7)) != 0 ? "armv8" : "software";  // HWCAP_CRC32
#elif defined(__arm__)
    return (getauxval(AT_HWCAP2) & (1UL << 4)) != 0 ? "armv8" : "software";  // HWCAP2_CRC32
#else
    return "software";
#endif
}

}  // namespace

TEST_CASE("crc32c uses the CPU's CRC-32C instruction where it has one") {
    INFO("crc32c implementation: " << crc32c_implementation());
    CHECK(std::string(crc32c_implementation()) == expected_implementation());
}

TEST_CASE("crc32c matches the published check values on every path") {
    // RFC 3720 (iSCSI) appendix B.4 and the CRC catalogue's check value.
    const std::string zeros(32, '\0');
    const std::string ones(32, '\xff');
    std::string ascending(32, '\0');
    for (int i = 0; i < 32; ++i)
        ascending[static_cast<size_t>(i)] = static_cast<char>(i);
    for (auto* fn : {&crc32c, &crc32c_portable}) {
        CHECK(fn(0, "123456789") == 0xE3069283u);
        CHECK(fn(0, zeros) == 0x8A9136AAu);
        CHECK(fn(0, ones) == 0x62A8AB43u);
        CHECK(fn(0, ascending) == 0x46DD794Eu);
        CHECK(fn(0, "") == 0u);
    }
}

TEST_CASE("crc32c agrees with the tables on random input, any alignment and any split") {
    uint64_t state = 12;
    auto next = [&state] {
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        return static_cast<uint32_t>(state >> 33);
    };
    std::string buffer(4096 + 16, '\0');
    for (char& c : buffer)
        c = static_cast<char>(next());
    for (int round = 0; round < 2000; ++round) {
        // Lengths around the 4- and 8-byte steps, offsets that misalign the words.
        const size_t offset = next() % 16;
        const size_t length = round < 64 ? static_cast<size_t>(round) : next() % 4096;
        const std::string_view bytes(buffer.data() + offset, length);
        const uint32_t seed = round % 3 == 0 ? 0 : next();
        const uint32_t expected = crc32c_portable(seed, bytes);
        REQUIRE(crc32c(seed, bytes) == expected);
        const size_t split = length == 0 ? 0 : next() % length;
        REQUIRE(crc32c(crc32c(seed, bytes.substr(0, split)), bytes.substr(split)) == expected);
    }
}
