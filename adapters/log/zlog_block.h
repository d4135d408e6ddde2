// The blocks of a compressed segment (`NAME.zlog`, segment_files.h): runs of a segment's frame
// bytes (record.h), compressed with zstd, each framed and checked like a record.
//
// Block (little-endian), back to back from the file's start:
//   u32 magic "TMZB" | u32 crc32c(header bytes 8..32) seeded with block_header_crc_seed
//   | u64 first_offset | u32 raw_bytes | u32 stored_bytes | u8 codec (1 zstd) | u8[3] zero
//   | u32 crc32c(stored bytes) seeded with block_crc_seed(first_offset) | stored bytes
// first_offset is the log offset of the first frame byte the block holds: offsets are those of
// the uncompressed frames, so a record keeps its offset whichever format its segment has. Blocks
// cover [first_offset, first_offset + raw_bytes) and follow each other without gaps unless bytes
// were lost to damage. A block may end inside a frame (a seal splits long runs at
// block_raw_bytes_max); the frame goes on in the next block.
// Two CRCs: the header's tells where a block is and what range it covers even when its data is
// damaged, so a damaged block costs its own range, not the rest of the segment. The header's
// covers first_offset as data, from a constant seed: seeded with the offset too, the seed's
// low word and the field's cancel in CRC-32C (the register starts as the seed XOR the first
// four bytes), and a flipped low bit of first_offset went unseen (a fuzz input put a block at
// offset 2^28, a 256 MiB segment of zeros that the reader's search walked byte by byte). The
// data's is seeded with the offset. A block whose header is valid must still fit where it is
// found (scan_blocks): right after the previous block, or after a damaged run no further on
// than the blocks that run could have held, so that a block copied from another place (a stale
// sector, a misdirected write) is damage there.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace tidemark::log {

inline constexpr uint32_t block_magic = 0x425a4d54;  // "TMZB" little-endian
inline constexpr size_t block_header_bytes = 32;
/// A seal cuts longer runs into blocks of this size: the memory a reader needs for one block.
inline constexpr uint64_t block_raw_bytes_max = uint64_t{1} << 20;
inline constexpr uint8_t block_codec_zstd = 1;
/// zstd level 1: the codec bench's best ratio per CPU on the log's bytes (docs/BENCHMARKS.md).
inline constexpr int block_zstd_level = 1;

inline constexpr uint32_t block_header_crc_seed = 0x5a4c4f47u;
inline uint32_t block_crc_seed(uint64_t first_offset) {
    return static_cast<uint32_t>(first_offset ^ (first_offset >> 32)) ^ block_header_crc_seed;
}

struct BlockHeader {
    uint64_t first_offset = 0;
    uint32_t raw_bytes = 0;
    uint32_t stored_bytes = 0;
    uint8_t codec = 0;
    uint32_t data_crc = 0;
};

/// The header at the start of `bytes` if its magic and CRC hold and its sizes are in bounds.
std::optional<BlockHeader> parse_block_header(std::string_view bytes);

/// Appends to `out` the blocks holding `raw`, the frame bytes at log offset first_offset, cut
/// every block_raw_bytes_max. Returns the number of blocks.
Result<size_t> encode_blocks(std::string_view raw, uint64_t first_offset, std::string& out);

/// Decompresses a block's stored bytes into `raw` (resized to header.raw_bytes). false when the
/// data CRC fails or the data does not decompress to raw_bytes: the block is damaged.
bool decode_block(const BlockHeader& header, std::string_view stored, std::string& raw);

/// Where a block sits in its file.
struct BlockEntry {
    BlockHeader header;
    uint64_t file_pos = 0;  // of its header
    uint64_t end_offset() const { return header.first_offset + header.raw_bytes; }
    uint64_t file_end() const { return file_pos + block_header_bytes + header.stored_bytes; }
};

/// What a walk over a `.zlog` file's block headers found.
struct BlockScan {
    explicit BlockScan(uint64_t segment_first_offset) : first_offset(segment_first_offset) {}
    uint64_t first_offset;           // the segment's: where its first block starts
    std::vector<BlockEntry> blocks;  // in file order, offsets increasing
    uint64_t good_file_bytes = 0;    // the end of the last whole block (a torn tail after it)
    uint64_t damaged_regions = 0;    // runs of invalid header bytes with a valid block after
    uint64_t damaged_bytes = 0;      // (file bytes)
    uint64_t bad_data_blocks = 0;    // blocks whose data CRC failed (only with check_data)
    bool stopped = false;            // the last walk ended at stop_offset, before the file's end
};

/// Walks the block headers of the file `fd` (path names it in errors) from
/// scan.good_file_bytes to file_bytes, appending to scan (so that a reader tailing a file calls
/// it again as the file grows). A block must start where the last one ends (the first at
/// scan.first_offset). At an invalid header, or one that does not start there, it searches byte
/// by byte for the next valid one that starts at or after the last block's end and at most as far
/// on as the damaged run's bytes could have held blocks (one block_raw_bytes_max each
/// block_header_bytes + 1 bytes, at least one): found, the bytes between are damage (counted,
/// skipped); not found, a torn tail or a block being written (the walk ends there). A block that
/// does not fit in the file ends the walk the same way. check_data: also verify each
/// block's data CRC (the writer's open(), for the newest segment): a last block whose data fails
/// ends the walk (a torn tail: the writer cuts it), one in the middle is damage, kept (readers
/// skip it) and counted in bad_data_blocks.
/// stop_offset: end the walk once a block reaches past this log offset (a reader that needs the
/// first blocks only: the first record's time of each segment at the writer's open).
/// Limits: one pread of a header per block (a search past damage reads 64 KiB at a time); memory
/// is one entry per block.
Result<void> scan_blocks(int fd, const std::string& path, uint64_t file_bytes, bool check_data,
                         BlockScan& scan, uint64_t stop_offset = UINT64_MAX);

}  // namespace tidemark::log
