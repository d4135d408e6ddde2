#include "adapters/log/record.h"

#include <algorithm>

#include "adapters/log/crc32c.h"
#include "core/bytes.h"

namespace tidemark::log {
namespace {

// Compact body types (record.h). 4 is the anchor's, a full frame's type.
enum : uint8_t {
    compact_message_ref = 1,
    compact_tick = 2,
    compact_malformed = 3,
    anchor_type = 4,
    compact_message_def = 5,
    // As message_ref, message_def and malformed, of a message that is never redelivered.
    compact_message_ref_once = 6,
    compact_message_def_once = 7,
    compact_malformed_once = 8,
    compact_type_last = compact_malformed_once,
};

uint64_t load_le(const char* p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; ++i)
        v |= uint64_t{static_cast<unsigned char>(p[i])} << (8 * i);
    return v;
}

// A varint from the front of `bytes` (core/bytes.h), consumed if it is canonical (no zero last
// byte after the first: record.h) and at most max_bytes long; nullopt otherwise, or if it does
// not end within them.
std::optional<uint64_t> take_varint(std::string_view& bytes, size_t max_bytes) {
    std::string_view rest = bytes;
    uint64_t v = 0;
    if (!core::bytes::get_varint(rest, v)) return std::nullopt;
    const size_t n = bytes.size() - rest.size();
    if (n > max_bytes || (n > 1 && bytes[n - 1] == 0)) return std::nullopt;
    bytes = rest;
    return v;
}

// The first two bytes of an anchor (the only full frame a compact segment holds), which no
// compact frame has (record.h).
bool looks_like_anchor(std::string_view bytes) {
    static_assert(anchor_body_bytes >= 0x80 && anchor_body_bytes <= 0xff);
    return bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == anchor_body_bytes &&
           bytes[1] == 0;
}

void split_malformed(Record& out) {
    // Without a separator (not written by LogWriter::append_malformed) it is all reason.
    const size_t separator = out.topic.find(malformed_reason_separator);
    out.reason = out.topic.substr(0, separator);
    out.topic =
        separator == std::string_view::npos ? std::string_view{} : out.topic.substr(separator + 1);
}

std::optional<FrameHead> peek_full_head(std::string_view bytes) {
    if (bytes.size() < frame_header_bytes + body_prefix_bytes) return std::nullopt;
    uint64_t body_bytes = load_le(bytes.data(), 4);
    if (body_bytes < body_prefix_bytes || body_bytes > record_body_bytes_max) return std::nullopt;
    const char* body = bytes.data() + frame_header_bytes;
    auto type = static_cast<unsigned char>(body[0]);
    if (type < 1 || type > anchor_type) return std::nullopt;
    if (body_prefix_bytes + load_le(body + 9, 2) > body_bytes) return std::nullopt;
    return FrameHead{frame_header_bytes + body_bytes, static_cast<int64_t>(load_le(body + 1, 8))};
}

FrameStatus decode_full(std::string_view bytes, uint64_t offset, Record& out,
                        uint64_t& frame_bytes_out, FrameInfo& info) {
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
    if (type < 1 || type > anchor_type) return FrameStatus::bad_type;
    out.ingest_ms = static_cast<int64_t>(load_le(body.data() + 1, 8));
    out.topic = body.substr(body_prefix_bytes, topic_bytes);
    out.payload = body.substr(body_prefix_bytes + topic_bytes);
    out.reason = {};
    out.redeliverable = true;
    info = {};
    if (type == anchor_type) {
        // An anchor of another format, or with a topic, was written by a newer version.
        if (!out.topic.empty() || out.payload.size() != anchor_payload_bytes ||
            static_cast<uint8_t>(out.payload[0]) != compact_format ||
            out.payload.find_first_not_of('\0', 17) != std::string_view::npos) {
            return FrameStatus::bad_type;
        }
        info.base_ms = static_cast<int64_t>(load_le(out.payload.data() + 1, 8));
        // A base after the anchor's own time would let records run before it: not written so.
        // An anchor away from the offset it holds was copied there: damage.
        if (info.base_ms > out.ingest_ms || load_le(out.payload.data() + 9, 8) != offset) {
            return FrameStatus::bad_crc;
        }
        out.type = RecordType::tick;
        out.topic = out.payload = {};
        info.anchor = true;
        return FrameStatus::ok;
    }
    out.type = static_cast<RecordType>(type);
    if (out.type == RecordType::malformed) split_malformed(out);
    return FrameStatus::ok;
}

// The compact frame's length and body bounds: the length varint, its value in bounds.
struct CompactHead {
    uint64_t length_bytes = 0;
    uint64_t body_bytes = 0;
};

// nullopt with frame_bytes_out 0: too few bytes to read the length; with frame_bytes_out set
// to UINT64_MAX: the length is out of bounds.
std::optional<CompactHead> read_compact_length(std::string_view bytes) {
    std::string_view rest = bytes;
    auto body_bytes = take_varint(rest, 4);
    if (!body_bytes) return std::nullopt;
    return CompactHead{bytes.size() - rest.size(), *body_bytes};
}

// base + delta as an ingest time, if it fits an int64.
std::optional<int64_t> add_delta(int64_t base, uint64_t delta) {
    const uint64_t room =
        base >= 0 ? static_cast<uint64_t>(INT64_MAX - base)
                  : static_cast<uint64_t>(INT64_MAX) + static_cast<uint64_t>(-(base + 1)) + 1;
    if (delta > room) return std::nullopt;
    return static_cast<int64_t>(static_cast<uint64_t>(base) + delta);
}

bool compact_length_ok(uint64_t body_bytes) {
    return body_bytes >= 2 && body_bytes <= record_body_bytes_max;
}

}  // namespace

