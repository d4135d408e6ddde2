// Issue 30 (compressed log segments), the measurements a format needs before it is built: how
// well zstd and LZ4 shrink the log's own bytes and how fast, per block size, and what reaches
// the flash for the write pattern the proposed format would use (docs/BENCHMARKS.md, "Codec").
//
// The bytes compressed are real segment bytes: a LogWriter writes the stream to a scratch
// directory (compact frames, anchors, topic ids), and the segment file is cut into blocks of
// --block-bytes (a 1-s block at 200 msg/s of ~100-byte telemetry is ~20 KiB, at 1000 msg/s
// ~90 KiB). Two shapes: "telemetry", the storage bench's stream (1000 devices, ~81-byte JSON,
// a few digits change); "noisy", the same keys with six random floats and a random hex id.
//
// Figures: codec.SHAPE.CODEC.BLOCK.ratio (segment bytes in / block bytes out, with a 16-byte
// block header counted), .compress_mib_per_s and .decompress_mib_per_s (of segment bytes, one
// thread, median of --runs), and, for the telemetry shape, storage.days_at_200_msgs_per_s_per_
// 32_gib for today's frames and per codec, from the 20 KiB blocks' ratio.
//
// --flash (Linux, a real file system under TIDEMARK_BUILD_DIR or /var/tmp): the log's own
// write pattern for 300 s of ingest at 1000 msg/s with a sync every second, as /proc/self/io
// accounts it (write_bytes less cancelled_write_bytes: dirty pages truncated before writeback
// never reach the device). "plain": today (each frame pwritten at the segment's end, fdatasync
// every second). "tail": the proposed format (each frame pwritten into a tail file; every
// second the tail's frames are compressed into one block appended to the segment, the segment
// fdatasynced, the tail truncated to zero).
//
// --flash-only: that, without the codec tables.
// --dump DIR writes the two shapes' segment bytes to DIR/SHAPE.seg; --input FILE (repeatable)
// measures the codecs over such files without writing a log: the arm64 build under qemu-user
// runs that way (docs/BENCHMARKS.md has the commands).
#include <fcntl.h>
#include <lz4.h>
#include <lz4hc.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zdict.h>
#include <zstd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#ifdef TIDEMARK_CODEC_WITH_LOG
#include "adapters/log/log_writer.h"
#include "adapters/log/segment_files.h"
#include "bench/proc_io.h"
#endif

