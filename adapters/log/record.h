// One record of the ingest log and its on-disk frames.
//
// Two frame layouts (little-endian), at a global byte offset of the concatenated segments.
//
// Full frame (format 1, every frame of a segment written before 2026-12-01; and the anchor):
//   u32 body_bytes | u32 crc32c(body) | body
//   body = u8 type | i64 ingest_ms | u16 topic_bytes | topic | payload
//
// Compact frame (format 2: a segment that starts with an anchor holds compact frames after it):
//   varint body_bytes | u32 crc32c(body) | body
//   body = u8 type | varint (ingest_ms - base_ms) | by type:
//     message_ref 1:  varint topic_id | payload
//     tick 2,
//     malformed 3:    varint topic_field_bytes | topic field | payload (the dictionary is for
//                     messages; a tick's topic and payload are empty)
//     message_def 5:  varint topic_id | varint topic_bytes | topic | payload
//     message_ref_once 6, message_def_once 7, malformed_once 8: as 1, 5 and 3, for a message the
//                     broker never sends again (QoS0, "at most once"; since 2026-12-02): the
//                     redelivery filter's seed leaves them out (Record::redeliverable)
// varint: unsigned LEB128 (7 bits a byte, low first), canonical (no zero last byte after the
// first). The topic dictionary is the segment's:
// a message_def gives topic_id its topic for the rest of the segment (ids are never reused in
// a segment, so no damage can make an id name another topic); later messages of that topic carry
// only the id. The writer writes a topic's definition again at its first use after every anchor,
// so that a definition lost to damage costs the records of that topic only up to the next
// anchor (anchor_interval_bytes), not to the end of the segment.
// The CRC of a compact frame starts from a seed made of the frame's own offset
// (frame_crc_seed), not from 0: a frame copied to another place (a misdirected write, a stale
// sector) fails its CRC there and is damage, never a record read with another segment's topic
// ids or base time. Likewise an anchor holds its own offset.
// Anchor: a full frame of type 4, topic empty, payload u8 format (2) | i64 base_ms | u64 its own
// offset | zeros to a 128-byte body (anchor_body_bytes says why). Its
// ingest_ms is the next record's, as for any frame (the log's time never decreases); base_ms is
// what compact frames' ingest times count from, the same in all the anchors of a segment (the
// first record's ingest time). It opens every segment the writer creates (or the compact part
// of an older segment) and repeats every anchor_interval_bytes. A reader that lost the
// segment's first anchor to damage finds the next one (full frames can be searched for without
// a context). An anchor is never returned as a record.
//
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
#include <string>
#include <string_view>
#include <vector>

#include "core/bytes.h"

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
    /// False for a message (or malformed record) of a message the broker never sends again
    /// (QoS0): no redelivery can repeat it. True for every record of a frame written before
    /// 2026-12-02, and for ticks.
    bool redeliverable = true;
};

/// The separator of reason and topic in a malformed record's topic field.
inline constexpr char malformed_reason_separator = '\t';

/// An ingest time not known: of a segment that holds no record yet, or whose first record
/// cannot be read; of a reader that has read nothing yet. Below every real one.
inline constexpr int64_t ingest_ms_unknown = INT64_MIN;

