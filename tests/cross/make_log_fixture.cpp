// Writes the log of tests/cross/fixtures/log: the same records, in the same order, on every
// architecture. The committed copy was written on amd64; the fixture tests check that arm64 and
// armhf write the same bytes and that `tidemark replay` of the amd64 log gives the same results
// everywhere (tests/cross/CMakeLists.txt).
//
// Times are in 2040 and cross 2038-01-19T03:14:08Z (2^31 s), where a 32-bit time_t ends.
#include <cinttypes>
#include <cstdio>
#include <string>

#include "adapters/log/log_writer.h"

using namespace tidemark;

namespace {

// A fixed generator: std's distributions are not specified bit for bit across libraries.
struct Lcg {
    uint64_t state = 0x2040'0101'0000'0001;
    uint32_t next() {
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        return static_cast<uint32_t>(state >> 33);
    }
};

constexpr int64_t t2040_ms = 2'208'988'800'000;  // 2040-01-01T00:00:00Z
constexpr int64_t t2038_ms = 2'147'483'648'000;  // 2038-01-19T03:14:08Z, 2^31 s

std::string rfc3339(int64_t ms) {
    // 2040-01-01 plus up to a day: enough for the fixture, no calendar code needed.
    const int64_t in_day_ms = ms - t2040_ms;
    char text[40];
    std::snprintf(text, sizeof text, "2040-01-01T%02d:%02d:%02d.%03dZ",
                  static_cast<int>(in_day_ms / 3'600'000),
                  static_cast<int>(in_day_ms / 60'000 % 60),
                  static_cast<int>(in_day_ms / 1000 % 60), static_cast<int>(in_day_ms % 1000));
    return text;
}

int die(const std::string& what) {
    std::fprintf(stderr, "make_log_fixture: %s\n", what.c_str());
    return 1;
}

}  // namespace

// --zstd: the same records in compressed segments (fixtures/log_zstd, issue 30).
int main(int argc, char** argv) {
    const bool zstd = argc == 3 && std::string(argv[1]) == "--zstd";
    if (argc != 2 && !zstd) {
        return die("usage: make_log_fixture [--zstd] DIR (an empty or missing directory)");
    }
    log::LogOptions options;
    options.dir = argv[argc - 1];
    if (zstd) options.compression = log::Compression::zstd;
    options.fsync = log::FsyncPolicy::never;
    options.segment_bytes = 4096;  // several segments, so segment names and rollover are covered
    auto writer = log::LogWriter::open(options);
    if (!writer) return die(writer.error().message);
    log::LogWriter& w = **writer;
    Lcg rng;
    std::string payload;
    auto append = [&](log::RecordType type, int64_t ingest_ms, const std::string& topic,
                      const std::string& body) {
        auto offset = w.append(type, ingest_ms, topic, body);
        return offset.has_value();
    };

    // Temperatures around the 2038 boundary, then in 2040, with late and out-of-order events.
    for (int64_t base_ms : {t2038_ms - 150'000, t2040_ms}) {
        for (int i = 0; i < 60; ++i) {
            const int device = static_cast<int>(rng.next() % 3) + 1;
            const int64_t event_ms = base_ms + i * 4'000 - static_cast<int64_t>(rng.next() % 9'000);
            const int64_t ingest_ms = base_ms + i * 4'000 + 500;
            const double temp = -10.0 + static_cast<double>(rng.next() % 40'000) / 1000.0 + 0.1;
            char body[96];
            std::snprintf(body, sizeof body, "{\"ts\":%" PRId64 ",\"temp\":%.17g}", event_ms, temp);
            if (!append(log::RecordType::message, ingest_ms,
                        "sensors/dev" + std::to_string(device) + "/telemetry", body))
                return die("append failed");
        }
        if (!append(log::RecordType::tick, base_ms + 400'000, "", "")) return die("tick failed");
    }
    // Meters with RFC 3339 times (fractions and a numeric offset) on partition watermarks.
    const int64_t meters_ms = t2040_ms + 3'600'000;
    for (int i = 0; i < 50; ++i) {
        const int meter = static_cast<int>(rng.next() % 2) + 1;
        const int64_t event_ms = meters_ms + i * 7'000 + static_cast<int64_t>(rng.next() % 1000);
        std::string time = rfc3339(event_ms);
        if (i % 5 == 0) time = time.substr(0, time.size() - 1) + "+00:00";
        payload = "{\"time\":\"" + time + "\",\"w\":" + std::to_string(rng.next() % 5000) + "}";
        if (!append(log::RecordType::message, event_ms + 200,
                    "meters/m" + std::to_string(meter) + "/power", payload))
            return die("append failed");
    }
    // Doors in epoch seconds, sessions split by the gap; and a payload that is not JSON.
    const int64_t doors_ms = t2040_ms + 7'200'000;
    for (int i = 0; i < 30; ++i) {
        const int64_t event_s = doors_ms / 1000 + i * 20 + (i / 10) * 60;
        payload = "{\"t\":" + std::to_string(event_s) + ",\"open\":" + std::to_string(i % 2) + "}";
        if (!append(log::RecordType::message, event_s * 1000 + 100, "doors/front/event", payload))
            return die("append failed");
    }
    if (!append(log::RecordType::message, doors_ms + 800'000, "sensors/dev1/telemetry",
                "{\"ts\": not json"))
        return die("append failed");
    if (!append(log::RecordType::tick, doors_ms + 900'000, "", "")) return die("tick failed");
    auto synced = w.sync();
    if (!synced) return die(synced.error().message);
    return 0;
}
