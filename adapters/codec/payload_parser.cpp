// One parse per message, shared by every pipeline that reads it (issue 31), in memory bounded
// after a large message (issue 25, finding 5).
#include <malloc.h>

#include <string>

#include "adapters/codec/decoder.h"
#include "adapters/codec/payload_parser_impl.h"

namespace tidemark::codec {
namespace {

// Large parsers' buffers must go back to the kernel when freed, or bounding the parser bounds
// nothing: with glibc's default (dynamic) policy, the first free of a large mmap'ed block raises
// malloc's mmap threshold to that block's size (up to 32 MiB), so the next large parser's
// buffers come from the heap, which is trimmed only when its free top exceeds twice that
// (measured: a second 4 MiB message left 20 MiB resident). Setting the threshold explicitly
// turns that adjustment off (mallopt(3)): blocks above 128 KiB (glibc's default threshold) are
// always mmap'ed, and unmapped when freed. Process-wide, once, before the first parse.
// malloc_trim after each large message would do it too, but it walks every free chunk of the
// heap: 77 ms on a 200 MB heap with a million holes, on the engine thread.
[[maybe_unused]] const bool malloc_threshold_pinned = [] {
#if defined(__GLIBC__)
    return mallopt(M_MMAP_THRESHOLD, 128 * 1024) == 1;
#else
    return true;
#endif
}();

}  // namespace

PayloadParser::PayloadParser() : impl_(std::make_unique<Impl>()) {}
PayloadParser::~PayloadParser() = default;
PayloadParser::PayloadParser(PayloadParser&&) noexcept = default;
PayloadParser& PayloadParser::operator=(PayloadParser&&) noexcept = default;

DecodeStatus PayloadParser::parse(std::string_view payload) {
    Impl& p = *impl_;
    ++p.parses;
    p.large.reset();
    p.released = false;
    p.payload = payload;
    p.reason.clear();
    simdjson::dom::parser* parser = &p.retained;
    if (payload.size() > payload_retained_bytes_max) {
        // A parser sized for this document alone, so that its memory goes with it.
        p.large = std::make_unique<simdjson::dom::parser>();
        parser = p.large.get();
    }
    // realloc_if_needed: the parser copies the payload into its own padded buffer, reused (and
    // grown only for a larger payload) from one call to the next.
    auto parsed = parser->parse(payload.data(), payload.size(), true);
    if (parsed.error()) {
        p.large.reset();
        if (parsed.error() == simdjson::UTF8_ERROR) {
            p.reason.assign("the payload is not valid UTF-8");
            return p.status = DecodeStatus::not_utf8;
        }
        p.reason.assign("the payload is not valid JSON: ");
        p.reason.append(simdjson::error_message(parsed.error()));
        return p.status = DecodeStatus::malformed_json;
    }
    p.root = parsed.value_unsafe();
    if (!p.root.is_object()) {
        p.large.reset();
        p.reason.assign("the payload is ").append(json_type_name(p.root.type()));
        p.reason.append(", not a JSON object");
        return p.status = DecodeStatus::not_an_object;
    }
    return p.status = DecodeStatus::ok;
}

DecodeStatus PayloadParser::status() const noexcept {
    return impl_->status;
}

const std::string& PayloadParser::reason() const noexcept {
    return impl_->reason;
}

void PayloadParser::release() noexcept {
    // Whichever parser held it, the document is not to be read again: a decode after release
    // is a programmer error (Decoder::decode asserts), also when it would happen to work.
    impl_->released = true;
    impl_->large.reset();
}

size_t PayloadParser::capacity_bytes() const noexcept {
    return impl_->retained.capacity() + (impl_->large ? impl_->large->capacity() : 0);
}

uint64_t PayloadParser::parses() const noexcept {
    return impl_->parses;
}

}  // namespace tidemark::codec
