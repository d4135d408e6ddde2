// Byte-stable JSON text: the pieces every record that leaves the process is written with.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

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

/// Standard base64 (RFC 4648, with '=' padding), for payloads that are not UTF-8.
void append_base64(std::string& out, std::string_view bytes);

}  // namespace tidemark::codec
