// Any bytes as a log frame, in the context of a segment's start (full frames) and of a compact
// segment, at one of a few offsets (record.h; the first input byte chooses): decoding never reads
// outside them, a frame that decodes ok lies inside them with its topic and payload (a compact
// message's topic may come from the dictionary), and the cheap filter used while searching past
// damage never rejects a frame that decodes ok. The same bytes as a compressed segment's block
// (zlog_block.h): a header that parses has sizes in bounds, a block that decodes gives exactly
// raw_bytes, and re-encoding those gives a block that parses and decodes to them again.
#include <algorithm>
#include <cstdint>
#include <string_view>

#include <string>

#include "adapters/log/record.h"
#include "adapters/log/zlog_block.h"
#include "fuzz_input.h"

using namespace tidemark;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    log::FrameContext context;
    if ((data[0] & 1) != 0) {
        context.compact = true;
        context.base_ms = (data[0] & 2) != 0 ? 1'764'400'000'000 : -5;
        context.topics.define(1, "sensors/a/telemetry");
        context.topics.define(3, "");
    }
    const std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
    log::Record record;
    uint64_t frame_bytes = 0;
    log::FrameInfo info;
    const uint64_t offset = static_cast<uint64_t>(data[0] >> 2) << 12;
    const log::FrameStatus status =
        log::decode_frame(bytes, context, offset, record, frame_bytes, info);
    const auto head = log::peek_frame_head(bytes, context);
    if (log::frame_decodes(status)) {
        TM_FUZZ_CHECK(frame_bytes <= bytes.size());
        TM_FUZZ_CHECK(frame_bytes >= (context.compact
                                          ? log::compact_frame_bytes_min - 1
                                          : log::frame_header_bytes + log::body_prefix_bytes));
        TM_FUZZ_CHECK(record.topic.size() <= log::topic_bytes_max);
        if (record.type != log::RecordType::malformed) TM_FUZZ_CHECK(record.reason.empty());
        // Views inside the frame or the dictionary; an empty one may point anywhere.
        const auto inside = [&](std::string_view v) {
            if (v.empty()) return true;
            if (v.data() >= bytes.data() && v.data() + v.size() <= bytes.data() + frame_bytes)
                return true;
            bool named = false;
            context.topics.for_each([&](uint32_t, std::string_view topic) {
                named = named || (v.data() == topic.data() && v.size() == topic.size());
            });
            return named;
        };
        TM_FUZZ_CHECK(inside(record.topic) && inside(record.payload) && inside(record.reason));
        TM_FUZZ_CHECK(!info.anchor || (record.topic.empty() && record.payload.empty()));
        TM_FUZZ_CHECK(head.has_value());
        TM_FUZZ_CHECK(head->frame_bytes == frame_bytes);
        TM_FUZZ_CHECK(head->ingest_ms == record.ingest_ms);
        // What a frame teaches the context stays within the dictionary's bounds.
        if (status == log::FrameStatus::ok) {
            log::apply_frame(context, record, info);
            TM_FUZZ_CHECK(context.topics.ids() <= log::topic_ids_max);
            TM_FUZZ_CHECK(context.topics.bytes() <= log::topic_dictionary_bytes_max);
        }
    }
    if (status == log::FrameStatus::bad_length) TM_FUZZ_CHECK(!head.has_value());

    if (const auto block = log::parse_block_header(bytes)) {
        TM_FUZZ_CHECK(block->raw_bytes > 0 && block->raw_bytes <= log::block_raw_bytes_max);
        std::string raw;
        const std::string_view rest = bytes.substr(log::block_header_bytes);
        if (log::decode_block(*block, rest.substr(0, block->stored_bytes), raw)) {
            TM_FUZZ_CHECK(raw.size() == block->raw_bytes);
        }
    }
    // Any bytes round-trip through a block at the offset chosen above.
    std::string encoded;
    const std::string_view raw_in = bytes.substr(0, std::min<size_t>(bytes.size(), 4096));
    if (!raw_in.empty() && log::encode_blocks(raw_in, offset, encoded).has_value()) {
        const auto block = log::parse_block_header(encoded);
        TM_FUZZ_CHECK(block.has_value() && block->first_offset == offset);
        std::string raw;
        TM_FUZZ_CHECK(log::decode_block(
            *block, std::string_view(encoded).substr(log::block_header_bytes), raw));
        TM_FUZZ_CHECK(raw == raw_in);
    }
    return 0;
}