void store_le(char* p, uint64_t v, int n) {
    for (int i = 0; i < n; ++i)
        p[i] = static_cast<char>(v >> (8 * i));
}

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

std::optional<FrameHead> peek_frame_head(std::string_view bytes, const FrameContext& context) {
    if (!context.compact || looks_like_anchor(bytes)) return peek_full_head(bytes);
    auto length = read_compact_length(bytes);
    if (!length || !compact_length_ok(length->body_bytes)) return std::nullopt;
    if (bytes.size() <= length->length_bytes + 4) return std::nullopt;
    std::string_view body = bytes.substr(length->length_bytes + 4);
    const auto type = static_cast<unsigned char>(body[0]);
    if (type < compact_message_ref || type > compact_type_last || type == anchor_type) {
        return std::nullopt;
    }
    body.remove_prefix(1);
    auto delta = take_varint(body, 10);
    auto ingest = delta ? add_delta(context.base_ms, *delta) : std::nullopt;
    if (!ingest) return std::nullopt;
    return FrameHead{length->length_bytes + 4 + length->body_bytes, *ingest};
}

FrameStatus decode_frame(std::string_view bytes, const FrameContext& context, uint64_t offset,
                         Record& out, uint64_t& frame_bytes_out, FrameInfo& info) {
    if (!context.compact || looks_like_anchor(bytes)) {
        return decode_full(bytes, offset, out, frame_bytes_out, info);
    }
    frame_bytes_out = 0;
    auto length = read_compact_length(bytes);
    if (!length) {
        // A varint that has not ended: too short, or longer than any valid length.
        return bytes.size() < 4 ? FrameStatus::incomplete : FrameStatus::bad_length;
    }
    if (!compact_length_ok(length->body_bytes)) return FrameStatus::bad_length;
    const uint64_t head = length->length_bytes + 4;
    frame_bytes_out = head + length->body_bytes;
    if (bytes.size() < frame_bytes_out) return FrameStatus::incomplete;
    auto crc = static_cast<uint32_t>(load_le(bytes.data() + length->length_bytes, 4));
    std::string_view body = bytes.substr(head, length->body_bytes);
    if (crc32c(frame_crc_seed(offset), body) != crc) return FrameStatus::bad_crc;
    const auto type = static_cast<unsigned char>(body[0]);
    std::string_view rest = body.substr(1);
    auto delta = take_varint(rest, 10);
    auto ingest = delta ? add_delta(context.base_ms, *delta) : std::nullopt;
    // Fields that do not fit the body the CRC vouches for: a writer's bug or a forged frame.
    if (!ingest) return FrameStatus::bad_crc;
    out.ingest_ms = *ingest;
    out.reason = {};
    out.topic = {};
    out.redeliverable = type < compact_message_ref_once;
    info = {};
    switch (type) {
        case compact_tick:
        case compact_malformed:
        case compact_malformed_once: {
            auto field = take_varint(rest, 3);
            if (!field || *field > topic_bytes_max || *field > rest.size()) {
                return FrameStatus::bad_crc;
            }
            out.type = type == compact_tick ? RecordType::tick : RecordType::malformed;
            out.topic = rest.substr(0, *field);
            out.payload = rest.substr(*field);
            if (out.type == RecordType::malformed) split_malformed(out);
            return FrameStatus::ok;
        }
        case compact_message_ref:
        case compact_message_def:
        case compact_message_ref_once:
        case compact_message_def_once: {
            auto id = take_varint(rest, 3);
            if (!id || *id == 0 || *id > topic_ids_max) return FrameStatus::bad_crc;
            out.type = RecordType::message;
            info.topic_id = static_cast<uint32_t>(*id);
            if (type == compact_message_def || type == compact_message_def_once) {
                auto topic = take_varint(rest, 3);
                if (!topic || *topic > topic_bytes_max || *topic > rest.size()) {
                    return FrameStatus::bad_crc;
                }
                info.defines_topic = true;
                out.topic = rest.substr(0, *topic);
                out.payload = rest.substr(*topic);
                return FrameStatus::ok;
            }
            out.payload = rest;
            const std::optional<std::string_view> topic = context.topics.find(*id);
            if (!topic) return FrameStatus::unknown_topic;
            out.topic = *topic;
            return FrameStatus::ok;
        }
        default:
            return FrameStatus::bad_type;
    }
}

