// UTF-8 validation shared by the topic escaper and the record encoder.
#pragma once

#include <cstddef>
#include <string_view>

namespace tidemark::codec {

/// Length of the well-formed UTF-8 sequence starting at s[i] (1 to 4), or 0 when the bytes
/// there are not one (overlong forms, surrogates and code points past U+10FFFF included).
size_t utf8_sequence_length(std::string_view s, size_t i) noexcept;

/// True when all of `s` is well-formed UTF-8.
bool is_valid_utf8(std::string_view s) noexcept;

}  // namespace tidemark::codec
