// The mapping from the typed config to each adapter's own options: adapters never read the
// config themselves (DESIGN.md section 2), so this is the one place that knows both.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "adapters/codec/decoder.h"
#include "adapters/config/config.h"
#include "adapters/lmdb/types.h"
#include "adapters/log/log_options.h"
#include "adapters/mqtt/client_options.h"
#include "adapters/mqtt/forwarder.h"
#include "adapters/mqtt/health.h"
#include "adapters/mqtt/ingest.h"
#include "core/clock.h"

namespace tidemark::firmware {

/// The one mapping of a config's broker section (addresses, credentials, TLS files) onto the
/// adapters' BrokerOptions, for the gateway's source and upstream and the sink's source.
mqtt::BrokerOptions broker_options(const std::vector<config::Endpoint>& endpoints,
                                   const std::string& client_id, const std::string& username,
                                   const std::string& password,
                                   const std::optional<config::TlsConfig>& tls,
                                   std::string config_name);
/// config's fsync policy as the log (and the sink's spool, a log) takes it.
log::FsyncPolicy log_fsync(config::FsyncPolicy policy);
mqtt::BrokerOptions source_broker_options(const config::Config& config);
/// Ingest's options: retained messages as source.retained says, and the largest MQTT packet the
/// broker may send us (CONNECT's Maximum Packet Size): source.max_payload plus room for the
/// longest topic and the packet's headers and properties. A message between max_payload and
/// that is read and kept as malformed; a larger one the broker drops for us (OPERATIONS.md).
mqtt::IngestOptions ingest_options(const config::Config& config);
mqtt::BrokerOptions upstream_broker_options(const config::Config& config);

/// Where a data directory keeps the log and the state store: the one spelling of both paths.
std::string log_dir(const std::string& data_dir);
std::string state_dir(const std::string& data_dir);
/// The store as a command opens it: under data_dir/state, with the map size of `config` when
/// there is one (null: the store's default), read-only beside a running service unless
/// `read_only` is false (inspect --drop-pipeline, with the service stopped).
lmdb::StoreOptions command_store_options(const std::string& data_dir, const config::Config* config,
                                         bool read_only);

/// The log under data_dir/log, with the configured fsync policy, segment size and retention.
log::LogOptions log_options(const config::Config& config);
/// The service's read-write store under data_dir/state, with the outbox bounds of `upstream`
/// (the store's defaults when there is no upstream: rows then only wait to be inspected) and
/// compaction as the config says, with or without upstream: a node that compacted while it had
/// no upstream would forward only the latest revisions once it has one.
lmdb::StoreOptions store_options(const config::Config& config);
/// Needs config.upstream. `clock` must outlive the forwarder.
mqtt::ForwarderOptions forwarder_options(const config::Config& config, const core::Clock& clock);
/// The health publisher on the gateway broker, under a client id of its own (source client id
/// + "-health"). `clock` must outlive the publisher.
mqtt::HealthOptions health_options(const config::Config& config, const core::Clock& clock);

/// What one pipeline's decoder reads: its topic filter, key and partition sources, event
/// time and field pointers.
codec::DecoderSpec decoder_spec(const config::PipelineConfig& pipeline);

}  // namespace tidemark::firmware
