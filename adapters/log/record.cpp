#include "adapters/log/record.h"

#include "adapters/log/crc32c.h"

namespace tidemark::log {
namespace {

uint64_t load_le(const char* p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; ++i)
        v |= uint64_t{static_cast<unsigned char>(p[i])} << (8 * i);
    return v;
}

}  // namespace

std::string_view record_type_name(RecordType type) {
    switch (type) {
        case RecordType::message:
            return "message";
        case RecordType::tick:
            return "tick";
        case RecordType::malformed:
            return "malformed";
    }
    return "unknown";
}

std::optional<FrameHead> peek_frame_head(std::string_view bytes) {
    if (bytes.size() < frame_header_bytes + body_prefix_bytes) return std::nullopt;
    uint64_t body_bytes = load_le(bytes.data(), 4);
    if (body_bytes < body_prefix_bytes || body_bytes > record_body_bytes_max) return std::nullopt;
    const char* body = bytes.data() + frame_header_bytes;
    auto type = static_cast<unsigned char>(body[0]);
    if (type < 1 || type > 3) return std::nullopt;
    if (body_prefix_bytes + load_le(body + 9, 2) > body_bytes) return std::nullopt;
    return FrameHead{frame_header_bytes + body_bytes, static_cast<int64_t>(load_le(body + 1, 8))};
}

FrameStatus decode_frame(std::string_view bytes, Record& out, uint64_t& frame_bytes_out) {
    frame_bytes_out = 0;
    if (bytes.size() < frame_header_bytes) return FrameStatus::incomplete;
    uint64_t body_bytes = load_le(bytes.data(), 4);
    frame_bytes_out = frame_header_bytes + body_bytes;
    if (body_bytes < body_prefix_bytes || body_bytes > record_body_bytes_max) {
        return FrameStatus::bad_length;
    }
    if (bytes.size() < frame_bytes_out) return FrameStatus::incomplete;
    auto crc = static_cast<uint32_t>(load_le(bytes.data() + 4, 4));
    std::string_view body = bytes.substr(frame_header_bytes, body_bytes);
    if (crc32c(0, body) != crc) return FrameStatus::bad_crc;
    uint64_t topic_bytes = load_le(body.data() + 9, 2);
    if (body_prefix_bytes + topic_bytes > body_bytes) return FrameStatus::bad_crc;
    auto type = static_cast<unsigned char>(body[0]);
    if (type < 1 || type > 3) return FrameStatus::bad_type;
    out.type = static_cast<RecordType>(type);
    out.ingest_ms = static_cast<int64_t>(load_le(body.data() + 1, 8));
    out.topic = body.substr(body_prefix_bytes, topic_bytes);
    out.payload = body.substr(body_prefix_bytes + topic_bytes);
    out.reason = {};
    if (out.type == RecordType::malformed) {
        // Without a separator (not written by LogWriter::append_malformed) it is all reason.
        const size_t separator = out.topic.find(malformed_reason_separator);
        out.reason = out.topic.substr(0, separator);
        out.topic = separator == std::string_view::npos ? std::string_view{}
                                                        : out.topic.substr(separator + 1);
    }
    return FrameStatus::ok;
}

}  // namespace tidemark::log
