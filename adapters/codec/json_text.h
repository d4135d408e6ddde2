// Byte-stable JSON text: the pieces every record that leaves the process is written with.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "core/result.h"

namespace tidemark::codec {

/// Appends `s` as a JSON string with its quotes: '"' and '\' escaped, control characters as
/// \u00XX (lowercase hex), other bytes as they are; a byte that is not part of well-formed
/// UTF-8 becomes \ufffd so the output is always valid JSON.
void append_json_string(std::string& out, std::string_view s);

/// Appends a number: NaN and infinities as null; a double that is an exact integer of at most
/// 2^53 in magnitude as an integer ("60", not "60.0"); any other as std::to_chars' shortest
/// text that reads back to the same double, e.g. 21.4, 1e+300, -2.5e-07, 9007199254740994.
void append_json_number(std::string& out, double value);
void append_json_integer(std::string& out, int64_t value);

/// JSON text written straight into memory sized beforehand, without a check of the string's
/// capacity for each piece: for the records written hundreds of thousands of times a second (a
/// backfill's results, issue 31). The same bytes as the append_json_* functions.
///
/// The caller bounds what its fill writes: string_bytes_max() for each string, integer_bytes_max
/// and number_bytes_max for each number, and its literals' own lengths. The bound is checked
/// after the writes (a bound too small is a bug, not an input's fault).
///
/// Memory: a string without room for the bound is written through a buffer of the thread's,
/// which keeps the largest bound it was given (a result's: a few KiB with the names and keys
/// that config and the engine bound).
class JsonText {
  public:
    static constexpr size_t integer_bytes_max = 20;  // "-9223372036854775808"
    static constexpr size_t number_bytes_max = 24;   // "-2.2250738585072014e-308"
    /// Each byte escaped at most as \u00XX or \ufffd, and the quotes.
    static constexpr size_t string_bytes_max(std::string_view s) { return 2 + 6 * s.size(); }

    /// Replaces `out` with what `fill(JsonText&)` writes, at most bytes_max bytes.
    template <class Fill>
    static void write(std::string& out, size_t bytes_max, Fill fill);

    void literal(std::string_view s) {
        std::memcpy(p_, s.data(), s.size());
        p_ += s.size();
    }
    void ch(char c) { *p_++ = c; }
    void string(std::string_view s);  // as append_json_string
    void integer(int64_t value);      // as append_json_integer
    void number(double value);        // as append_json_number

  private:
    explicit JsonText(char* at) : p_(at) {}
    char* p_;
};

template <class Fill>
void JsonText::write(std::string& out, size_t bytes_max, Fill fill) {
    const auto into = [&](char* at, size_t) {
        JsonText text(at);
        fill(text);
        const auto n = static_cast<size_t>(text.p_ - at);
        TM_ASSERT(n <= bytes_max);
        return n;
    };
    if (out.capacity() >= bytes_max) {
        out.resize_and_overwrite(bytes_max, into);
        return;
    }
    // Into this thread's buffer, then copied at its length: `out` grown to the bound would keep
    // about twice the room its text needs.
    thread_local std::string scratch;
    scratch.resize_and_overwrite(bytes_max, into);
    out.assign(scratch);
}

/// Standard base64 (RFC 4648, with '=' padding), for payloads that are not UTF-8.
void append_base64(std::string& out, std::string_view bytes);

}  // namespace tidemark::codec
