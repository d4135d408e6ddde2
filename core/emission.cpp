#include "core/emission.h"

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

// FNV-1a over the little-endian bytes of v, as bytes::put_u64 / put_u32 lay them out.
uint64_t fnv1a_le(uint64_t h, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) {
        h ^= static_cast<unsigned char>(v >> (8 * i));
        h *= 0x100000001b3ULL;
    }
    return h;
}

uint64_t fnv1a_str(uint64_t h, std::string_view s) {
    return fnv1a(fnv1a_le(h, s.size(), 4), s);
}

uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

}  // namespace

// The hash runs over the length-prefixed encoding (bytes::put_str, put_i64, put_u32, then the
// kind byte) without building it: FNV-1a is sequential, so the (node, pipeline) part is hashed
// once per pipeline and continued per emission.
uint64_t emission_id_seed(std::string_view node, std::string_view pipeline) {
    return fnv1a_str(fnv1a_str(0xcbf29ce484222325ULL, node), pipeline);
}

uint64_t emission_id_from_seed(uint64_t seed, std::string_view key, int64_t start_ms,
                               int64_t end_ms, uint32_t revision, EmissionKind kind) {
    uint64_t h = fnv1a_str(seed, key);
    h = fnv1a_le(h, static_cast<uint64_t>(start_ms), 8);
    h = fnv1a_le(h, static_cast<uint64_t>(end_ms), 8);
    h = fnv1a_le(h, revision, 4);
    h = fnv1a_le(h, static_cast<uint8_t>(kind), 1);
    return mix(h);
}

uint64_t emission_id(std::string_view node, std::string_view pipeline, std::string_view key,
                     int64_t start_ms, int64_t end_ms, uint32_t revision, EmissionKind kind) {
    return emission_id_from_seed(emission_id_seed(node, pipeline), key, start_ms, end_ms, revision,
                                 kind);
}

}  // namespace tidemark::core
