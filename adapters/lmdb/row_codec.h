// The bytes of every value and key the LMDB store keeps: outbox rows and their keys, the
// compaction index key, the checkpoint meta, side rows and the side high-water. Private to
// adapters/lmdb; pure (no LMDB), so what is on disk is decided in this one place.
//
// Integers are little-endian (core/bytes.h) except in keys, which are big-endian so that LMDB's
// byte order is numeric order. Decoders return false for input that is short, has bytes left
// over or holds a value no writer produces (an unknown emission kind, an unknown tag): the store
// reports that as a damaged row. What each value looked like in older formats is decoded here
// too, and said beside its encoder.
#pragma once

#include <array>
#include <bit>
#include <compare>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "adapters/lmdb/types.h"
#include "core/bytes.h"

namespace tidemark::lmdb::detail {

using core::bytes::get_str;

/// A key of fixed size, built in place: an append builds a seq key and an id key for every row
/// (issue 31), and neither allocates. Ordered as LMDB orders keys (memcmp), compared 8 bytes at
/// a time (a batch's ids are sorted: a byte at a time was a fifth of an append's instructions).
template <size_t N>
struct FixedKey {
    static_assert(N % 8 == 0);
    std::array<unsigned char, N> bytes{};

    std::string_view view() const {
        return std::string_view(reinterpret_cast<const char*>(bytes.data()), N);
    }
    std::strong_ordering operator<=>(const FixedKey& o) const {
        for (size_t i = 0; i < N; i += 8) {
            const uint64_t x = word(i), y = o.word(i);
            if (x != y) return x <=> y;
        }
        return std::strong_ordering::equal;
    }
    bool operator==(const FixedKey&) const = default;

  private:
    // The big-endian word at byte i: numeric order is the bytes' order.
    uint64_t word(size_t i) const {
        uint64_t w;
        std::memcpy(&w, bytes.data() + i, 8);
        if constexpr (std::endian::native == std::endian::little) w = std::byteswap(w);
        return w;
    }
};

/// Seq and id keys: 8 bytes big-endian.
using SeqKey = FixedKey<8>;
SeqKey seq_key(uint64_t v);
/// seq_key's bytes as a string.
std::string u64_key(uint64_t v);
/// The inverse of u64_key; the key must be 8 bytes (asserted: the store writes no other).
uint64_t u64_of_key(std::string_view key);
/// A meta counter: 8 bytes little-endian.
std::string u64_value(uint64_t v);

/// An outbox row's value (its seq is the key). Format 2 appended enqueued_ms; a row without it
/// (format 1) decodes with enqueued_ms = 0.
std::string encode_outbox_row(const OutboxRow& row);
/// The same bytes into memory of outbox_row_bytes(row): LMDB's page, reserved for the row
/// (MDB_RESERVE), so that they are not built aside and copied (issue 31).
void encode_outbox_row(const OutboxRow& row, char* out);
/// The length of a row's value.
size_t outbox_row_bytes(const OutboxRow& row);
bool decode_outbox_row(std::string_view in, uint64_t seq, OutboxRow& row);

/// A row's key in the id index (format 8): its window's end (sortable), then its id. Emissions
/// come out in about window-end order, so a batch's ids land on a few neighbouring pages; keyed
/// by the id alone (a hash, up to format 7) each one dirtied its own page of a tree that grows
/// with every row until a checkpoint prunes it (issue 31). The id is a hash of the window among
/// the rest, so one id has one window end and one key.
using IdKey = FixedKey<16>;
IdKey id_key(const OutboxRow& row);

/// The compaction index key of a row: pipeline, version, key, window; for a health row one key
/// of its own (every health row shares it). nullopt for a version record and when it would
/// exceed LMDB's key limit (such a row is never compacted).
std::optional<std::string> window_key(const OutboxRow& row);
/// The health rows' compaction index key (window_key of any health row).
std::string health_key();

std::string encode_checkpoint(const CheckpointMeta& meta);
bool decode_checkpoint(std::string_view in, CheckpointMeta& meta);

/// The log position of a side record, the unit of the side output's dedupe.
struct SidePosition {
    uint64_t log_offset = 0;
    uint32_t ordinal = 0;
    auto operator<=>(const SidePosition&) const = default;
};
std::string encode_side_position(SidePosition position);
bool decode_side_position(std::string_view in, SidePosition& position);

/// A side row's value with its columns (format 3).
std::string encode_side_row(std::string_view pipeline, std::string_view key,
                            std::string_view record);
/// A side row's value without columns: the record itself, as format 2 and older stored every
/// side row. False when the record would read back as a row with columns (it begins with the
/// tag byte; JSON text never does).
bool encode_side_row_without_columns(std::string_view record, std::string& out);
/// Either form; a row without columns comes back with columns_known = false.
bool decode_side_row(std::string_view in, uint64_t seq, SideRow& row);

}  // namespace tidemark::lmdb::detail
