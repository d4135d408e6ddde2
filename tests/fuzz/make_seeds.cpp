// Writes the seed corpora of the decoder and stored_bytes targets (tests/fuzz/corpus/decoder,
// corpus/stored_bytes): inputs laid out as the targets read them (fuzz_input.h), stored values
// made by the real encoders of adapters/lmdb/row_codec.h, and a few damaged ones. Not a test:
//   cmake --build DIR --target fuzz_make_seeds && DIR/tests/fuzz/fuzz_make_seeds tests/fuzz/corpus
// The engine state the stored_bytes target damages is written by the real engine inside the
// target, from the seed and the damage list of each input.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "adapters/lmdb/row_codec.h"

namespace {

using namespace tidemark;
namespace row = lmdb::detail;

// The writing side of fuzz::Input.
class Seed {
  public:
    Seed& byte(uint8_t b) {
        bytes_.push_back(static_cast<char>(b));
        return *this;
    }
    Seed& u32(uint32_t v) {
        for (int i = 3; i >= 0; --i)
            byte(static_cast<uint8_t>(v >> (8 * i)));
        return *this;
    }
    // What Input::bytes(max) reads back as `s` (s.size() <= max).
    Seed& bytes(std::string_view s) {
        u32(static_cast<uint32_t>(s.size()));
        bytes_.append(s);
        return *this;
    }
    Seed& raw(std::string_view s) {
        bytes_.append(s);
        return *this;
    }
    const std::string& str() const { return bytes_; }

