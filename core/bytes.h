// Little-endian fixed-width encoding for state snapshots: portable across the gateways' CPUs;
// and the compact forms (varints, doubles in 1 to 9 bytes) that window state is written in.
#pragma once

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace tidemark::core::bytes {

/// put_u64's, put_u32's and put_str's bytes at p (room for them): for a caller that sized its
/// memory first (an LMDB page reserved for a row). Each returns the end of what it wrote.
inline char* put_u64_at(char* p, uint64_t v) {
    for (int i = 0; i < 8; ++i)
        p[i] = static_cast<char>(v >> (8 * i));
    return p + 8;
}
inline char* put_u32_at(char* p, uint32_t v) {
    for (int i = 0; i < 4; ++i)
        p[i] = static_cast<char>(v >> (8 * i));
    return p + 4;
}
inline char* put_str_at(char* p, std::string_view s) {
    p = put_u32_at(p, static_cast<uint32_t>(s.size()));
    std::memcpy(p, s.data(), s.size());
    return p + s.size();
}

inline void put_u64(std::string& out, uint64_t v) {
    char b[8];
    out.append(b, put_u64_at(b, v));
}
inline void put_u32(std::string& out, uint32_t v) {
    char b[4];
    out.append(b, put_u32_at(b, v));
}
inline void put_i64(std::string& out, int64_t v) {
    put_u64(out, static_cast<uint64_t>(v));
}
inline void put_f64(std::string& out, double v) {
    put_u64(out, std::bit_cast<uint64_t>(v));
}
inline void put_str(std::string& out, std::string_view s) {
    put_u32(out, static_cast<uint32_t>(s.size()));
    out.append(s);
}
/// Big-endian with the sign bit flipped: byte order equals numeric order, for sortable keys.
inline void put_i64_sortable(std::string& out, int64_t v) {
    uint64_t u = static_cast<uint64_t>(v) ^ (uint64_t{1} << 63);
    for (int i = 7; i >= 0; --i)
        out.push_back(static_cast<char>(u >> (8 * i)));
}

/// LEB128: 7 bits a byte, low first; 1 byte below 128, at most 10 (varint_bytes_max).
inline constexpr size_t varint_bytes_max = 10;
/// Writes v at p (room for varint_bytes(v) bytes); returns how many.
inline size_t put_varint(char* p, uint64_t v) {
    size_t n = 0;
    while (v >= 0x80) {
        p[n++] = static_cast<char>((v & 0x7f) | 0x80);
        v >>= 7;
    }
    p[n++] = static_cast<char>(v);
    return n;
}
inline void put_varint(std::string& out, uint64_t v) {
    char b[varint_bytes_max];
    out.append(b, put_varint(b, v));
}
/// The bytes put_varint writes for v.
inline constexpr size_t varint_bytes(uint64_t v) {
    size_t n = 1;
    for (; v >= 0x80; v >>= 7)
        ++n;
    return n;
}
/// A double, exactly (every bit, NaN payloads and -0.0 included), in as few bytes as its value
/// allows. A varint head whose low two bits say what it holds: 0, an integer n >= 0 below 2^53
/// (counts, sums of integer readings) as n << 2, one byte up to 31, two up to 4095; 3, a
/// negative one as (-1 - n) << 2 | 3; 1, then 4 bytes, a float that holds it exactly (one
/// decimal place of many sensors: 21.5, not 21.4); 2, then its 8 bytes.
inline void put_f64_compact(std::string& out, double v) {
    if (v == std::trunc(v) && std::fabs(v) < 0x1p53 && !(v == 0 && std::signbit(v))) {
        const auto n = static_cast<int64_t>(v);
        put_varint(
            out, n >= 0 ? static_cast<uint64_t>(n) << 2 : (static_cast<uint64_t>(-1 - n) << 2) | 3);
        return;
    }
    if (std::isinf(v) ||
        (std::fabs(v) <= FLT_MAX && static_cast<double>(static_cast<float>(v)) == v)) {
        out.push_back(1);
        put_u32(out, std::bit_cast<uint32_t>(static_cast<float>(v)));
        return;
    }
    out.push_back(2);
    put_f64(out, v);
}

// Readers consume from the front of `in`; they return false (and leave `in` unspecified) when
// the input is too short: callers treat that as damaged state.
inline bool get_u64(std::string_view& in, uint64_t& v) {
    if (in.size() < 8) return false;
    v = 0;
    for (int i = 0; i < 8; ++i)
        v |= uint64_t{static_cast<unsigned char>(in[i])} << (8 * i);
    in.remove_prefix(8);
    return true;
}
inline bool get_u32(std::string_view& in, uint32_t& v) {
    if (in.size() < 4) return false;
    v = 0;
    for (int i = 0; i < 4; ++i)
        v |= uint32_t{static_cast<unsigned char>(in[i])} << (8 * i);
    in.remove_prefix(4);
    return true;
}
inline bool get_i64(std::string_view& in, int64_t& v) {
    uint64_t u;
    if (!get_u64(in, u)) return false;
    v = static_cast<int64_t>(u);
    return true;
}
inline bool get_f64(std::string_view& in, double& v) {
    uint64_t u;
    if (!get_u64(in, u)) return false;
    v = std::bit_cast<double>(u);
    return true;
}
inline bool get_str(std::string_view& in, std::string_view& s) {
    uint32_t n;
    if (!get_u32(in, n) || in.size() < n) return false;
    s = in.substr(0, n);
    in.remove_prefix(n);
    return true;
}
/// As above, into an owned string.
inline bool get_str(std::string_view& in, std::string& out) {
    std::string_view s;
    if (!get_str(in, s)) return false;
    out.assign(s);
    return true;
}
inline bool get_varint(std::string_view& in, uint64_t& v) {
    v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (in.empty()) return false;
        const auto byte = static_cast<unsigned char>(in[0]);
        in.remove_prefix(1);
        // The tenth byte holds the top bit only: more would not fit in 64 bits.
        if (shift == 63 && byte > 1) return false;
        v |= uint64_t{byte & 0x7fu} << shift;
        if (!(byte & 0x80)) return true;
    }
    return false;
}
inline bool get_f64_compact(std::string_view& in, double& v) {
    uint64_t head;
    if (!get_varint(in, head)) return false;
    if ((head & 3) == 0 || (head & 3) == 3) {
        const uint64_t magnitude = head >> 2;  // n, or -1 - n
        if (magnitude >= (uint64_t{1} << 53)) return false;
        const auto n = static_cast<int64_t>(magnitude);
        v = static_cast<double>((head & 3) == 0 ? n : -1 - n);
        return true;
    }
    if (head == 1) {
        uint32_t bits;
        if (!get_u32(in, bits)) return false;
        v = static_cast<double>(std::bit_cast<float>(bits));
        return true;
    }
    return head == 2 && get_f64(in, v);
}
inline bool get_i64_sortable(std::string_view& in, int64_t& v) {
    if (in.size() < 8) return false;
    uint64_t u = 0;
    for (int i = 0; i < 8; ++i)
        u = (u << 8) | static_cast<unsigned char>(in[i]);
    in.remove_prefix(8);
    v = static_cast<int64_t>(u ^ (uint64_t{1} << 63));
    return true;
}

}  // namespace tidemark::core::bytes
