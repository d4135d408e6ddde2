#include "adapters/codec/json_text.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>

#include "adapters/codec/utf8.h"

namespace tidemark::codec {

namespace {

// Where the escaping writes: a std::string that grows, or memory sized beforehand (JsonText).
struct GrowingOut {
    std::string& s;
    void append(const char* p, size_t n) { s.append(p, n); }
    void push(char c) { s += c; }
};
struct SizedOut {
    char* p;
    void append(const char* from, size_t n) {
        std::memcpy(p, from, n);
        p += n;
    }
    void push(char c) { *p++ = c; }
};

// At most 6 bytes out for each byte in (a control character's \u00XX, or one byte's \ufffd),
// and the quotes: JsonText::string_bytes_max.
template <class Out>
void write_json_string(Out& out, std::string_view s) {
    static constexpr char hex[] = "0123456789abcdef";
    const auto plain = [](char ch) {
        const auto c = static_cast<unsigned char>(ch);
        return c >= 0x20 && c < 0x80 && c != '"' && c != '\\';
    };
    out.push('"');
    for (size_t i = 0;;) {
        // A run that needs no escape goes in with one append: char by char, the strings of a
        // result (its node, pipeline, key and names) cost about a third of its encoding (issue 31).
        const size_t run_end =
            static_cast<size_t>(std::find_if_not(s.begin() + i, s.end(), plain) - s.begin());
        out.append(s.data() + i, run_end - i);
        i = run_end;
        if (i == s.size()) break;
        const auto b = static_cast<unsigned char>(s[i]);
        if (b >= 0x80) {
            const size_t n = utf8_sequence_length(s, i);
            if (n == 0) {
                out.append("\\ufffd", 6);
                ++i;
            } else {
                out.append(s.data() + i, n);
                i += n;
            }
        } else if (b == '"' || b == '\\') {
            out.push('\\');
            out.push(static_cast<char>(b));
            ++i;
        } else {  // a control character
            out.append("\\u00", 4);
            out.push(hex[b >> 4]);
            out.push(hex[b & 15]);
            ++i;
        }
    }
    out.push('"');
}

// The text of a number into p (room for JsonText::integer_bytes_max bytes, number_bytes_max for
// a double); returns its end. Either maximum is the longest text of its type: a failure is a bug.
char* write_json_integer(char* p, int64_t value) {
    const auto r = std::to_chars(p, p + JsonText::integer_bytes_max, value);
    TM_ASSERT(r.ec == std::errc{});
    return r.ptr;
}

char* write_json_number(char* p, double value) {
    if (!std::isfinite(value)) {
        std::memcpy(p, "null", 4);
        return p + 4;
    }
    constexpr double exact_integer_max = 9007199254740992.0;  // 2^53
    if (std::fabs(value) <= exact_integer_max && value == std::trunc(value))
        return write_json_integer(p, static_cast<int64_t>(value));
    const auto r = std::to_chars(p, p + JsonText::number_bytes_max, value);
    TM_ASSERT(r.ec == std::errc{});
    return r.ptr;
}

}  // namespace

void append_json_string(std::string& out, std::string_view s) {
    GrowingOut o{out};
    write_json_string(o, s);
}

void append_json_integer(std::string& out, int64_t value) {
    char buffer[JsonText::integer_bytes_max];
    out.append(buffer, write_json_integer(buffer, value));
}

void append_json_number(std::string& out, double value) {
    char buffer[JsonText::number_bytes_max];
    out.append(buffer, write_json_number(buffer, value));
}

void JsonText::string(std::string_view s) {
    SizedOut o{p_};
    write_json_string(o, s);
    p_ = o.p;
}

void JsonText::integer(int64_t value) {
    p_ = write_json_integer(p_, value);
}

void JsonText::number(double value) {
    p_ = write_json_number(p_, value);
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
