#include "adapters/codec/json_text.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "adapters/codec/utf8.h"

namespace tidemark::codec {

void append_json_string(std::string& out, std::string_view s) {
    static constexpr char hex[] = "0123456789abcdef";
    const auto plain = [](char ch) {
        const auto c = static_cast<unsigned char>(ch);
        return c >= 0x20 && c < 0x80 && c != '"' && c != '\\';
    };
    out += '"';
    for (size_t i = 0;;) {
        // A run that needs no escape goes in with one append: char by char, the strings of a
        // result (its node, pipeline, key and names) cost about a third of its encoding (issue 31).
        const size_t run_end =
            static_cast<size_t>(std::find_if_not(s.begin() + i, s.end(), plain) - s.begin());
        out.append(s.substr(i, run_end - i));
        i = run_end;
        if (i == s.size()) break;
        const auto b = static_cast<unsigned char>(s[i]);
        if (b >= 0x80) {
            const size_t n = utf8_sequence_length(s, i);
            if (n == 0) {
                out += "\\ufffd";
                ++i;
            } else {
                out.append(s.substr(i, n));
                i += n;
            }
        } else if (b == '"' || b == '\\') {
            out += '\\';
            out += static_cast<char>(b);
            ++i;
        } else {  // a control character
            out += "\\u00";
            out += hex[b >> 4];
            out += hex[b & 15];
            ++i;
        }
    }
    out += '"';
}

void append_json_integer(std::string& out, int64_t value) {
    char buffer[24];
    auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, value);
    out.append(buffer, end);
}

void append_json_number(std::string& out, double value) {
    if (!std::isfinite(value)) {
        out += "null";
        return;
    }
    constexpr double exact_integer_max = 9007199254740992.0;  // 2^53
    if (std::fabs(value) <= exact_integer_max && value == std::trunc(value)) {
        append_json_integer(out, static_cast<int64_t>(value));
        return;
    }
    char buffer[32];
    auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, value);
    out.append(buffer, end);
}

void append_base64(std::string& out, std::string_view bytes) {
    static constexpr char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t i = 0;
    auto at = [&](size_t k) { return static_cast<uint32_t>(static_cast<unsigned char>(bytes[k])); };
    for (; i + 3 <= bytes.size(); i += 3) {
        uint32_t v = at(i) << 16 | at(i + 1) << 8 | at(i + 2);
        out += alphabet[v >> 18];
        out += alphabet[(v >> 12) & 63];
        out += alphabet[(v >> 6) & 63];
        out += alphabet[v & 63];
    }
    size_t rest = bytes.size() - i;
    if (rest == 1) {
        uint32_t v = at(i) << 16;
        out += alphabet[v >> 18];
        out += alphabet[(v >> 12) & 63];
        out += "==";
    } else if (rest == 2) {
        uint32_t v = at(i) << 16 | at(i + 1) << 8;
        out += alphabet[v >> 18];
        out += alphabet[(v >> 12) & 63];
        out += alphabet[(v >> 6) & 63];
        out += '=';
    }
}

}  // namespace tidemark::codec
