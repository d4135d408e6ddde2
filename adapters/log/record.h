// One record of the ingest log and its on-disk frame.
//
// Frame (little-endian), at a global byte offset of the concatenated segments:
//   u32 body_bytes | u32 crc32c(body) | body
//   body = u8 type | i64 ingest_ms | u16 topic_bytes | topic | payload
// A malformed record's topic field holds "reason\ttopic" (the reason has no tab); the writer
// encodes it and decode_frame() splits it into Record::reason and Record::topic, so that no
// one outside adapters/log knows the layout.
// The payload's length is what the body has left after the topic. The CRC covers the body; a
// damaged length field makes the CRC run over the wrong bytes, so it fails too (a 2^-32 chance
// aside). body_bytes is bounded (record_body_bytes_max) so that garbage is not taken for a
// huge record, and a zero length (what a power loss leaves in a preallocated tail) is invalid.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace tidemark::log {

enum class RecordType : uint8_t {
    message = 1,    // an MQTT message: its topic and payload as received
    tick = 2,       // ingest clock only (empty topic and payload): time passes while idle
    malformed = 3,  // kept for inspection: why (Record::reason), its topic, a payload prefix
};

/// "message", "tick", "malformed" or "unknown".
std::string_view record_type_name(RecordType type);

/// A record as read back. topic and payload view the reader's buffer: valid until the next call
/// on that reader.
struct Record {
    uint64_t offset = 0;       // where its frame starts
    uint64_t next_offset = 0;  // where the next frame starts
    RecordType type = RecordType::tick;
    int64_t ingest_ms = 0;
    std::string_view topic;
    std::string_view payload;
    /// A malformed record's reason ("oversized: ..."); empty for the other types.
    std::string_view reason;
};

/// The separator of reason and topic in a malformed record's topic field.
inline constexpr char malformed_reason_separator = '\t';

/// An ingest time not known: of a segment that holds no record yet, or whose first record
/// cannot be read; of a reader that has read nothing yet. Below every real one.
inline constexpr int64_t ingest_ms_unknown = INT64_MIN;

inline constexpr uint64_t frame_header_bytes = 8;  // u32 body length, u32 CRC
inline constexpr uint64_t body_prefix_bytes = 11;  // u8 type, i64 ingest_ms, u16 topic length
inline constexpr uint64_t record_body_bytes_max = uint64_t{16} << 20;
inline constexpr uint64_t topic_bytes_max = 65535;
/// A malformed record keeps at most this much of the payload: enough to see what was wrong,
/// while a flood of oversized junk cannot fill the log at full size.
inline constexpr uint64_t malformed_payload_bytes_max = 4096;

inline constexpr uint64_t frame_bytes(uint64_t topic_bytes, uint64_t payload_bytes) {
    return frame_header_bytes + body_prefix_bytes + topic_bytes + payload_bytes;
}

enum class FrameStatus {
    ok,
    incomplete,  // fewer bytes than the header or the body it announces
    bad_length,  // the length field is outside [body_prefix_bytes, record_body_bytes_max]
    bad_crc,     // complete, but the CRC or the topic length does not match the body
    bad_type,    // the CRC matches but the type is unknown: written by a newer version
};

/// What the first frame_header_bytes + body_prefix_bytes of a frame say, read without the CRC.
struct FrameHead {
    uint64_t frame_bytes = 0;
    int64_t ingest_ms = 0;
};

/// The head of the frame at the start of `bytes` if its length is within bounds, its type known
/// and its topic fits its body: the cheap filter applied at every byte when a scan searches for
/// the next frame after damage, before it pays for a CRC. nullopt when it fails or `bytes` is
/// shorter than a head.
std::optional<FrameHead> peek_frame_head(std::string_view bytes);

/// Decodes the frame at the start of `bytes`. On ok, fills out's type, ingest_ms, topic, payload
/// and reason (views into `bytes`; offsets are the caller's). frame_bytes_out is set whenever the
/// length field could be read (every status but a short header).
FrameStatus decode_frame(std::string_view bytes, Record& out, uint64_t& frame_bytes_out);

}  // namespace tidemark::log
