#include "core/emission.h"

#include "core/bytes.h"

namespace tidemark::core {

std::string_view emission_kind_name(EmissionKind kind) {
    switch (kind) {
        case EmissionKind::final_result:
            return "final";
        case EmissionKind::update:
            return "update";
        case EmissionKind::retract:
            return "retract";
    }
    return "final";
}

std::string_view closed_by_name(ClosedBy closed_by) {
    switch (closed_by) {
        case ClosedBy::watermark:
            return "watermark";
        case ClosedBy::idle:
            return "idle";
        case ClosedBy::late:
            return "late";
        case ClosedBy::merge:
            return "merge";
    }
    return "watermark";
}

namespace {

// FNV-1a over a length-prefixed encoding (so ("ab","c") and ("a","bc") differ), finished with
// the splitmix64 mixer so that nearby inputs spread over the whole 64 bits. Stable across
// platforms and releases: ids are how upstream dedupes, so this must never change.
uint64_t fnv1a(uint64_t h, std::string_view s) {
    for (unsigned char c : s) {
        h ^= c;
        h *= 0x100000001b3ULL;
    }
    return h;
}

uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

}  // namespace

uint64_t emission_id(std::string_view node, std::string_view pipeline, std::string_view key,
                     int64_t start_ms, int64_t end_ms, uint32_t revision, EmissionKind kind) {
    std::string buf;
    buf.reserve(64 + node.size() + pipeline.size() + key.size());
    bytes::put_str(buf, node);
    bytes::put_str(buf, pipeline);
    bytes::put_str(buf, key);
    bytes::put_i64(buf, start_ms);
    bytes::put_i64(buf, end_ms);
    bytes::put_u32(buf, revision);
    buf.push_back(static_cast<char>(kind));
    return mix(fnv1a(0xcbf29ce484222325ULL, buf));
}

}  // namespace tidemark::core
