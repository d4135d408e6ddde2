#include "firmware/sink/sink_options.h"

#include "firmware/adapter_options.h"

namespace tidemark::firmware::sink {

mqtt::BrokerOptions source_options(const config::SinkConfig& config) {
    const config::SinkSourceConfig& s = config.source;
    return broker_options(s.endpoints, s.client_id, s.username, s.password, s.tls, "sink.source");
}

SpoolOptions spool_options(const config::SinkConfig& config) {
    SpoolOptions o;
    o.dir = config.spool.dir;
    o.fsync = log_fsync(config.spool.fsync);
    o.fsync_interval_ms = config.spool.fsync_interval_ms;
    o.max_bytes = config.spool.max_bytes;
    o.max_payload_bytes = config.source.max_payload_bytes;
    return o;
}

postgres::StoreOptions store_options(const config::SinkConfig& config) {
    postgres::StoreOptions o;
    o.conninfo = config.postgres.conninfo;
    o.password = config.postgres.password;
    o.schema = config.postgres.schema;
    o.application_name = "tidemark-sink " + config.source.client_id;
    return o;
}

WriterOptions writer_options(const config::SinkConfig& config) {
    WriterOptions o;
    o.store = store_options(config);
    o.client_id = config.source.client_id;
    o.batch_rows_max = config.batch.max_rows;
    o.batch_delay_ms = config.batch.max_delay_ms;
    return o;
}

mqtt::HealthOptions health_options(const config::SinkConfig& config, const core::Clock& clock) {
    mqtt::HealthOptions h;
    h.broker = source_options(config);
    h.broker.client_id += "-health";
    h.broker.config_name = "sink.health";
    h.topic = config.health_topic();
    h.status_topic = mqtt::status_topic_for(h.topic);
    h.interval_ms = config.health.interval_ms;
    h.clock = &clock;
    return h;
}

}  // namespace tidemark::firmware::sink
