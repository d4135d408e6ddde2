// Little-endian fixed-width encoding for state snapshots: portable across the gateways' CPUs.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace tidemark::core::bytes {

inline void put_u64(std::string& out, uint64_t v) {
    char b[8];
    for (int i = 0; i < 8; ++i)
        b[i] = static_cast<char>(v >> (8 * i));
    out.append(b, 8);
}
inline void put_u32(std::string& out, uint32_t v) {
    char b[4];
    for (int i = 0; i < 4; ++i)
        b[i] = static_cast<char>(v >> (8 * i));
    out.append(b, 4);
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
