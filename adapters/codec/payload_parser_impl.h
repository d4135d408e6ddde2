// PayloadParser's inside: what Decoder reads from a parsed payload (internal to adapters/codec).
#pragma once

#include <simdjson.h>

#include <memory>
#include <string>
#include <string_view>

#include "adapters/codec/decoder.h"

namespace tidemark::codec {

/// "an array", "a number", ...: for reasons.
inline std::string_view json_type_name(simdjson::dom::element_type type) {
    using T = simdjson::dom::element_type;
    switch (type) {
        case T::ARRAY:
            return "an array";
        case T::OBJECT:
            return "an object";
        case T::INT64:
        case T::UINT64:
        case T::DOUBLE:
            return "a number";
        case T::STRING:
            return "a string";
        case T::BOOL:
            return "a boolean";
        case T::NULL_VALUE:
            return "null";
    }
    return "?";
}

struct PayloadParser::Impl {
    // For payloads up to payload_retained_bytes_max: grows to the largest of them and stays.
    simdjson::dom::parser retained;
    // For the current payload when it is larger; null otherwise (release() frees it).
    std::unique_ptr<simdjson::dom::parser> large;
    simdjson::dom::element root;  // valid while status is ok and not released
    bool released = true;         // release() since the last parse(): nothing may read root
    DecodeStatus status = DecodeStatus::malformed_json;
    std::string reason;
    std::string_view payload;
    uint64_t parses = 0;
};

}  // namespace tidemark::codec
