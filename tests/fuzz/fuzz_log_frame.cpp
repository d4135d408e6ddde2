// Any bytes as a log frame: decoding never reads outside them, a frame that decodes ok lies
// inside them with its topic and payload, and the cheap filter used while searching past damage
// never rejects a frame that decodes ok.
#include <cstdint>
#include <string_view>

#include "adapters/log/record.h"
#include "fuzz_input.h"

using namespace tidemark;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string_view bytes(reinterpret_cast<const char*>(data), size);
    log::Record record;
    uint64_t frame_bytes = 0;
    const log::FrameStatus status = log::decode_frame(bytes, record, frame_bytes);
    const auto head = log::peek_frame_head(bytes);
    if (status == log::FrameStatus::ok) {
        TM_FUZZ_CHECK(frame_bytes <= bytes.size());
        TM_FUZZ_CHECK(frame_bytes >= log::frame_header_bytes + log::body_prefix_bytes);
        // A malformed record's topic field holds its reason, then a separator and the topic
        // (or only a reason, without the separator).
        const uint64_t topic_field =
            frame_bytes - log::frame_header_bytes - log::body_prefix_bytes - record.payload.size();
        const uint64_t carried = record.reason.size() + record.topic.size();
        if (record.type == log::RecordType::malformed)
            TM_FUZZ_CHECK(topic_field == carried || topic_field == carried + 1);
        else
            TM_FUZZ_CHECK(record.reason.empty() && topic_field == record.topic.size());
        TM_FUZZ_CHECK(topic_field <= log::topic_bytes_max);
        // Views inside the frame; an empty one may point anywhere (or nowhere).
        const auto inside = [&](std::string_view v) {
            return v.empty() ||
                   (v.data() >= bytes.data() && v.data() + v.size() <= bytes.data() + frame_bytes);
        };
        TM_FUZZ_CHECK(inside(record.topic) && inside(record.payload) && inside(record.reason));
        TM_FUZZ_CHECK(head.has_value());
        TM_FUZZ_CHECK(head->frame_bytes == frame_bytes);
        TM_FUZZ_CHECK(head->ingest_ms == record.ingest_ms);
    }
    if (status == log::FrameStatus::bad_length) TM_FUZZ_CHECK(!head.has_value());
    return 0;
}
