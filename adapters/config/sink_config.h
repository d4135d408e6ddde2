// The sink's configuration (DESIGN.md section 10): a JSON file whose one top-level key is
// "sink", read as strictly as the appliance's (unknown keys are errors, each error names its
// JSON pointer; docs/SINK.md lists every key).
#pragma once

#include <cstdint>
#include <expected>
#include <optional>
#include <string>
#include <vector>

#include "adapters/config/config.h"

namespace tidemark::config {

enum class SinkProtocol { v5, v3_1_1 };

/// The upstream broker the results come from.
struct SinkSourceConfig {
    std::string uri;                  ///< as written (a list joined by ", ")
    std::vector<std::string> uris;    ///< each address as written: a broker or a cluster's nodes
    std::vector<Endpoint> endpoints;  ///< uris, parsed: the first first, then round the list
    Endpoint endpoint;                ///< endpoints.front()
    /// MQTT 5 (mosquitto 2.0) or 3.1.1 (nats-server 2.9 speaks nothing else).
    SinkProtocol protocol = SinkProtocol::v5;
    std::string client_id = "tidemark-sink";        ///< the persistent session's id: one per sink
    std::vector<std::string> topics{"tidemark/#"};  ///< filters; "$share/GROUP/..." allowed
    std::string username;
    std::string password;  ///< from password_file
    std::optional<TlsConfig> tls;
    /// A larger message is rejected (a row in `rejected` with a prefix of it), never spooled.
    uint64_t max_payload_bytes = 256ULL << 10;
};

struct SinkPostgresConfig {
    std::string conninfo;  ///< libpq's: "host=... dbname=... user=..." or postgresql://...
    std::string password;  ///< from password_file; empty: libpq's own (.pgpass, peer, trust)
    std::string schema = "tidemark";
};

struct SinkHealthConfig {
    std::string topic = "tidemark-sink/{client_id}/health";  ///< template; status beside it
    int64_t interval_ms = 10'000;
};

/// The local durable spool between the broker and the database (docs/DECISIONS.md, "The sink
/// acknowledges once its spool holds a message").
struct SinkSpoolConfig {
    std::string dir = "/var/lib/tidemark-sink/spool";
    /// Spooled and not yet committed: past this, the sink stops taking messages (the broker
    /// keeps them in the session) until the database has caught up.
    uint64_t max_bytes = 256ULL << 20;
    FsyncPolicy fsync = FsyncPolicy::interval;
    int64_t fsync_interval_ms = 1000;
};

/// How much one transaction holds.
struct SinkBatchConfig {
    uint64_t max_rows = 1000;  ///< messages per transaction
    /// How long the writer waits for a batch to fill once its first message is spooled.
    int64_t max_delay_ms = 50;
};

struct SinkConfig {
    SinkSourceConfig source;
    SinkPostgresConfig postgres;
    SinkHealthConfig health;
    SinkSpoolConfig spool;
    SinkBatchConfig batch;
    std::string log_level = "info";

    /// health.topic with {client_id} expanded.
    std::string health_topic() const;
};

using SinkConfigResult = std::expected<SinkConfig, std::vector<ConfigError>>;

/// Parses and checks a sink config file; relative paths resolve against its directory.
SinkConfigResult load_sink_config_file(const std::string& path);
SinkConfigResult parse_sink_config(std::string_view json, const std::string& base_dir);

/// Whether the file holds a JSON object with the key "sink" (so `tidemark check-config` knows
/// which reader to use). False when it cannot be read or parsed: the appliance's reader then
/// says why.
bool is_sink_config_file(const std::string& path);

}  // namespace tidemark::config