  private:
    std::string bytes_;
};

void write(const std::filesystem::path& dir, const std::string& name, const std::string& bytes) {
    std::filesystem::create_directories(dir);
    std::ofstream(dir / name, std::ios::binary) << bytes;
}

// fuzz_decoder.cpp's tables, by index.
enum Pointer : uint8_t { ts, id, site, v, temp, env_hum, arr_0, arr_1, a_b, m_n, root, s, b, n };
constexpr uint8_t pointer_part(Pointer p) {
    return static_cast<uint8_t>(0x80 | p);
}
enum Format : uint8_t { epoch_s, epoch_ms, epoch_us, epoch_ns, rfc3339, ingest };

// A decoder input: filter 1 ("sensors/+/telemetry"), the key (parts as key_source bytes), the
// partition, the timestamp, fields, topic 0 ("sensors/dev-7/telemetry"), ingest choice 0.
Seed decoder_head(bool structured, std::string_view key, std::string_view partition,
                  uint8_t time_byte, std::string_view fields) {
    Seed s;
    s.byte(structured ? 1 : 0).u32(1).u32(static_cast<uint32_t>(key.size() - 1)).raw(key);
    s.u32(static_cast<uint32_t>(partition.size())).raw(partition).byte(time_byte);
    s.u32(static_cast<uint32_t>(fields.size())).raw(fields).u32(0).u32(0).byte(42);
    return s;
}

std::string parts(std::initializer_list<uint8_t> p) {
    return std::string(p.begin(), p.end());
}

void decoder_seeds(const std::filesystem::path& dir) {
    const std::string level1 = parts({1});
    const std::string fields = parts({v, env_hum, arr_1});
    struct Timed {
        const char* name;
        Format format;
        const char* token;
    };
    const Timed timed[] = {
        {"epoch-ms-int", epoch_ms, "1764400000123"},
        {"epoch-ms-neg", epoch_ms, "-1"},
        {"epoch-ms-string", epoch_ms, "\"1764400000123.9\""},
        {"epoch-s-frac", epoch_s, "1764400000.123"},
        {"epoch-s-string", epoch_s, "\"-12.5\""},
        {"epoch-s-out-of-range", epoch_s, "1000000000000000"},
        {"epoch-us-int", epoch_us, "1764400000123456"},
        {"epoch-ns-int", epoch_ns, "1764400000123456789"},
        {"epoch-ns-exponent", epoch_ns, "1.7644e18"},
        {"rfc3339-z", rfc3339, "\"2025-11-29T10:00:00Z\""},
        {"rfc3339-offset", rfc3339, "\"2025-11-29t10:00:00.123456+01:00\""},
        {"rfc3339-leap", rfc3339, "\"2016-12-31T23:59:60Z\""},
        {"rfc3339-bad-date", rfc3339, "\"2025-02-29T00:00:00Z\""},
        {"rfc3339-edge", rfc3339, "\"9999-12-31 23:59:59.999z\""},
        {"rfc3339-number", rfc3339, "1764400000"},
        {"ts-null", epoch_ms, "null"},
        {"ts-object", epoch_ms, "{\"a\":1}"},
    };
    for (const Timed& t : timed)
        write(dir, "seed-" + std::string(t.name),
              decoder_head(true, level1, "", t.format, fields).bytes(t.token).byte(0xff).str());
    // Keys and partitions: composite, pointers to strings, numbers and booleans, escapes.
    write(dir, "seed-key-composite",
          decoder_head(true, parts({1, pointer_part(site)}), parts({pointer_part(site)}), epoch_ms,
                       fields)
              .bytes("1")
              .byte(0x03)
              .str());
    write(dir, "seed-key-number",
          decoder_head(true, parts({pointer_part(id)}), "", ingest, parts({v, temp}))
              .bytes("0")
              .byte(0x84)
              .str());
    write(dir, "seed-key-missing",
          decoder_head(true, parts({pointer_part(id)}), "", epoch_ms, "").bytes("0").byte(0).str());
    write(dir, "seed-key-escaped-pointers",
          decoder_head(true, parts({pointer_part(a_b), pointer_part(m_n), 0}), "", epoch_ms,
                       parts({root, b, s, n}))
              .bytes("5")
              .byte(0x60)
              .str());
    write(dir, "seed-key-level-1023",
          decoder_head(true, parts({0x7f}), "", ingest, "").bytes("5").byte(0).str());
    // Raw payloads.
    const std::string head = decoder_head(false, level1, "", epoch_ms, fields).str();
    write(dir, "seed-raw-ok",
          head + R"({"ts":1764400000123,"v":1.5,"env":{"hum":40},"arr":[0,2]})");
    write(dir, "seed-raw-not-utf8", head + "{\"ts\":1,\"v\":\"\xc3\x28\"}");
    write(dir, "seed-raw-truncated", head + R"({"ts":1764400000123,"v":)");
    write(dir, "seed-raw-array", head + R"([{"ts":1}])");
    write(dir, "seed-raw-deep", head + std::string(2000, '[') + std::string(2000, ']'));
    write(dir, "seed-raw-big-number", head + R"({"ts":1,"v":1e400})");
    write(dir, "seed-raw-empty", head);
}

void stored_seeds(const std::filesystem::path& dir) {
    // 0: engine state. seed, records before the full checkpoint, records between it and the
    // incremental one, then damage: entry, op, position, argument(s).
    const auto engine = [](uint32_t seed, uint32_t before, uint32_t between) {
        Seed s;
        s.byte(0).u32(seed).u32(before).u32(between);
        return s;
    };
    write(dir, "seed-engine-clean-1", engine(1, 40, 20).str());
    write(dir, "seed-engine-clean-2", engine(0xdeadbeef, 49, 29).str());
    write(dir, "seed-engine-clean-3", engine(77, 10, 0).str());
    for (uint32_t entry = 0; entry < 12; entry += 3) {
        const std::string e = std::to_string(entry);
        write(dir, "seed-engine-flip-" + e,
              engine(5, 30, 10).u32(entry).byte(0).u32(17).u32(3).str());
        write(dir, "seed-engine-cut-" + e, engine(6, 30, 10).u32(entry).byte(2).u32(20).str());
        // Entry 0 is the hopping pipeline's meta record: fingerprint, now, watermark, idle.
        // (An edge value in a window's start is a finding, see docs/RELIABILITY.md section 2.)
        write(dir, "seed-engine-i64-" + e,
              engine(7, 30, 10).u32(0).byte(4).u32(entry / 3 * 8).u32(entry % 10).str());
        write(dir, "seed-engine-u32-" + e,
              engine(8, 30, 10).u32(entry).byte(5).u32(8).u32(entry % 9).str());
    }
    write(dir, "seed-engine-lose-record", engine(9, 30, 10).u32(2).byte(6).u32(0).str());
    write(dir, "seed-engine-replace",
          engine(10, 30, 10).u32(1).byte(7).u32(0).bytes(std::string(24, '\x01')).str());

    // 1: outbox rows.
    lmdb::OutboxRow r;
    r.id = 0x0123456789abcdef;
    r.pipeline = "temps";
    r.key = "dev-7";
    r.window_start_ms = 1'764'400'000'000;
    r.window_end_ms = 1'764'400'060'000;
    r.revision = 2;
    r.kind = core::EmissionKind::update;
    r.enqueued_ms = 1'764'400'061'000;
    r.payload = R"({"id":"0123456789abcdef","values":{"n":3}})";
    const std::string outbox = row::encode_outbox_row(r);
    write(dir, "seed-outbox-update", "\x01" + outbox);
    write(dir, "seed-outbox-format-1", "\x01" + outbox.substr(0, outbox.size() - 8));
    write(dir, "seed-outbox-cut", "\x01" + outbox.substr(0, 30));
    write(dir, "seed-outbox-trailing", "\x01" + outbox + "x");
    r.kind = core::EmissionKind::retract;
    r.key.clear();
    r.payload.clear();
    r.window_start_ms = INT64_MIN;
    write(dir, "seed-outbox-retract-empty", "\x01" + row::encode_outbox_row(r));
    std::string bad_kind = row::encode_outbox_row(r);
    bad_kind[8 + 4 + 5 + 4 + 0 + 8 + 8 + 4] =
        3;  // the kind, after id, pipeline, key, window, revision
    write(dir, "seed-outbox-unknown-kind", "\x01" + bad_kind);

    // 2: checkpoint meta.
    lmdb::CheckpointMeta m{123'456, 789, 1'764'400'000'000, "gateway-17"};
    const std::string meta = row::encode_checkpoint(m);
    write(dir, "seed-checkpoint", "\x02" + meta);
    write(dir, "seed-checkpoint-empty-node", "\x02" + row::encode_checkpoint({}));
    write(dir, "seed-checkpoint-encoding-2", "\x02\x02" + meta.substr(1));
    write(dir, "seed-checkpoint-trailing", "\x02" + meta + std::string(1, '\0'));

    // 3: side rows, with columns and without (format 2).
    const std::string record = R"({"node":"n","pipeline":"temps","reason":"too_late"})";
    const std::string side = row::encode_side_row("temps", "dev-7", record);
    write(dir, "seed-side-columns", "\x03" + side);
    write(dir, "seed-side-columns-cut", "\x03" + side.substr(0, side.size() - 1));
    std::string old;
    row::encode_side_row_without_columns(record, old);
    write(dir, "seed-side-without-columns", "\x03" + old);
    write(dir, "seed-side-empty", "\x03");

    // 4: side positions.
    write(dir, "seed-side-position", "\x04" + row::encode_side_position({1'000'000, 3}));
    write(dir, "seed-side-position-short", std::string("\x04\x01\x02\x03", 4));
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 2) return 2;
    const std::filesystem::path corpus = argv[1];
    decoder_seeds(corpus / "decoder");
    stored_seeds(corpus / "stored_bytes");
    return 0;
}
