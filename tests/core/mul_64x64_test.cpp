// The hash's 128-bit multiply on targets without __int128 (armhf): the portable product must
// equal the native one, or names hash differently there (same results, other probe layout,
// other timings; and the armhf build would run code no test ran).
#include <catch2/catch.hpp>
#include <cstdint>

#include "core/engine/name_table.h"

using tidemark::core::detail::mul_64x64_portable;
using tidemark::core::detail::Product128;

namespace {

// splitmix64: a fixed sequence, so a failure names its pair.
[[maybe_unused]] uint64_t next(uint64_t& state) {  // unused without __int128 (armhf)
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

}  // namespace

TEST_CASE("the portable 64x64 product on known values") {
    constexpr uint64_t max = ~uint64_t{0};
    STATIC_REQUIRE(mul_64x64_portable(0, max).lo == 0);
    STATIC_REQUIRE(mul_64x64_portable(0, max).hi == 0);
    // (2^64-1)^2 = 2^128 - 2^65 + 1
    CHECK(mul_64x64_portable(max, max).lo == 1);
    CHECK(mul_64x64_portable(max, max).hi == max - 1);
    CHECK(mul_64x64_portable(uint64_t{1} << 32, uint64_t{1} << 32).hi == 1);
    CHECK(mul_64x64_portable(uint64_t{1} << 32, uint64_t{1} << 32).lo == 0);
    CHECK(mul_64x64_portable(0xffffffffu, 0xffffffffu).lo == 0xfffffffe00000001ull);
    CHECK(mul_64x64_portable(0xffffffffu, 0xffffffffu).hi == 0);
}

#if defined(__SIZEOF_INT128__)
TEST_CASE("the portable 64x64 product equals the __int128 one") {
    __extension__ using uint128 = unsigned __int128;
    uint64_t state = 1;
    uint64_t mismatches = 0;
    for (int i = 0; i < 1'000'000; ++i) {
        uint64_t a = next(state), b = next(state);
        // Also words with all-ones or all-zero halves, where carries are longest.
        if (i % 4 == 1) a |= 0xffffffffu;
        if (i % 4 == 2) b = (b | 0xffffffff00000000ull);
        if (i % 8 == 3) a &= 0xffffffff00000000ull;
        const uint128 r = static_cast<uint128>(a) * b;
        const Product128 p = mul_64x64_portable(a, b);
        if (p.lo != static_cast<uint64_t>(r) || p.hi != static_cast<uint64_t>(r >> 64)) {
            if (++mismatches <= 3) FAIL_CHECK("a " << a << " b " << b);
        }
    }
    CHECK(mismatches == 0);
}
#endif