void apply_frame(FrameContext& context, const Record& record, const FrameInfo& info) {
    if (info.anchor) {
        // The base is the segment's, the same in all its anchors; the dictionary stays (ids
        // keep their topics for the whole segment).
        context.compact = true;
        context.base_ms = info.base_ms;
        return;
    }
    if (!info.defines_topic) return;
    // Bounded like the writer's dictionary: a reader keeps no more than a writer would write.
    context.topics.define(info.topic_id, record.topic);
}

bool TopicTable::define(uint64_t id, std::string_view topic) {
    if (id == 0 || id > topic_ids_max || topic.size() > topic_bytes_max) return false;
    const std::optional<std::string_view> old = find(id);
    if (old && *old == topic) return true;
    const uint64_t named = named_bytes_ - (old ? old->size() : 0) + topic.size();
    if (named > topic_dictionary_bytes_max) return false;
    if (bytes_.size() + topic.size() > 2 * topic_dictionary_bytes_max) {
        // Only topics given again with other bytes leave bytes no id names: rebuilt once they
        // fill as much as the bound, so that each define costs its own bytes, amortised.
        std::string kept;
        kept.reserve(named_bytes_);
        for (Slot& slot : slots_) {
            if (slot.size == undefined) continue;
            const auto at = static_cast<uint32_t>(kept.size());
            kept.append(bytes_, slot.offset, slot.size);
            slot.offset = at;
        }
        bytes_.swap(kept);
    }
    if (bytes_.size() + topic.size() > bytes_.capacity()) {
        // Doubling, as a string grows, but never past what the block may hold.
        bytes_.reserve(std::min<uint64_t>(
            std::max<uint64_t>(2 * bytes_.capacity(), bytes_.size() + topic.size()),
            block_bytes_max));
    }
    if (id > slots_.size()) slots_.resize(id);
    slots_[id - 1] =
        Slot{static_cast<uint32_t>(bytes_.size()), static_cast<uint32_t>(topic.size())};
    bytes_.append(topic);
    named_bytes_ = named;
    return true;
}

}  // namespace tidemark::log
