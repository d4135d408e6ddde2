// The one stable hash: FNV-1a 64 over bytes, with helpers for the length-prefixed and
// little-endian layouts that ids and fingerprints are defined over.
#pragma once

#include <cstdint>
#include <string_view>

namespace tidemark::core::hash {

/// Operation: FNV-1a, sequential, so a common prefix is hashed once and continued (an id seed
/// per (node, pipeline), continued per emission).
/// Limits: result ids, pipeline fingerprints and redelivery digests are defined by these exact
/// bytes: never change the constants or the byte order (tests/core/hash_test.cpp holds golden
/// values). Not a defence against adversarial collisions.
inline constexpr uint64_t fnv_offset = 0xcbf29ce484222325ULL;
inline constexpr uint64_t fnv_prime = 0x100000001b3ULL;

/// Continues `h` over the bytes of `s`.
constexpr uint64_t fnv1a(uint64_t h, std::string_view s) {
    for (char c : s) {
        h ^= static_cast<unsigned char>(c);
        h *= fnv_prime;
    }
    return h;
}

/// Continues `h` over the low `bytes` bytes of `v`, little-endian (as core/bytes.h puts them).
constexpr uint64_t fnv1a_le(uint64_t h, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) {
        h ^= static_cast<unsigned char>(v >> (8 * i));
        h *= fnv_prime;
    }
    return h;
}

/// Continues `h` over a u32 little-endian length, then the bytes (bytes::put_str's layout), so
/// that ("ab", "c") and ("a", "bc") differ.
constexpr uint64_t fnv1a_str(uint64_t h, std::string_view s) {
    return fnv1a(fnv1a_le(h, s.size(), 4), s);
}

/// The splitmix64 finaliser: spreads nearby inputs over all 64 bits.
constexpr uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

}  // namespace tidemark::core::hash