namespace {

constexpr uint64_t block_header_bytes = 16;  // what a block frame would add: length, CRC, sizes

struct Shape {
    std::string name;
    std::string segment;         // the log's bytes for it
    uint64_t payload_bytes = 0;  // the payloads in it
    uint64_t records = 0;
};

struct Codec {
    std::string name;
    std::function<size_t(const char*, size_t, char*, size_t)> compress;
    std::function<size_t(const char*, size_t, char*, size_t)> decompress;
    size_t (*bound)(size_t);
};

size_t zstd_bound(size_t n) {
    return ZSTD_compressBound(n);
}
size_t lz4_bound(size_t n) {
    return static_cast<size_t>(LZ4_compressBound(static_cast<int>(n)));
}

std::vector<Codec> codecs() {
    static ZSTD_CCtx* cctx = ZSTD_createCCtx();
    static ZSTD_DCtx* dctx = ZSTD_createDCtx();
    std::vector<Codec> out;
    auto zdec = [](const char* in, size_t n, char* out_buf, size_t cap) {
        size_t r = ZSTD_decompressDCtx(dctx, out_buf, cap, in, n);
        return ZSTD_isError(r) ? size_t{0} : r;
    };
    for (int level : {-1, 1, 3, 6}) {
        out.push_back({"zstd" + std::to_string(level),
                       [level](const char* in, size_t n, char* o, size_t cap) {
                           size_t r = ZSTD_compressCCtx(cctx, o, cap, in, n, level);
                           return ZSTD_isError(r) ? size_t{0} : r;
                       },
                       zdec, zstd_bound});
    }
    auto ldec = [](const char* in, size_t n, char* o, size_t cap) {
        int r = LZ4_decompress_safe(in, o, static_cast<int>(n), static_cast<int>(cap));
        return r < 0 ? size_t{0} : static_cast<size_t>(r);
    };
    out.push_back({"lz4",
                   [](const char* in, size_t n, char* o, size_t cap) {
                       return static_cast<size_t>(
                           LZ4_compress_default(in, o, static_cast<int>(n), static_cast<int>(cap)));
                   },
                   ldec, lz4_bound});
    out.push_back({"lz4hc9",
                   [](const char* in, size_t n, char* o, size_t cap) {
                       return static_cast<size_t>(
                           LZ4_compress_HC(in, o, static_cast<int>(n), static_cast<int>(cap), 9));
                   },
                   ldec, lz4_bound});
    return out;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

struct CodecFigures {
    double ratio = 0, compress_mib_per_s = 0, decompress_mib_per_s = 0;
};

CodecFigures measure(const std::string& bytes, uint64_t block_bytes, const Codec& codec, int runs) {
    std::vector<char> out(codec.bound(block_bytes));
    std::vector<char> back(block_bytes);
    std::vector<std::string> blocks;
    uint64_t stored = 0;
    for (uint64_t pos = 0; pos < bytes.size(); pos += block_bytes) {
        const size_t n = std::min<size_t>(block_bytes, bytes.size() - pos);
        const size_t c = codec.compress(bytes.data() + pos, n, out.data(), out.size());
        if (c == 0) {
            std::fprintf(stderr, "%s failed\n", codec.name.c_str());
            std::exit(1);
        }
        blocks.emplace_back(out.data(), c);
        stored +=
            std::min<uint64_t>(c, n) + block_header_bytes;  // a block that grows is stored raw
    }
    std::vector<double> ct, dt;
    const double mib = static_cast<double>(bytes.size()) / 1048576.0;
    for (int r = 0; r < runs; ++r) {
        auto t0 = std::chrono::steady_clock::now();
        for (uint64_t pos = 0; pos < bytes.size(); pos += block_bytes) {
            const size_t n = std::min<size_t>(block_bytes, bytes.size() - pos);
            (void)codec.compress(bytes.data() + pos, n, out.data(), out.size());
        }
        ct.push_back(mib / seconds_since(t0));
        t0 = std::chrono::steady_clock::now();
        uint64_t total = 0;
        for (const auto& b : blocks)
            total += codec.decompress(b.data(), b.size(), back.data(), back.size());
        dt.push_back(mib / seconds_since(t0));
        if (total != bytes.size()) {
            std::fprintf(stderr, "%s: decompressed %llu of %zu bytes\n", codec.name.c_str(),
                         static_cast<unsigned long long>(total), bytes.size());
            std::exit(1);
        }
    }
    return {static_cast<double>(bytes.size()) / static_cast<double>(stored), median(ct),
            median(dt)};
}

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

// The frames of `shape` one by one (position and size in its segment bytes): anchors are full
// frames of 136 bytes starting 0x80 0x00 (record.h), compact frames a varint length, a CRC and
// their body.
std::vector<std::pair<size_t, size_t>> frames_of(const Shape& shape) {
    std::vector<std::pair<size_t, size_t>> frames;
    const std::string& s = shape.segment;
    size_t pos = 0;
    while (pos < s.size()) {
        const size_t start = pos;
        if (s.size() - pos >= 2 && static_cast<unsigned char>(s[pos]) == 0x80 && s[pos + 1] == 0) {
            pos += 8 + 128;
        } else {
            uint64_t len = 0;
            int shift = 0;
            while (pos < s.size()) {
                const auto b = static_cast<unsigned char>(s[pos++]);
                len |= uint64_t{b & 0x7fu} << shift;
                shift += 7;
                if (!(b & 0x80u)) break;
            }
            pos += 4 + len;
        }
        frames.emplace_back(start, std::min(pos, s.size()) - start);
    }
    return frames;
}

// Each frame compressed on its own with a zstd dictionary trained on the first `train` frames (the
// other way to keep every acknowledged record in the file: small compressed frames), over the
// frames after them; a 1-byte header per frame is counted.
void per_frame(const Shape& s, int level) {
    const auto frames = frames_of(s);
    const size_t train = std::min<size_t>(20'000, frames.size() / 4);
    std::vector<size_t> sizes;
    std::string samples;
    for (size_t i = 0; i < train; ++i) {
        samples.append(s.segment, frames[i].first, frames[i].second);
        sizes.push_back(frames[i].second);
    }
    std::vector<char> dict(16 << 10);
    const size_t dict_bytes = ZDICT_trainFromBuffer(dict.data(), dict.size(), samples.data(),
                                                    sizes.data(), static_cast<unsigned>(train));
    if (ZDICT_isError(dict_bytes)) {
        std::fprintf(stderr, "dictionary: %s\n", ZDICT_getErrorName(dict_bytes));
        return;
    }
    ZSTD_CDict* cdict = ZSTD_createCDict(dict.data(), dict_bytes, level);
    ZSTD_CCtx* cctx = ZSTD_createCCtx();
    std::vector<char> out(ZSTD_compressBound(1 << 16));
    uint64_t in = 0, stored = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t i = train; i < frames.size(); ++i) {
        const size_t c =
            ZSTD_compress_usingCDict(cctx, out.data(), out.size(),
                                     s.segment.data() + frames[i].first, frames[i].second, cdict);
        in += frames[i].second;
        stored += 1 + (ZSTD_isError(c) ? frames[i].second : std::min(c, frames[i].second));
    }
    const double secs = seconds_since(t0);
    const std::string key = "codec." + s.name + ".zstd" + std::to_string(level) + "_dict.frame";
    std::printf("%s.ratio: %.2f ratio\n", key.c_str(), double(in) / double(stored));
    std::printf("%s.compress_mib_per_s: %.1f MiB/s\n", key.c_str(), double(in) / 1048576.0 / secs);
    ZSTD_freeCCtx(cctx);
    ZSTD_freeCDict(cdict);
}

#ifdef TIDEMARK_CODEC_WITH_LOG
// payload for record i of a shape; returns its length
int make_payload(const std::string& shape, uint64_t i, int64_t t, std::mt19937_64& rng, char* p,
                 size_t cap) {
    const int dev = static_cast<int>(i % 1000);
    if (shape == "telemetry")
        return std::snprintf(p, cap,
                             "{\"ts\":%lld,\"seq\":%llu,\"temp\":%d.%02d,\"hum\":%d.5,"
                             "\"fw\":\"1.4.2\",\"rssi\":-%d}",
                             static_cast<long long>(t - 200), static_cast<unsigned long long>(i),
                             18 + dev % 10, static_cast<int>(i % 100), 40 + dev % 20,
                             60 + dev % 30);
    std::uniform_real_distribution<double> u(-100.0, 100.0);
    return std::snprintf(p, cap,
                         "{\"ts\":%lld,\"id\":\"%016llx\",\"v\":[%.4f,%.4f,%.4f,%.4f,%.4f,%.4f],"
                         "\"rssi\":-%d}",
                         static_cast<long long>(t - static_cast<int64_t>(rng() % 5000)),
                         static_cast<unsigned long long>(rng()), u(rng), u(rng), u(rng), u(rng),
                         u(rng), u(rng), static_cast<int>(40 + rng() % 60));
}

void topic_of(uint64_t i, char* topic, size_t cap) {
    std::snprintf(topic, cap, "sensors/dev-%04d/telemetry", static_cast<int>(i % 1000));
}

Shape make_shape(const std::string& name, uint64_t records, const std::string& scratch) {
    using namespace tidemark;
    const std::string dir = scratch + "/codec-" + name;
    std::filesystem::remove_all(dir);
    log::LogOptions options;
    options.dir = dir;
    options.fsync = log::FsyncPolicy::never;
    options.segment_bytes = uint64_t{1} << 30;
    auto writer = log::LogWriter::open(options);
    if (!writer) {
        std::fprintf(stderr, "%s\n", writer.error().message.c_str());
        std::exit(1);
    }
    Shape shape{name, {}, 0, records};
    std::mt19937_64 rng(42);
    char payload[256], topic[64];
    const int64_t start_ms = 1'764'400'000'000;
    for (uint64_t i = 0; i < records; ++i) {
        const int64_t t = start_ms + static_cast<int64_t>(i);
        topic_of(i, topic, sizeof topic);
        const int n = make_payload(name, i, t, rng, payload, sizeof payload);
        if (!(*writer)->append(log::RecordType::message, t, topic, std::string_view(payload, n))) {
            std::fprintf(stderr, "append failed\n");
            std::exit(1);
        }
        shape.payload_bytes += static_cast<uint64_t>(n);
    }
    writer->reset();
    auto segments = log::list_segments(dir);
    if (!segments || segments->size() != 1) {
        std::fprintf(stderr, "expected one segment in %s\n", dir.c_str());
        std::exit(1);
    }
    shape.segment = read_file(segments->front().path);
    std::filesystem::remove_all(dir);
    return shape;
}

// This process's user + system CPU time: the write pattern's own cost per record (syscalls,
// copies, compression) beside today's.
double cpu_seconds() {
    rusage u{};
    ::getrusage(RUSAGE_SELF, &u);
    return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
           double(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

using tidemark::bench::read_proc_io;

void flash(const Shape& shape, const std::string& scratch, const Codec* codec) {
    const std::string dir = scratch + "/codec-flash";
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    const auto frames = frames_of(shape);
    const int seg = ::open((dir + "/segment").c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
    const int tail = ::open((dir + "/tail").c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (seg < 0 || tail < 0) std::exit(1);
    ::sync();
    const tidemark::bench::ProcIo before = read_proc_io();
    const double cpu_before = cpu_seconds();
    uint64_t seg_end = 0, tail_end = 0, done = 0;
    std::string block;
    std::vector<char> out(1 << 22);
    auto seal = [&] {
        if (codec == nullptr) {
            (void)::fdatasync(seg);
            return;
        }
        block.resize(tail_end);
        (void)::pread(tail, block.data(), tail_end, 0);
        size_t c = codec->compress(block.data(), block.size(), out.data() + block_header_bytes,
                                   out.size() - block_header_bytes);
        c += block_header_bytes;
        (void)::pwrite(seg, out.data(), c, static_cast<off_t>(seg_end));
        seg_end += c;
        (void)::fdatasync(seg);
        (void)::ftruncate(tail, 0);
        tail_end = 0;
    };
    for (const auto& [at, n] : frames) {
        const char* p = shape.segment.data() + at;
        if (codec == nullptr) {
            (void)::pwrite(seg, p, n, static_cast<off_t>(seg_end));
            seg_end += n;
        } else {
            (void)::pwrite(tail, p, n, static_cast<off_t>(tail_end));
            tail_end += n;
        }
        if (++done % 1000 == 0) seal();
    }
    seal();
    const double cpu = cpu_seconds() - cpu_before;
    ::sync();
    const tidemark::bench::ProcIo after = read_proc_io();
    const double payload = static_cast<double>(shape.payload_bytes);
    const std::string name = codec ? "tail." + codec->name : std::string("plain");
    std::printf("# flash %s: write_bytes %.1f MiB, cancelled %.1f MiB, segment %.1f MiB\n",
                name.c_str(), double(after.write_bytes - before.write_bytes) / 1048576.0,
                double(after.cancelled_write_bytes - before.cancelled_write_bytes) / 1048576.0,
                double(seg_end) / 1048576.0);
    std::printf("codec.flash.%s.log_bytes_written_per_payload_byte: %.3f ratio\n", name.c_str(),
                double(after.stored() - before.stored()) / payload);
    std::printf("codec.flash.%s.disk_bytes_per_payload_byte: %.3f ratio\n", name.c_str(),
                double(seg_end) / payload);
    std::printf("codec.flash.%s.cpu_us_per_record: %.2f us\n", name.c_str(),
                cpu * 1e6 / double(frames.size()));
    ::close(seg);
    ::close(tail);
    std::filesystem::remove_all(dir);
}
#endif

}  // namespace

int main(int argc, char** argv) {
    [[maybe_unused]] uint64_t records = 300'000;
    int runs = 5;
    [[maybe_unused]] bool do_flash = false;
    bool flash_only = false;
    std::string dump;
    std::vector<std::string> inputs;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--flash") do_flash = true;
        if (a == "--flash-only") do_flash = flash_only = true;
        if (i + 1 < argc) {
            if (a == "--records") records = std::strtoull(argv[i + 1], nullptr, 10);
            if (a == "--runs") runs = std::atoi(argv[i + 1]);
            if (a == "--dump") dump = argv[i + 1];
            if (a == "--input") inputs.push_back(argv[i + 1]);
        }
    }
    std::vector<Shape> shapes;
    if (!inputs.empty()) {
        for (const auto& path : inputs) {
            Shape s;
            s.name = std::filesystem::path(path).stem().string();
            s.segment = read_file(path);
            shapes.push_back(std::move(s));
        }
    } else {
#ifdef TIDEMARK_CODEC_WITH_LOG
        const char* base = std::getenv("TIDEMARK_BUILD_DIR");
        const std::string scratch =
            std::string(base ? base : "/var/tmp") + "/bench-codec-" + std::to_string(::getpid());
        for (const char* name : {"telemetry", "noisy"})
            shapes.push_back(make_shape(name, records, scratch));
        if (!dump.empty()) {
            std::filesystem::create_directories(dump);
            for (const auto& s : shapes)
                std::ofstream(dump + "/" + s.name + ".seg", std::ios::binary) << s.segment;
        }
        if (do_flash) {
            const auto all = codecs();
            flash(shapes.front(), scratch, nullptr);
            for (const auto& c : all)
                if (c.name == "zstd1" || c.name == "zstd3" || c.name == "lz4")
                    flash(shapes.front(), scratch, &c);
        }
        std::filesystem::remove_all(scratch);
#else
        std::fprintf(stderr, "built without the log: pass --input FILE\n");
        return 2;
#endif
    }
    if (flash_only) return 0;
    const auto all = codecs();
    for (const auto& s : shapes) {
        if (s.records > 0)
            std::printf("# %s: %llu records, %.2f segment bytes per payload byte (today)\n",
                        s.name.c_str(), static_cast<unsigned long long>(s.records),
                        double(s.segment.size()) / double(s.payload_bytes));
        for (uint64_t block : {uint64_t{20} << 10, uint64_t{96} << 10, uint64_t{256} << 10}) {
            for (const auto& c : all) {
                const auto f = measure(s.segment, block, c, runs);
                const std::string key =
                    "codec." + s.name + "." + c.name + "." + std::to_string(block >> 10) + "k";
                std::printf("%s.ratio: %.2f ratio\n", key.c_str(), f.ratio);
                std::printf("%s.compress_mib_per_s: %.1f MiB/s\n", key.c_str(),
                            f.compress_mib_per_s);
                std::printf("%s.decompress_mib_per_s: %.1f MiB/s\n", key.c_str(),
                            f.decompress_mib_per_s);
                if (s.name == "telemetry" && s.records > 0 && block == (uint64_t{20} << 10)) {
                    // 100-byte telemetry at 200 msg/s: segment bytes per record scale with the
                    // measured bytes per payload byte
                    const double disk_per_payload =
                        double(s.segment.size()) / double(s.payload_bytes) / f.ratio;
                    const double per_day = 100.0 * 200.0 * 86400.0 * disk_per_payload;
                    std::printf("codec.%s.disk_bytes_per_payload_byte: %.3f ratio\n",
                                c.name.c_str(), disk_per_payload);
                    std::printf("codec.%s.days_at_200_msgs_per_s_per_32_gib: %.1f days\n",
                                c.name.c_str(), 34359738368.0 / per_day);
                }
            }
        }
        for (int level : {1, 3})
            per_frame(s, level);
        if (s.name == "telemetry" && s.records > 0) {
            const double per_day =
                100.0 * 200.0 * 86400.0 * double(s.segment.size()) / double(s.payload_bytes);
            std::printf("storage.days_at_200_msgs_per_s_per_32_gib (today): %.1f days\n",
                        34359738368.0 / per_day);
        }
    }
    return 0;
}
