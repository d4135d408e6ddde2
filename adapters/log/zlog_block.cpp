#include "adapters/log/zlog_block.h"

#include <zstd.h>

#include <algorithm>
#include <cstring>

#include "adapters/log/crc32c.h"
#include "adapters/log/segment_scan.h"

namespace tidemark::log {
namespace {

uint64_t get_le(const char* p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i)
        v = (v << 8) | static_cast<unsigned char>(p[i]);
    return v;
}

void put_le(char* p, uint64_t v, int n) {
    for (int i = 0; i < n; ++i, v >>= 8)
        p[i] = static_cast<char>(v & 0xff);
}

// One context a thread, kept: ZSTD_compress and ZSTD_decompress would allocate one a call.
struct Contexts {
    ZSTD_CCtx* compress = ZSTD_createCCtx();
    ZSTD_DCtx* decompress = ZSTD_createDCtx();
    Contexts() = default;
    Contexts(const Contexts&) = delete;
    Contexts& operator=(const Contexts&) = delete;
    ~Contexts() {
        ZSTD_freeCCtx(compress);
        ZSTD_freeDCtx(decompress);
    }
};

Contexts& contexts() {
    thread_local Contexts c;
    return c;
}

uint32_t header_crc(const char* header) {
    return crc32c(block_header_crc_seed, std::string_view(header + 8, 24));
}

}  // namespace

std::optional<BlockHeader> parse_block_header(std::string_view bytes) {
    if (bytes.size() < block_header_bytes) return std::nullopt;
    const char* p = bytes.data();
    if (get_le(p, 4) != block_magic) return std::nullopt;
    BlockHeader h;
    h.first_offset = get_le(p + 8, 8);
    if (get_le(p + 4, 4) != header_crc(p)) return std::nullopt;
    h.raw_bytes = static_cast<uint32_t>(get_le(p + 16, 4));
    h.stored_bytes = static_cast<uint32_t>(get_le(p + 20, 4));
    h.codec = static_cast<uint8_t>(p[24]);
    h.data_crc = static_cast<uint32_t>(get_le(p + 28, 4));
    if (h.codec != block_codec_zstd || h.raw_bytes == 0 || h.raw_bytes > block_raw_bytes_max ||
        h.stored_bytes == 0 || h.stored_bytes > ZSTD_compressBound(block_raw_bytes_max)) {
        return std::nullopt;
    }
    return h;
}

Result<size_t> encode_blocks(std::string_view raw, uint64_t first_offset, std::string& out) {
    size_t blocks = 0;
    while (!raw.empty()) {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(raw.size(), block_raw_bytes_max));
        const size_t at = out.size();
        out.resize(at + block_header_bytes + ZSTD_compressBound(n));
        char* header = out.data() + at;
        const size_t stored =
            ZSTD_compressCCtx(contexts().compress, header + block_header_bytes,
                              ZSTD_compressBound(n), raw.data(), n, block_zstd_level);
        if (ZSTD_isError(stored)) {
            out.resize(at);
            return fail(std::string("log: zstd cannot compress a block: ") +
                        ZSTD_getErrorName(stored));
        }
        out.resize(at + block_header_bytes + stored);
        header = out.data() + at;
        std::memset(header, 0, block_header_bytes);
        put_le(header, block_magic, 4);
        put_le(header + 8, first_offset, 8);
        put_le(header + 16, n, 4);
        put_le(header + 20, stored, 4);
        header[24] = static_cast<char>(block_codec_zstd);
        put_le(header + 28,
               crc32c(block_crc_seed(first_offset),
                      std::string_view(header + block_header_bytes, stored)),
               4);
        put_le(header + 4, header_crc(header), 4);
        first_offset += n;
        raw.remove_prefix(n);
        ++blocks;
    }
    return blocks;
}

bool decode_block(const BlockHeader& header, std::string_view stored, std::string& raw) {
    if (stored.size() != header.stored_bytes ||
        crc32c(block_crc_seed(header.first_offset), stored) != header.data_crc) {
        return false;
    }
    raw.resize(header.raw_bytes);
    const size_t n = ZSTD_decompressDCtx(contexts().decompress, raw.data(), raw.size(),
                                         stored.data(), stored.size());
    return !ZSTD_isError(n) && n == header.raw_bytes;
}

