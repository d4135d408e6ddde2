// The log over damaged segments. Records written by the real writer, then the segment files
// damaged as storage damages them (bit flips, a cut tail, a frame written twice, two frames
// swapped, a zeroed run), then read back:
//  - nothing before the first damaged byte is lost: that prefix comes back whole and in order;
//  - every record read is one that was written, byte for byte (damage never invents a record),
//    and records come back in the order they were written, except the duplicated frame, which
//    may come back once more;
//  - the writer opens the damaged directory (or refuses it with an error), never crashes.
// Half the inputs write compressed segments (storage.log_compression zstd, a seal every few
// records): the damage then falls on the .zlog files' blocks, and "before the first damaged
// byte" means before the first offset of the block that byte is in (a damaged block costs its
// range; no frame can be checked inside it).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "adapters/log/log_reader.h"
#include "adapters/log/log_writer.h"
#include "adapters/log/segment_files.h"
#include "adapters/log/zlog_block.h"
#include "fuzz_input.h"

namespace {

using namespace tidemark;

struct Written {
    uint64_t offset;
    int64_t ingest_ms;
    log::RecordType type;
    std::string topic;
    std::string payload;
};

// One directory per process, emptied per input: tmpfs when there is one, for speed.
std::string scratch_dir() {
    static const std::string dir = [] {
        std::string base = std::filesystem::exists("/dev/shm") ? "/dev/shm" : "/tmp";
        return base + "/tidemark-fuzz-log-" + std::to_string(::getpid());
    }();
    return dir;
}

std::string read_file(const std::string& path) {
    std::string out;
    int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) return out;
    char buf[65536];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof buf)) > 0)
        out.append(buf, static_cast<size_t>(n));
    ::close(fd);
    return out;
}

