#include <catch2/catch.hpp>
#include <random>
#include <string>

#include "adapters/log/crc32c.h"

using tidemark::log::crc32c;
using tidemark::log::crc32c_portable;

TEST_CASE("crc32c: the standard check value, and the hardware path equals the table") {
    CHECK(crc32c(0, "123456789") == 0xE3069283u);
    CHECK(crc32c_portable(0, "123456789") == 0xE3069283u);
    std::mt19937 rng(7);
    for (int len = 0; len < 300; ++len) {
        std::string s(static_cast<size_t>(len), '\0');
        for (char& c : s)
            c = static_cast<char>(rng());
        INFO("length " << len);
        CHECK(crc32c(0, s) == crc32c_portable(0, s));
        // Chained: the CRC of a concatenation continues from the first part's.
        CHECK(crc32c(crc32c(0, s.substr(0, static_cast<size_t>(len) / 3)),
                     s.substr(static_cast<size_t>(len) / 3)) == crc32c(0, s));
    }
}
