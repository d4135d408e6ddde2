#include "firmware/adapter_options.h"

#include "adapters/codec/topic.h"
#include "adapters/log/record.h"
#include "core/result.h"

namespace tidemark::firmware {

mqtt::BrokerOptions broker_options(const std::vector<config::Endpoint>& endpoints,
                                   const std::string& client_id, const std::string& username,
                                   const std::string& password,
                                   const std::optional<config::TlsConfig>& tls,
                                   std::string config_name) {
    mqtt::BrokerOptions b;
    for (const config::Endpoint& e : endpoints)
        b.addresses.push_back({e.tls, e.host, e.port});
    b.client_id = client_id;
    b.username = username;
    b.password = password;
    if (tls) {
        b.ca_file = tls->ca_file;
        b.cert_file = tls->cert_file;
        b.key_file = tls->key_file;
    }
    b.config_name = std::move(config_name);
    return b;
}

mqtt::BrokerOptions source_broker_options(const config::Config& config) {
    const config::SourceConfig& s = config.source;
    return broker_options(s.endpoints, s.client_id, s.username, s.password, s.tls, "source");
}

namespace {

// What an MQTT 5 PUBLISH holds beside its payload: the fixed header (1 + up to 4 bytes), the
// topic (2 + up to topic_bytes_max), the packet id (2) and the properties (a varint and what
// the publisher attached). 1 KiB covers the headers and ordinary properties; a publisher whose
// properties are larger sees its messages dropped for us by the broker (OPERATIONS.md).
constexpr uint64_t publish_overhead_bytes = log::topic_bytes_max + 2 + 1024;

}  // namespace

mqtt::IngestOptions ingest_options(const config::Config& config) {
    mqtt::IngestOptions io;
    io.accept_retained = config.source.accept_retained;
    const uint64_t packet = config.source.max_payload_bytes + publish_overhead_bytes;
    static_assert(config::SourceConfig::max_payload_bytes_limit + publish_overhead_bytes <
                  (uint64_t{1} << 28));  // MQTT's own limit: a 4-byte remaining length
    io.packet_bytes_max = static_cast<uint32_t>(packet);
    io.subscriptions_file = config.data_dir + "/ingest-subscriptions";
    return io;
}

mqtt::BrokerOptions upstream_broker_options(const config::Config& config) {
    const config::UpstreamConfig& u = *config.upstream;
    mqtt::BrokerOptions b =
        broker_options(u.endpoints, u.client_id, u.username, u.password, u.tls, "upstream");
    b.max_inflight = static_cast<int>(u.max_inflight);
    return b;
}

log::FsyncPolicy log_fsync(config::FsyncPolicy policy) {
    switch (policy) {
        case config::FsyncPolicy::always:
            return log::FsyncPolicy::always;
        case config::FsyncPolicy::interval:
            return log::FsyncPolicy::interval;
        case config::FsyncPolicy::never:
            return log::FsyncPolicy::never;
    }
    TM_ASSERT(false);
    return log::FsyncPolicy::interval;
}

std::string log_dir(const std::string& data_dir) {
    return data_dir + "/log";
}

std::string state_dir(const std::string& data_dir) {
    return data_dir + "/state";
}

lmdb::StoreOptions command_store_options(const std::string& data_dir, const config::Config* config,
                                         bool read_only) {
    lmdb::StoreOptions so;
    so.dir = state_dir(data_dir);
    so.read_only = read_only;
    if (config) so.map_size_bytes = config->storage.map_size_bytes;
    return so;
}

log::LogOptions log_options(const config::Config& config) {
    log::LogOptions lo;
    lo.dir = log_dir(config.data_dir);
    lo.fsync = log_fsync(config.storage.fsync);
    lo.fsync_interval_ms = config.storage.fsync_interval_ms;
    lo.segment_bytes = config.storage.segment_bytes;
    lo.retention_bytes_max = config.storage.log_retention.max_bytes;
    lo.retention_age_ms_max = config.storage.log_retention.max_age_ms;
    lo.compression = config.storage.log_compression == config::LogCompression::zstd
                         ? log::Compression::zstd
                         : log::Compression::none;
    return lo;
}

lmdb::StoreOptions store_options(const config::Config& config) {
    lmdb::StoreOptions so;
    so.dir = state_dir(config.data_dir);
    so.map_size_bytes = config.storage.map_size_bytes;
    so.read_only = false;
    so.side_bytes_max = config::side_bytes_max(config.storage.map_size_bytes);  // as budgeted
    so.compact_superseded = config::UpstreamConfig{}.compact_superseded;
    if (config.upstream) {
        so.outbox_bytes_max = config.upstream->outbox.max_bytes;
        so.outbox_when_full = config.upstream->outbox.when_full == config::WhenFull::pause_ingest
                                  ? lmdb::WhenFull::pause_ingest
                                  : lmdb::WhenFull::drop_oldest;
        so.compact_superseded = config.upstream->compact_superseded;
    }
    return so;
}

mqtt::ForwarderOptions forwarder_options(const config::Config& config, const core::Clock& clock) {
    TM_ASSERT(config.upstream.has_value());
    mqtt::ForwarderOptions fo;
    fo.broker = upstream_broker_options(config);
    fo.qos = config.upstream->qos;
    fo.reconnect_delay_min_ms = config::UpstreamConfig::reconnect_min_ms;
    fo.reconnect_delay_max_ms = config.upstream->reconnect_max_ms;
    fo.clock = &clock;
    return fo;
}

mqtt::HealthOptions health_options(const config::Config& config, const core::Clock& clock) {
    mqtt::HealthOptions ho;
    ho.broker = source_broker_options(config);
    ho.broker.client_id += "-health";
    ho.broker.config_name = "health";
    ho.topic = codec::expand_topic_template(config.health.topic, config.node_id, "", "");
    ho.status_topic = mqtt::status_topic_for(ho.topic);
    ho.interval_ms = config.health.interval_ms;
    ho.clock = &clock;
    return ho;
}

namespace {

std::vector<codec::KeySource> to_codec(const std::vector<config::Extractor>& parts) {
    std::vector<codec::KeySource> out;
    for (const config::Extractor& e : parts) {
        out.push_back({e.kind == config::Extractor::topic_level ? codec::KeySource::topic_level
                                                                : codec::KeySource::json_pointer,
                       e.level, e.pointer});
    }
    return out;
}

codec::TimeFormat to_codec(config::TimestampSpec::Format format) {
    switch (format) {
        case config::TimestampSpec::epoch_s:
            return codec::TimeFormat::epoch_s;
        case config::TimestampSpec::epoch_ms:
            return codec::TimeFormat::epoch_ms;
        case config::TimestampSpec::epoch_us:
            return codec::TimeFormat::epoch_us;
        case config::TimestampSpec::epoch_ns:
            return codec::TimeFormat::epoch_ns;
        case config::TimestampSpec::rfc3339:
            return codec::TimeFormat::rfc3339;
    }
    TM_ASSERT(false);
    return codec::TimeFormat::epoch_ms;
}

}  // namespace

codec::DecoderSpec decoder_spec(const config::PipelineConfig& pipeline) {
    TM_ASSERT(!pipeline.key.empty());
    TM_ASSERT(pipeline.field_pointers.size() == pipeline.spec.fields.size());
    codec::DecoderSpec d;
    d.topic_filter = pipeline.topic_filter;
    d.key = to_codec(pipeline.key);
    d.partition = to_codec(pipeline.partition);
    d.timestamp = {pipeline.timestamp.ingest, pipeline.timestamp.pointer,
                   to_codec(pipeline.timestamp.format)};
    d.field_pointers = pipeline.field_pointers;
    return d;
}

}  // namespace tidemark::firmware
