#include "adapters/lmdb/row_codec.h"

#include <bit>
#include <cstring>

#include "adapters/lmdb/store.h"
#include "core/bytes.h"

namespace tidemark::lmdb::detail {

namespace bytes = core::bytes;

namespace {

constexpr uint8_t checkpoint_encoding = 1;
// The first byte of a side row with columns. Rows written before had no tag: their value was the
// JSON record, and JSON text never begins with a NUL byte (only with whitespace or a value).
constexpr char side_row_columns_tag = '\0';
// core::bytes's sortable encoding is big-endian with the sign bit flipped: flipping it first
// gives plain big-endian, the order of unsigned seqs and ids.
constexpr uint64_t sign_bit = uint64_t{1} << 63;

// The kind field of a version record (OutboxRow::version_record), since format 4: not an
// emission kind, so no build that predates it reads one as a result.
constexpr uint32_t version_record_kind = 16;
// The kind field of a health record (OutboxRow::health_record), since format 8.
constexpr uint32_t health_record_kind = 17;
// A too-late tally (OutboxRow::late_record), since format 8; its flags byte is followed by
// late_since_ms.
constexpr uint32_t late_record_kind = 18;

// The compaction index key of every health row: one per outbox (the store is one node's). It
// starts where a result's key has its pipeline name's u32 length, with a length no name can
// have (4 GiB), so it never meets a result's key.
constexpr std::string_view health_window_key =
    "\xff\xff\xff\xff"
    "health";

bool known_emission_kind(uint32_t kind) {
    return kind <= static_cast<uint32_t>(core::EmissionKind::retract) ||
           kind == version_record_kind || kind == health_record_kind || kind == late_record_kind;
}

// Big-endian: put_i64_sortable's bytes for v ^ sign_bit, without a string.
void put_u64_key(unsigned char* out, uint64_t v) {
    if constexpr (std::endian::native == std::endian::little) v = std::byteswap(v);
    std::memcpy(out, &v, 8);
}

}  // namespace

SeqKey seq_key(uint64_t v) {
    SeqKey k;
    put_u64_key(k.bytes.data(), v);
    return k;
}

std::string u64_key(uint64_t v) {
    return std::string(seq_key(v).view());
}

uint64_t u64_of_key(std::string_view key) {
    TM_ASSERT(key.size() == 8);
    int64_t v = 0;
    bytes::get_i64_sortable(key, v);
    return static_cast<uint64_t>(v) ^ sign_bit;
}

std::string u64_value(uint64_t v) {
    std::string out;
    bytes::put_u64(out, v);
    return out;
}

std::string encode_outbox_row(const OutboxRow& row) {
    std::string out(outbox_row_bytes(row), '\0');
    encode_outbox_row(row, out.data());
    return out;
}

size_t outbox_row_bytes(const OutboxRow& row) {
    return 8 + 4 + row.pipeline.size() + 4 + row.key.size() + 8 + 8 + 4 + 4 + 4 +
           row.payload.size() + 8 + 4 + row.version.size() + 1 + (row.late_record ? 8 : 0);
}

// id u64, pipeline str, key str, window start i64, end i64, revision u32, kind u32 (0 final,
// 1 update, 2 retract: core::EmissionKind's values; 16 a version record; 17 a health record;
// 18 a too-late tally (17 and 18 since format 8)), payload str, enqueued_ms i64 (format 2),
// version str and flags u8 (format 7: 1 = after_retract), then for a too-late tally its since
// i64 (format 8).
void encode_outbox_row(const OutboxRow& row, char* out) {
    TM_ASSERT(row.pipeline.size() <= UINT32_MAX && row.key.size() <= UINT32_MAX &&
              row.payload.size() <= UINT32_MAX && row.version.size() <= UINT32_MAX);
    char* p = bytes::put_u64_at(out, row.id);
    p = bytes::put_str_at(p, row.pipeline);
    p = bytes::put_str_at(p, row.key);
    p = bytes::put_u64_at(p, static_cast<uint64_t>(row.window_start_ms));
    p = bytes::put_u64_at(p, static_cast<uint64_t>(row.window_end_ms));
    p = bytes::put_u32_at(p, row.revision);
    TM_ASSERT(int{row.version_record} + int{row.health_record} + int{row.late_record} <= 1);
    const auto kind = row.version_record  ? version_record_kind
                      : row.health_record ? health_record_kind
                      : row.late_record   ? late_record_kind
                                          : static_cast<uint32_t>(row.kind);
    TM_ASSERT(known_emission_kind(kind));  // paired with decode_outbox_row's check
    p = bytes::put_u32_at(p, kind);
    p = bytes::put_str_at(p, row.payload);
    p = bytes::put_u64_at(p, static_cast<uint64_t>(row.enqueued_ms));
    p = bytes::put_str_at(p, row.version);
    *p++ = row.after_retract ? 1 : 0;
    if (row.late_record) p = bytes::put_u64_at(p, static_cast<uint64_t>(row.late_since_ms));
    TM_ASSERT(p == out + outbox_row_bytes(row));  // after the writes: a wrong size is a bug
}

bool decode_outbox_row(std::string_view in, uint64_t seq, OutboxRow& row) {
    uint32_t kind = 0;
    row.seq = seq;
    if (!bytes::get_u64(in, row.id) || !get_str(in, row.pipeline) || !get_str(in, row.key) ||
        !bytes::get_i64(in, row.window_start_ms) || !bytes::get_i64(in, row.window_end_ms) ||
        !bytes::get_u32(in, row.revision) || !bytes::get_u32(in, kind) ||
        !get_str(in, row.payload) || !known_emission_kind(kind))
        return false;
    row.version_record = kind == version_record_kind;
    row.health_record = kind == health_record_kind;
    row.late_record = kind == late_record_kind;
    row.late_since_ms = 0;
    row.kind = row.version_record || row.health_record || row.late_record
                   ? core::EmissionKind::final_result
                   : static_cast<core::EmissionKind>(kind);
    row.enqueued_ms = 0;  // a row written by format version 1: unknown
    if (!in.empty() && !bytes::get_i64(in, row.enqueued_ms)) return false;
    row.version.clear();  // a row written before format 7: the payload names it
    row.after_retract = false;
    if (!in.empty()) {
        if (!get_str(in, row.version) || in.size() != (row.late_record ? 9U : 1U) ||
            static_cast<uint8_t>(in[0]) > 1)
            return false;
        row.after_retract = in[0] != 0;
        in.remove_prefix(1);
        if (row.late_record && !bytes::get_i64(in, row.late_since_ms)) return false;
    } else if (row.late_record) {
        return false;  // no format before 8 wrote one
    }
    return in.empty();
}

IdKey id_key(const OutboxRow& row) {
    IdKey k;
    // put_i64_sortable(window_end_ms), then u64_key(id)
    put_u64_key(k.bytes.data(), static_cast<uint64_t>(row.window_end_ms) ^ sign_bit);
    put_u64_key(k.bytes.data() + 8, row.id);
    return k;
}

std::optional<std::string> window_key(const OutboxRow& row) {
    if (row.version_record) return std::nullopt;  // never compacted: each switch is told
    if (row.health_record) return std::string(health_window_key);
    std::string k;
    bytes::put_str(k, row.pipeline);
    bytes::put_str(k, row.version);  // DESIGN.md section 5: per (pipeline, version, key, window)
    bytes::put_str(k, row.key);
    bytes::put_i64_sortable(k, row.window_start_ms);
    bytes::put_i64_sortable(k, row.window_end_ms);
    // A tally's key is longer than any result's of the same (pipeline, version, key): the two
    // never share a window's latest row, and two tallies of one window never replace each other.
    if (row.late_record) {
        k.push_back('L');
        bytes::put_i64_sortable(k, row.late_since_ms);
    }
    if (k.size() > Store::max_key_bytes) return std::nullopt;
    return k;
}

std::string health_key() {
    return std::string(health_window_key);
}

// Encoding byte 1, log offset u64, outbox seq_next u64, checkpoint_ms i64, node_id str (named
// config_fingerprint before issue 15; it always held the node_id).
std::string encode_checkpoint(const CheckpointMeta& meta) {
    std::string out;
    out.push_back(static_cast<char>(checkpoint_encoding));
    bytes::put_u64(out, meta.log_offset);
    bytes::put_u64(out, meta.outbox_seq_next);
    bytes::put_i64(out, meta.checkpoint_ms);
    bytes::put_str(out, meta.node_id);
    return out;
}

bool decode_checkpoint(std::string_view in, CheckpointMeta& meta) {
    if (in.empty() || static_cast<uint8_t>(in[0]) != checkpoint_encoding) return false;
    in.remove_prefix(1);
    return bytes::get_u64(in, meta.log_offset) && bytes::get_u64(in, meta.outbox_seq_next) &&
           bytes::get_i64(in, meta.checkpoint_ms) && get_str(in, meta.node_id) && in.empty();
}

std::string encode_side_position(SidePosition position) {
    std::string out;
    bytes::put_u64(out, position.log_offset);
    bytes::put_u32(out, position.ordinal);
    return out;
}

bool decode_side_position(std::string_view in, SidePosition& position) {
    return bytes::get_u64(in, position.log_offset) && bytes::get_u32(in, position.ordinal) &&
           in.empty();
}

// Tag byte 0, pipeline str, key str, record str (format 3). Without the tag: the record's bytes
// and nothing else (format 2 and older).
std::string encode_side_row(std::string_view pipeline, std::string_view key,
                            std::string_view record) {
    std::string out;
    out.reserve(13 + pipeline.size() + key.size() + record.size());
    out.push_back(side_row_columns_tag);
    bytes::put_str(out, pipeline);
    bytes::put_str(out, key);
    bytes::put_str(out, record);
    return out;
}

bool encode_side_row_without_columns(std::string_view record, std::string& out) {
    if (!record.empty() && record.front() == side_row_columns_tag) return false;
    out.assign(record);
    return true;
}

bool decode_side_row(std::string_view in, uint64_t seq, SideRow& row) {
    row.seq = seq;
    if (in.empty() || in.front() != side_row_columns_tag) {
        row.record.assign(in);
        row.pipeline.clear();
        row.key.clear();
        row.columns_known = false;
        return true;
    }
    in.remove_prefix(1);
    row.columns_known = true;
    return get_str(in, row.pipeline) && get_str(in, row.key) && get_str(in, row.record) &&
           in.empty();
}

}  // namespace tidemark::lmdb::detail
