#include "firmware/adapter_options.h"

namespace tidemark::firmware {

mqtt::BrokerOptions source_broker_options(const config::Config& config) {
    mqtt::BrokerOptions b;
    b.uri = config.source.uri;
    b.client_id = config.source.client_id;
    b.username = config.source.username;
    b.password = config.source.password;
    if (config.source.tls) {
        b.ca_file = config.source.tls->ca_file;
        b.cert_file = config.source.tls->cert_file;
        b.key_file = config.source.tls->key_file;
    }
    b.config_name = "source";
    return b;
}

mqtt::BrokerOptions upstream_broker_options(const config::Config& config) {
    mqtt::BrokerOptions b;
    const config::UpstreamConfig& u = *config.upstream;
    b.uri = u.uri;
    b.client_id = u.client_id;
    b.username = u.username;
    b.password = u.password;
    if (u.tls) {
        b.ca_file = u.tls->ca_file;
        b.cert_file = u.tls->cert_file;
        b.key_file = u.tls->key_file;
    }
    b.max_inflight = static_cast<int>(u.max_inflight);
    b.config_name = "upstream";
    return b;
}

}  // namespace tidemark::firmware