inline constexpr uint64_t frame_header_bytes = 8;  // u32 body length, u32 CRC (full frame)
inline constexpr uint64_t body_prefix_bytes = 11;  // u8 type, i64 ingest_ms, u16 topic length
/// An anchor: a full frame whose payload is the format byte, the base time and zeros up to a
/// body of 128 bytes. Its first two bytes (0x80 0x00, the length) are a varint no compact frame
/// can start with (varints are canonical: none ends in a zero byte after the first), so that a
/// compact segment tells an anchor from a compact frame by them.
inline constexpr uint64_t anchor_body_bytes = 128;
inline constexpr uint64_t anchor_frame_bytes = frame_header_bytes + anchor_body_bytes;
inline constexpr uint64_t anchor_payload_bytes = anchor_body_bytes - body_prefix_bytes;
inline constexpr uint8_t compact_format = 2;
/// A compact frame's body before its topic and payload: type, ingest delta (any varint), topic
/// id and topic length (varints of up to 3 bytes each).
inline constexpr uint64_t compact_body_head_bytes_max = 1 + core::bytes::varint_bytes_max + 3 + 3;
/// A compact frame's smallest: 1-byte length, CRC, type, 1-byte ingest delta, 1-byte id.
inline constexpr uint64_t compact_frame_bytes_min = 1 + 4 + 1 + 1 + 1;
/// The writer repeats the anchor (and the topic definitions after it) at least this often.
inline constexpr uint64_t anchor_interval_bytes = uint64_t{4} << 20;
/// A segment's topic dictionary holds at most this many topics and topic bytes; the writer
/// starts a new segment rather than exceed either, and a reader refuses a larger id.
inline constexpr uint64_t topic_ids_max = 1u << 16;
inline constexpr uint64_t topic_dictionary_bytes_max = uint64_t{4} << 20;
inline constexpr uint64_t record_body_bytes_max = uint64_t{16} << 20;
/// What append() takes of topic and payload together: the body less its head, with room to
/// spare (a compact head is at most compact_body_head_bytes_max).
inline constexpr uint64_t record_topic_payload_bytes_max = record_body_bytes_max - 32;
static_assert(record_topic_payload_bytes_max + compact_body_head_bytes_max <=
                  record_body_bytes_max &&
              record_topic_payload_bytes_max + 11 <= record_body_bytes_max);  // 11: a full head
inline constexpr uint64_t topic_bytes_max = 65535;
/// A malformed record keeps at most this much of the payload: enough to see what was wrong,
/// while a flood of oversized junk cannot fill the log at full size.
inline constexpr uint64_t malformed_payload_bytes_max = 4096;

/// A full frame's size.
inline constexpr uint64_t frame_bytes(uint64_t topic_bytes, uint64_t payload_bytes) {
    return frame_header_bytes + body_prefix_bytes + topic_bytes + payload_bytes;
}

/// A reader's copy of a segment's topic dictionary: every topic's bytes in one block, and for
/// each id where its topic lies there. Issue 31: kept as one heap string a topic, ten thousand
/// topics lay scattered among the engine's allocations, more so each segment over a month, and
/// the first byte of every record's topic was a cache miss.
/// Limits: at most topic_ids_max ids and topic_dictionary_bytes_max bytes of topics (a define
/// past either is refused); a topic given again to an id with other bytes (never written by the
/// writer: damage or a forged segment) leaves its old bytes in the block until the block holds
/// twice that bound, when it is rebuilt of the topics still named. Memory: the block (grown by
/// doubling, at most block_bytes_max) and 8 bytes an id (by doubling, at most 1 MiB): 9.1 MiB.
class TopicTable {
  public:
    /// The topic `id` names, viewing the table: valid until the next define() or clear().
    /// nullopt for an id not defined.
    std::optional<std::string_view> find(uint64_t id) const {
        if (id == 0 || id > slots_.size() || slots_[id - 1].size == undefined) return std::nullopt;
        const Slot& slot = slots_[id - 1];
        return std::string_view(bytes_.data() + slot.offset, slot.size);
    }
    /// Gives `id` (1 to topic_ids_max) its topic; false, changing nothing, when that would take
    /// the topics named past topic_dictionary_bytes_max or the id past topic_ids_max.
    bool define(uint64_t id, std::string_view topic);
    /// One past the highest id defined (ids below it may be undefined).
    size_t ids() const { return slots_.size(); }
    /// The bytes of the topics named.
    uint64_t bytes() const { return named_bytes_; }
    /// Calls f(id, topic) for every id defined, in order.
    template <class F>
    void for_each(F&& f) const {
        for (size_t i = 0; i < slots_.size(); ++i)
            if (slots_[i].size != undefined)
                f(static_cast<uint32_t>(i + 1),
                  std::string_view(bytes_.data() + slots_[i].offset, slots_[i].size));
    }
    /// The memory it holds (its block's capacity and its ids').
    uint64_t memory_bytes() const { return bytes_.capacity() + slots_.capacity() * sizeof(Slot); }
    /// Empty, keeping its memory for the next segment.
    void clear() {
        slots_.clear();
        bytes_.clear();
        named_bytes_ = 0;
    }

