// The appliance's configuration: DESIGN.md section 6 as typed values, and the loader that
// refuses anything it does not understand, with every error at once.
#pragma once

#include <algorithm>

#include <cstddef>
#include <cstdint>
#include <expected>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/pipeline.h"

namespace tidemark::config {

/// The longest topic (filter) a config may name: MQTT's own limit, which is also the log's frame
/// limit on a topic (log::topic_bytes_max in adapters/log/record.h; config cannot include the
/// log, so the two must be kept equal by hand).
inline constexpr size_t topic_bytes_max = 65535;

/// Where a key or partition comes from: the Nth level of the MQTT topic (from 0) or a JSON
/// pointer into the payload. Config spelling: "topic:1" or "/device/id".
struct Extractor {
    enum Kind { topic_level, json_pointer };
    Kind kind = topic_level;
    int level = 0;        // topic_level only
    std::string pointer;  // json_pointer only (RFC 6901, starts with '/')
    bool operator==(const Extractor&) const = default;
};

/// Where an event's time comes from: the gateway's ingest time, or a payload field in a format.
struct TimestampSpec {
    enum Format { epoch_s, epoch_ms, epoch_us, epoch_ns, rfc3339 };
    bool ingest = true;
    std::string pointer;  // when !ingest
    Format format = epoch_ms;
    bool operator==(const TimestampSpec&) const = default;
};

/// One pipeline: what the engine computes (spec) and how a message becomes an event.
struct PipelineConfig {
    core::PipelineSpec spec;
    std::string topic_filter;          // MQTT filter, '+' and '#' allowed
    std::vector<Extractor> key;        // one, or several for a composite key
    std::vector<Extractor> partition;  // empty: the partition is the key
    TimestampSpec timestamp;
    std::vector<std::string> field_pointers;  // parallel to spec.fields
    // spec.version: a short, stable hash (8 hex digits, pipeline_version()) of what changes
    // the meaning of the pipeline's results: topic filter, key, partition, timestamp, fields,
    // window, aggregates, watermark and late policy; not its name, limits or backfill
    // (DESIGN.md section 4).
    /// The pipeline's JSON object as written, compact: stored beside a version's state, so that
    /// a restart can keep a previous version running after the config moved on.
    std::string definition;
    /// backfill.from, a duration before now or an RFC 3339 time (at most one is set); neither:
    /// a new version backfills from the oldest retained log record.
    std::optional<int64_t> backfill_from_age_ms;
    std::optional<int64_t> backfill_from_ms;
    /// late.alarm: health raises `too_late: NAME` while more than this share of the events of
    /// the last `over` were too late (and there were at least 1 / share of them); off when
    /// `alarm: false`. Operations only: not part of the version.
    struct TooLateAlarm {
        bool enabled = true;
        double share = 0.01;
        int64_t over_ms = 300'000;
    } too_late_alarm;
};

/// How a new pipeline version's backfill shares the process with live work.
struct BackfillConfig {
    double max_share = 0.5;           // of one core
    int64_t max_live_delay_ms = 200;  // the longest a backfill step holds live records back
};

/// Paths are absolute after loading (relative ones resolve against the config file's
/// directory); each file was readable at load time.
struct TlsConfig {
    std::string ca_file;
    std::string cert_file;
    std::string key_file;
};

enum class FsyncPolicy { always, interval, never };
/// How the log's segments store their frames (adapters/log/log_options.h, Compression).
enum class LogCompression { none, zstd };

struct LogRetention {
    int64_t max_age_ms = 7LL * 24 * 3600 * 1000;
    uint64_t max_bytes = 512ULL << 20;
};

/// The largest LMDB map a platform with `pointer_bytes`-byte pointers can open. On 64 bits it
/// is the config's own upper bound (1TiB). On 32 bits, LMDB maps the whole file as one piece
/// of a 4GiB address space that the program, its libraries, thread stacks and heap share:
/// under qemu-arm a 2GiB map failed at mdb_env_open with ENOMEM and 1664MiB opened, and a real
/// board (a 3G/1G kernel split, more libraries mapped) may leave less. 1GiB leaves room for
/// that, is a power of two an operator can write, and is the default map size.
constexpr uint64_t map_size_max_bytes(size_t pointer_bytes = sizeof(void*)) {
    return pointer_bytes >= 8 ? 1ULL << 40 : 1ULL << 30;
}

struct StorageConfig {
    // Fits a 32-bit gateway's limit (map_size_max_bytes(4)), so the default runs everywhere.
    uint64_t map_size_bytes = 1ULL << 30;
    FsyncPolicy fsync = FsyncPolicy::interval;
    int64_t fsync_interval_ms = 1000;
    LogRetention log_retention;
    uint64_t segment_bytes = 64ULL << 20;
    // zstd: 0.20 disk bytes per payload byte instead of 1.14, 0.45 bytes written instead of 1.40
    // (docs/BENCHMARKS.md, "log compression"), with the same crash and power-loss promises
    // (log_seal.cpp). On a full disk a seal that finds no room for its blocks makes the stage
    // durable instead (LogWriter::sync), so syncs and checkpoints go on as with plain segments.
    LogCompression log_compression = LogCompression::zstd;
};

struct CheckpointConfig {
    int64_t interval_ms = 60'000;
};

/// When the gateway's clock is trusted for clamping and idle advance (DESIGN.md section 3).
/// automatic: when the kernel says it is synchronised, or when no time-sync service runs (then
/// nothing will ever synchronise it: the operator chose its clock). synchronised: only when the
/// kernel says so. always: never held (a board with a real-time clock and no network).
enum class ClockTrust { automatic, synchronised, always };

/// A broker address, parsed once from the config's URI (tcp://host:port or ssl://host:port).
struct Endpoint {
    bool tls = false;  // ssl://
    std::string host;  // a name or address; an IPv6 literal without its brackets
    uint16_t port = 0;
    bool operator==(const Endpoint&) const = default;
};

/// The most addresses one "uri" may list (a cluster's nodes): mqtt::broker_addresses_max.
inline constexpr size_t broker_uris_max = 16;

struct SourceConfig {
    std::string uri;                  // as written (a list joined by ", "), for messages, health
    std::vector<std::string> uris;    // each address as written
    std::vector<Endpoint> endpoints;  // uris, parsed: the first is tried first
    Endpoint endpoint;                // endpoints.front()
    std::string client_id;            // default "tidemark-<node_id>"
    std::string username;             // empty: no authentication
    std::string password;             // the contents of password_file, trailing newlines removed
    std::optional<TlsConfig> tls;
    uint64_t max_payload_bytes = 64ULL << 10;
    /// The largest max_payload: the log holds a record of at most 16 MiB, topic (up to 64 KiB)
    /// and frame head included (adapters/log/record.h; firmware checks the two agree).
    static constexpr uint64_t max_payload_bytes_limit = (16ULL << 20) - (64ULL << 10);
    // Retained messages the broker resends on every subscribe: skipped (and counted) unless
    // the operator asks for them (true), since each resubscribe would ingest them again.
    bool accept_retained = false;
    ClockTrust clock_trust = ClockTrust::automatic;
};

enum class WhenFull { drop_oldest, pause_ingest };

struct OutboxConfig {
    uint64_t max_bytes = 256ULL << 20;
    WhenFull when_full = WhenFull::drop_oldest;
};

struct UpstreamConfig {
    std::string uri;                  // as written (a list joined by ", "), for messages, health
    std::vector<std::string> uris;    // each address as written: one broker or a cluster's nodes
    std::vector<Endpoint> endpoints;  // uris, parsed: the first is tried first, then round them
    Endpoint endpoint;                // endpoints.front()
    std::string client_id;            // default "<node_id>"
    std::string username;
    std::string password;
    std::optional<TlsConfig> tls;
    std::string topic = "tidemark/{node_id}/{pipeline}";  // template, see expand_topic_template
    std::string side_topic = "tidemark/{node_id}/{pipeline}/side";  // too-late events
    int qos = 1;
    uint32_t max_inflight = 64;
    OutboxConfig outbox;
    bool compact_superseded = false;
    /// Reconnect backoff: from reconnect_min_ms doubling up to this, each wait jittered down to
    /// half (forwarder.h). The default keeps the first row within 2 s of the broker's return;
    /// a large fleet on one broker may want more, to spread its reconnects.
    int64_t reconnect_max_ms = 1'500;
    static constexpr int64_t reconnect_min_ms = 250;
    static constexpr int64_t reconnect_max_ms_limit = 3'600'000;
};

struct HealthConfig {
    std::string topic = "tidemark/{node_id}/health";  // status (LWT) goes to "<topic>/status"
    int64_t interval_ms = 10'000;
    /// Where the same figures go in Prometheus's text format, rewritten every interval, for
    /// node_exporter's textfile collector (an absolute path ending in ".prom"); empty: none.
    std::string prometheus_textfile;
    /// The same record also goes upstream, through the outbox (latest only: a newer record
    /// replaces one still waiting, lmdb::outbox_health_rows_max), retained on `topic` on the
    /// upstream broker, so that one broker shows a whole fleet. Needs an upstream section.
    bool upstream = false;
};

struct Config {
    std::string node_id;
    std::string data_dir = "/var/lib/tidemark";
    StorageConfig storage;
    CheckpointConfig checkpoint;
    SourceConfig source;
    std::optional<UpstreamConfig> upstream;  // absent: results stay in the outbox
    HealthConfig health;
    std::string log_level = "info";  // trace, debug, info, warn or error
    BackfillConfig backfill;
    std::vector<PipelineConfig> pipelines;
};

/// One thing wrong with a config: where (an RFC 6901 pointer into the document; "" for the
/// whole file) and a sentence that says what to do.
struct ConfigError {
    std::string pointer;
    std::string message;
    bool operator==(const ConfigError&) const = default;
};

using ConfigResult = std::expected<Config, std::vector<ConfigError>>;

/// Bytes of state each open window costs beyond its aggregates (keys, LMDB row and map overhead),
/// in the map-size budget.
inline constexpr uint64_t window_overhead_bytes = 64;

/// The map's share of the store's other residents, as check-config sums them against
/// storage.map_size (docs/CONFIG.md, "The map and the memory"):
/// - side output is bounded at 16 MiB, or a 16th of a smaller map (firmware passes this to the
///   store);
/// - an outbox or side row costs LMDB about twice its bytes: its page, the id index and the
///   window index of compaction (measured 1.76x for 250-byte results);
/// - LMDB keeps a reserve that only deletes may use (adapters/lmdb/env.cpp): a 32nd of the
///   map, 32 to 1024 pages of 4 KiB.
inline constexpr uint64_t side_bytes_max(uint64_t map_size_bytes) {
    return std::min<uint64_t>(uint64_t{16} << 20, map_size_bytes / 16);
}
inline constexpr uint64_t row_store_factor = 2;
inline constexpr uint64_t map_reserve_bytes(uint64_t map_size_bytes) {
    return std::clamp<uint64_t>(map_size_bytes / 32, 32 * 4096, 1024 * 4096);
}

/// Parses and validates a config file. Relative paths in it (data_dir, password_file, TLS
/// files) resolve against the file's directory. Every error is reported, not only the first.
ConfigResult load_config_file(const std::string& path);

/// As load_config_file, for text already in memory. `pointer_bytes` is the platform's pointer
/// width, which bounds storage.map_size (map_size_max_bytes); tests pass 4 to check a 32-bit
/// gateway's config on a 64-bit machine.
ConfigResult parse_config(std::string_view json, const std::string& base_dir_for_relative_files,
                          size_t pointer_bytes = sizeof(void*));

/// The version of a pipeline (its spec.version), computed from its typed definition:
/// "1m" and "60s" are the same version. Stable across builds: results' ids hash it.
std::string pipeline_version(const PipelineConfig& pipeline);

/// A pipeline's stored definition (PipelineConfig::definition) read back, as the config reader
/// reads it; the state-budget arithmetic is not repeated (it passed when it was the config).
std::expected<PipelineConfig, std::vector<ConfigError>> parse_pipeline_definition(
    std::string_view json);

/// "tcp://host:port" or "ssl://host:port" (an IPv6 host in brackets), or a sentence saying what
/// is wrong with `uri`, as check-config prints it.
std::expected<Endpoint, std::string> parse_broker_uri(std::string_view uri);

/// The refusal of a storage.map_size that a platform with `pointer_bytes`-byte pointers cannot
/// map, with the arithmetic and the fix; nullopt when it fits.
std::optional<ConfigError> check_map_size(uint64_t map_size_bytes,
                                          size_t pointer_bytes = sizeof(void*));

/// One error per line, "pointer: message" ("(root)" for the empty pointer), for check-config.
std::string format_errors(const std::vector<ConfigError>& errors);

std::string_view fsync_policy_name(FsyncPolicy policy);
std::string_view when_full_name(WhenFull when_full);

}  // namespace tidemark::config
