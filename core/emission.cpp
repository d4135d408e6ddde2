#include "core/emission.h"

#include "core/hash.h"

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

// FNV-1a over the length-prefixed encoding (bytes::put_str, put_i64, put_u32, then the kind
// byte), computed without building it, finished with the splitmix64 mixer so that nearby inputs
// spread over the whole 64 bits. Ids are how upstream dedupes: this must never change
// (tests/core/hash_test.cpp holds golden values). FNV-1a is sequential, so the (node, pipeline)
// part is hashed once per pipeline and continued per emission.
// The version joined the id with pipeline versions; it is hashed only when there is one, so that
// the ids of a definition without a version (tests that predate versions) stayed as they were.
uint64_t emission_id_seed(std::string_view node, std::string_view pipeline,
                          std::string_view version) {
    const uint64_t h = hash::fnv1a_str(hash::fnv1a_str(hash::fnv_offset, node), pipeline);
    return version.empty() ? h : hash::fnv1a_str(h, version);
}

uint64_t emission_id_from_seed(uint64_t seed, std::string_view key, int64_t start_ms,
                               int64_t end_ms, uint32_t revision, EmissionKind kind) {
    uint64_t h = hash::fnv1a_str(seed, key);
    h = hash::fnv1a_le(h, static_cast<uint64_t>(start_ms), 8);
    h = hash::fnv1a_le(h, static_cast<uint64_t>(end_ms), 8);
    h = hash::fnv1a_le(h, revision, 4);
    h = hash::fnv1a_le(h, static_cast<uint8_t>(kind), 1);
    return hash::mix(h);
}

uint64_t emission_id(std::string_view node, std::string_view pipeline, std::string_view key,
                     int64_t start_ms, int64_t end_ms, uint32_t revision, EmissionKind kind) {
    return emission_id_from_seed(emission_id_seed(node, pipeline), key, start_ms, end_ms, revision,
                                 kind);
}

// After the seed, a tag that cannot begin a result's continuation: a result hashes its key's
// u32 length first, and no key is 2^32 - 1 bytes long.
uint64_t late_report_id(uint64_t seed, int64_t start_ms, int64_t end_ms, int64_t since_ms,
                        uint64_t too_late) {
    uint64_t h = hash::fnv1a_le(seed, 0xffff'ffffU, 4);
    h = hash::fnv1a(h, "late");
    h = hash::fnv1a_le(h, static_cast<uint64_t>(start_ms), 8);
    h = hash::fnv1a_le(h, static_cast<uint64_t>(end_ms), 8);
    h = hash::fnv1a_le(h, static_cast<uint64_t>(since_ms), 8);
    h = hash::fnv1a_le(h, too_late, 8);
    return hash::mix(h);
}

}  // namespace tidemark::core