Result<void> scan_blocks(int fd, const std::string& path, uint64_t file_bytes, bool check_data,
                         BlockScan& scan, uint64_t stop_offset) {
    std::string buffer;
    uint64_t buffer_pos = 0;
    // The bytes [pos, pos + n) of the file, n at most what is left of it.
    auto view = [&](uint64_t pos, uint64_t n) -> Result<std::string_view> {
        n = std::min(n, file_bytes - std::min(pos, file_bytes));
        if (pos < buffer_pos || pos + n > buffer_pos + buffer.size()) {
            const uint64_t want =
                std::min<uint64_t>(std::max<uint64_t>(n, uint64_t{64} << 10), file_bytes - pos);
            buffer.resize(static_cast<size_t>(want));
            auto got = pread_full(fd, buffer.data(), buffer.size(), pos, path);
            if (!got) return std::unexpected(got.error());
            buffer.resize(*got);
            buffer_pos = pos;
            n = std::min<uint64_t>(n, *got);
        }
        return std::string_view(buffer.data() + (pos - buffer_pos), n);
    };
    auto min_offset = [&] {
        return scan.blocks.empty() ? scan.first_offset : scan.blocks.back().end_offset();
    };
    // A block at pos: its header is valid, it starts in [min_offset(), max_first] (after the
    // last one), and it fits in the file.
    char head[block_header_bytes];
    auto block_at = [&](uint64_t pos, uint64_t max_first) -> Result<std::optional<BlockHeader>> {
        // A pread of the header alone: a walk over a segment's blocks reads ~1 % of it.
        auto got = pread_full(fd, head, sizeof head, pos, path);
        if (!got) return std::unexpected(got.error());
        auto header = parse_block_header(std::string_view(head, *got));
        if (!header || header->first_offset < min_offset() || header->first_offset > max_first ||
            pos + block_header_bytes + header->stored_bytes > file_bytes) {
            return std::optional<BlockHeader>();
        }
        return header;
    };
    std::string raw;
    std::string stored;
    uint64_t pos = scan.good_file_bytes;
    scan.stopped = false;
    while (pos + block_header_bytes <= file_bytes) {
        if (!scan.blocks.empty() && scan.blocks.back().end_offset() > stop_offset) {
            scan.stopped = true;
            break;
        }
        auto header = block_at(pos, min_offset());
        if (!header) return std::unexpected(header.error());
        uint64_t at = pos;
        if (!*header) {
            // Damage, or a torn tail: the next valid header decides.
            std::optional<BlockHeader> found;
            for (at = pos + 1; at + block_header_bytes <= file_bytes; ++at) {
                auto bytes = view(at, 4);
                if (!bytes) return std::unexpected(bytes.error());
                if (bytes->size() < 4 || get_le(bytes->data(), 4) != block_magic) continue;
                // The blocks [pos, at) could have held: at least block_header_bytes + 1
                // bytes each, a first one even if the run is shorter (a header cut short).
                const uint64_t lost_max = std::max<uint64_t>(
                    1, (at - pos + block_header_bytes) / (block_header_bytes + 1));
                auto next = block_at(at, min_offset() + lost_max * block_raw_bytes_max);
                if (!next) return std::unexpected(next.error());
                if (*next) {
                    found = *next;
                    break;
                }
            }
            if (!found) break;
            ++scan.damaged_regions;
            scan.damaged_bytes += at - pos;
            *header = found;
        }
        BlockEntry entry{**header, at};
        if (check_data) {
            stored.resize(entry.header.stored_bytes);
            auto got = pread_full(fd, stored.data(), stored.size(), at + block_header_bytes, path);
            if (!got) return std::unexpected(got.error());
            stored.resize(*got);
            if (!decode_block(entry.header, stored, raw)) {
                if (entry.file_end() >= file_bytes) break;  // the last block: torn
                ++scan.bad_data_blocks;
            }
        }
        scan.blocks.push_back(entry);
        pos = entry.file_end();
        scan.good_file_bytes = pos;
    }
    return {};
}

}  // namespace tidemark::log