  private:
    static constexpr uint32_t undefined = UINT32_MAX;
    static constexpr uint64_t block_bytes_max = 2 * topic_dictionary_bytes_max + topic_bytes_max;
    struct Slot {
        uint32_t offset = 0;
        uint32_t size = undefined;
    };

    std::vector<Slot> slots_;  // slots_[id - 1]
    std::string bytes_;
    uint64_t named_bytes_ = 0;
};

/// What a reader knows of the segment it is in, to decode compact frames: whether an anchor was
/// read (and its base time), and the topic dictionary so far. Empty at a segment's start.
struct FrameContext {
    bool compact = false;
    int64_t base_ms = 0;
    TopicTable topics;

    void clear() {
        compact = false;
        base_ms = 0;
        topics.clear();
    }
};

enum class FrameStatus {
    ok,
    incomplete,     // fewer bytes than the header or the body it announces
    bad_length,     // the length field is outside [body_prefix_bytes, record_body_bytes_max]
    bad_crc,        // complete, but the CRC or the topic length does not match the body
    bad_type,       // the CRC matches but the type is unknown: written by a newer version
    unknown_topic,  // a valid compact frame whose topic id was not defined before it (its
                    // definition was lost to damage, or the reader skipped it)
};

/// Whether the bytes are a whole valid frame: ok, or a message whose topic id is not known
/// (its bytes are a frame; the record is lost with its definition).
inline bool frame_decodes(FrameStatus status) {
    return status == FrameStatus::ok || status == FrameStatus::unknown_topic;
}

/// What else decode_frame() found in a frame that decodes ok.
struct FrameInfo {
    bool anchor = false;         // an anchor, not a record
    int64_t base_ms = 0;         // an anchor's base time
    uint32_t topic_id = 0;       // a compact message's topic id; 0 otherwise
    bool defines_topic = false;  // a message_def: topic_id names Record::topic from here on
};

/// What the first frame_header_bytes + body_prefix_bytes of a frame say, read without the CRC.
struct FrameHead {
    uint64_t frame_bytes = 0;
    int64_t ingest_ms = 0;
};

/// The bytes of a frame head peek_frame_head() needs: enough for either layout.
inline constexpr uint64_t frame_head_peek_bytes = frame_header_bytes + body_prefix_bytes;

/// The head of the frame at the start of `bytes` if its length is within bounds, its type known
/// and its topic fits its body: the cheap filter applied at every byte when a scan searches for
/// the next frame after damage, before it pays for a CRC. In a compact context both layouts are
/// tried (an anchor is a full frame). nullopt when it fails or `bytes` is shorter than a head.
std::optional<FrameHead> peek_frame_head(std::string_view bytes, const FrameContext& context);

/// The CRC seed of a compact frame at `offset`.
inline uint32_t frame_crc_seed(uint64_t offset) {
    return static_cast<uint32_t>(offset ^ (offset >> 32));
}

/// Decodes the frame at the start of `bytes`, which lies at log offset `offset`, in `context`
/// (full frames only until an anchor was applied to it). On ok, fills out's type, ingest_ms, topic,
/// payload and reason (views into `bytes`, or into the context's dictionary for a message_ref;
/// offsets are the caller's) and info. frame_bytes_out is set whenever the length field could be
/// read (every status but a short header). The context is not changed: apply_frame() does that.
FrameStatus decode_frame(std::string_view bytes, const FrameContext& context, uint64_t offset,
                         Record& out, uint64_t& frame_bytes_out, FrameInfo& info);

/// What a frame that decoded ok teaches the context: an anchor makes it compact with its base;
/// a message_def defines its topic id.
void apply_frame(FrameContext& context, const Record& record, const FrameInfo& info);

/// For the writer (and tests): n little-endian bytes of v. Varints: core/bytes.h.
void store_le(char* p, uint64_t v, int n);

}  // namespace tidemark::log
