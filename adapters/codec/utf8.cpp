#include "adapters/codec/utf8.h"

#include <simdjson.h>

namespace tidemark::codec {

size_t utf8_sequence_length(std::string_view s, size_t i) noexcept {
    auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
    unsigned char b0 = byte(i);
    if (b0 < 0x80) return 1;
    size_t n = 0;
    unsigned char low = 0x80;
    unsigned char high = 0xBF;  // allowed range of the second byte (RFC 3629 table)
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        n = 2;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
        n = 3;
        if (b0 == 0xE0) low = 0xA0;   // overlong
        if (b0 == 0xED) high = 0x9F;  // surrogates
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        n = 4;
        if (b0 == 0xF0) low = 0x90;   // overlong
        if (b0 == 0xF4) high = 0x8F;  // past U+10FFFF
    } else {
        return 0;
    }
    if (i + n > s.size()) return 0;
    if (byte(i + 1) < low || byte(i + 1) > high) return 0;
    for (size_t k = 2; k < n; ++k) {
        if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
    }
    return n;
}

bool is_valid_utf8(std::string_view s) noexcept {
    return simdjson::validate_utf8(s.data(), s.size());
}

}  // namespace tidemark::codec