void write_file(const std::string& path, const std::string& bytes) {
    int fd = ::open(path.c_str(), O_WRONLY | O_TRUNC);
    if (fd < 0) return;
    if (::write(fd, bytes.data(), bytes.size()) != static_cast<ssize_t>(bytes.size()))
        fuzz::violated("scratch write failed");
    ::close(fd);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fuzz::Input in(data, size);
    const std::string dir = scratch_dir();
    std::filesystem::remove_all(dir);

    // Small segments, so that damage also meets segment boundaries.
    log::LogOptions options;
    options.dir = dir;
    options.fsync = log::FsyncPolicy::never;
    options.segment_bytes = 256 + in.below(1024);
    const bool zstd = in.below(2) == 1;
    const uint32_t seal_every = 1 + in.below(8);
    if (zstd) options.compression = log::Compression::zstd;
    std::vector<Written> written;
    {
        auto writer = log::LogWriter::open(options);
        TM_FUZZ_CHECK(writer.has_value());
        const uint32_t count = 1 + in.below(24);
        int64_t ingest_ms = 1'700'000'000'000;
        for (uint32_t i = 0; i < count; ++i) {
            ingest_ms += in.below(2000);
            const auto type = in.below(4) == 0 ? log::RecordType::tick : log::RecordType::message;
            std::string topic = type == log::RecordType::tick ? "" : "t/" + in.bytes(12);
            std::string payload = type == log::RecordType::tick ? "" : in.bytes(200);
            auto offset = (*writer)->append(type, ingest_ms, topic, payload);
            TM_FUZZ_CHECK(offset.has_value());
            written.push_back({*offset, ingest_ms, type, std::move(topic), std::move(payload)});
            if (zstd && (i + 1) % seal_every == 0) TM_FUZZ_CHECK((*writer)->sync().has_value());
        }
        TM_FUZZ_CHECK((*writer)->sync().has_value());
    }

    // Damage, in global offsets over the concatenated segments.
    auto segments = log::list_segments(dir);
    TM_FUZZ_CHECK(segments.has_value() && !segments->empty());
    std::string all;
    std::vector<uint64_t> starts;
    // Compressed: where each block starts in `all`, and the offset its frames start at.
    std::vector<std::pair<uint64_t, uint64_t>> block_starts;
    for (const auto& s : *segments) {
        starts.push_back(all.size());
        TM_FUZZ_CHECK(s.compressed == zstd);
        if (zstd) {
            int fd = ::open(s.path.c_str(), O_RDONLY);
            TM_FUZZ_CHECK(fd >= 0);
            log::BlockScan scan(s.first_offset);
            const std::string bytes = read_file(s.path);
            TM_FUZZ_CHECK(log::scan_blocks(fd, s.path, bytes.size(), true, scan).has_value());
            ::close(fd);
            TM_FUZZ_CHECK(scan.good_file_bytes == bytes.size() && scan.bad_data_blocks == 0);
            for (const auto& b : scan.blocks)
                block_starts.emplace_back(all.size() + b.file_pos, b.header.first_offset);
        }
        all += read_file(s.path);
    }
    const uint64_t file_end = all.size();
    const uint64_t end =
        zstd ? segments->back().first_offset + segments->back().bytes - (*segments)[0].first_offset
             : file_end;
    // Offsets relative to the first segment (segments are contiguous: each starts where the
    // previous one ends).
    const uint64_t base = (*segments)[0].first_offset;
    for (Written& w : written)
        w.offset -= base;
    uint64_t damaged_from = end;  // the first byte that no longer holds what was written
    const uint32_t ops = in.below(4);
    for (uint32_t op = 0; op < ops && !all.empty(); ++op) {
        const uint64_t at = in.below(static_cast<uint32_t>(all.size()));
        switch (in.below(4)) {
            case 0:  // a bit flip
                all[at] = static_cast<char>(all[at] ^ (1 << in.below(8)));
                damaged_from = std::min(damaged_from, at);
                break;
            case 1: {  // a zeroed run (what a lost page looks like)
                const uint64_t n = std::min<uint64_t>(1 + in.below(300), all.size() - at);
                std::fill_n(all.begin() + static_cast<std::ptrdiff_t>(at), n, '\0');
                damaged_from = std::min(damaged_from, at);
                break;
            }
            case 2: {  // record i's frame written again over record j's (duplicated frame)
                if (zstd) break;  // frames are not in the file as they are
                const size_t i = in.below(static_cast<uint32_t>(written.size()));
                const size_t j = in.below(static_cast<uint32_t>(written.size()));
                const uint64_t len_i =
                    (i + 1 < written.size() ? written[i + 1].offset : end) - written[i].offset;
                // Both inside what is left (an earlier cut may have shortened it).
                if (written[i].offset + len_i <= all.size() &&
                    written[j].offset + len_i <= all.size()) {
                    all.replace(written[j].offset, len_i, all.substr(written[i].offset, len_i));
                    if (i != j) damaged_from = std::min(damaged_from, written[j].offset);
                }
                break;
            }
            default: {  // the tail cut (a torn write)
                all.resize(at);
                damaged_from = std::min(damaged_from, at);
                break;
            }
        }
    }
    for (size_t k = 0; k < segments->size(); ++k) {
        const uint64_t from = std::min<uint64_t>(starts[k], all.size());
        const uint64_t to =
            std::min<uint64_t>(k + 1 < starts.size() ? starts[k + 1] : file_end, all.size());
        write_file((*segments)[k].path, all.substr(from, to - from));  // O_TRUNC: cut too
    }

    if (zstd && damaged_from < file_end) {
        // In offsets: the first offset of the block holding the first damaged byte.
        uint64_t logical = 0;
        for (const auto& [file_pos, first_offset] : block_starts)
            if (file_pos <= damaged_from) logical = first_offset - base;
        damaged_from = logical;
    } else if (zstd) {
        damaged_from = end;
    }

    // Read back: bounded by the records written (each read advances past a frame or damage).
    // A small read buffer, so that frames also straddle refills.
    log::ReaderOptions reader_options;
    reader_options.buffer_bytes = 64 + in.below(4096);
    auto reader = log::LogReader::open(dir, reader_options);
    // What next() read, one by one, and whether it stopped at an error: a batched read
    // (next_batch) of the same files must read the same (issue 31).
    using Read = std::tuple<uint64_t, uint64_t, int64_t, log::RecordType, std::string, std::string,
                            std::string, bool>;
    std::vector<Read> one_by_one;
    bool one_by_one_failed = false;
    if (reader) {
        size_t next_index = 0;  // records before this one were passed
        size_t reads = 0;
        log::Record record;
        while (true) {
            auto more = (*reader)->next(record);
            if (!more) one_by_one_failed = true;
            if (!more || !*more) break;
            one_by_one.emplace_back(record.offset, record.next_offset, record.ingest_ms,
                                    record.type, std::string(record.topic),
                                    std::string(record.payload), std::string(record.reason),
                                    record.redeliverable);
            TM_FUZZ_CHECK(++reads <= 2 * written.size() + 2);
            // It must be a written record: the expected one, a later one (damage skipped), or
            // the duplicated frame again.
            auto same = [&](const Written& w) {
                return w.ingest_ms == record.ingest_ms && w.type == record.type &&
                       w.topic == record.topic && w.payload == record.payload;
            };
            size_t k = next_index;
            while (k < written.size() && !same(written[k]))
                ++k;
            if (k == written.size()) {
                const bool any = std::any_of(written.begin(), written.end(), same);
                TM_FUZZ_CHECK(any);  // a copy of an earlier record (the duplicated frame)
                continue;
            }
            // Nothing that lies wholly before the damage may be skipped.
            for (size_t m = next_index; m < k; ++m) {
                const uint64_t frame_end = m + 1 < written.size() ? written[m + 1].offset : end;
                TM_FUZZ_CHECK(frame_end > damaged_from);
            }
            next_index = k + 1;
        }
        // Every record that ends before the first damaged byte was read.
        for (size_t m = next_index; m < written.size(); ++m) {
            const uint64_t frame_end = m + 1 < written.size() ? written[m + 1].offset : end;
            TM_FUZZ_CHECK(frame_end > damaged_from);
        }
    }

    if (auto batched = log::LogReader::open(dir, reader_options); reader && batched) {
        // Of the input's length, not drawn from it: most inputs are used up by here.
        std::vector<log::Record> batch(1 + size % 40);
        std::vector<Read> got;
        bool failed = false;
        while (got.size() <= one_by_one.size()) {
            auto n = (*batched)->next_batch(std::span(batch));
            if (!n) failed = true;
            if (!n || *n == 0) break;
            for (size_t i = 0; i < *n; ++i)
                got.emplace_back(batch[i].offset, batch[i].next_offset, batch[i].ingest_ms,
                                 batch[i].type, std::string(batch[i].topic),
                                 std::string(batch[i].payload), std::string(batch[i].reason),
                                 batch[i].redeliverable);
        }
        TM_FUZZ_CHECK(got == one_by_one);
        TM_FUZZ_CHECK(failed == one_by_one_failed);
    }

    // The writer's open scan over the same damage: an error or a log it can append to.
    {
        auto writer = log::LogWriter::open(options);
        if (writer) (void)(*writer)->append(log::RecordType::tick, 1'800'000'000'000, "", "");
    }
    std::filesystem::remove_all(dir);
    return 0;
}
