// mqtt::BrokerOptions for a broker named by a uri ("tcp://127.0.0.1:PORT"), the way firmware
// fills them: the address parsed by the config's one URI parser into a typed endpoint.
#pragma once

#include <stdexcept>
#include <string>

#include "adapters/config/config.h"
#include "adapters/mqtt/client_options.h"

namespace tidemark::test {

/// Sets tls, host and port of `options` from `uri`. Throws std::invalid_argument with the
/// parser's message when `uri` is not a broker uri.
inline void set_address(mqtt::BrokerOptions& options, const std::string& uri) {
    auto endpoint = config::parse_broker_uri(uri);
    if (!endpoint) throw std::invalid_argument(endpoint.error());
    options.tls = endpoint->tls;
    options.host = endpoint->host;
    options.port = endpoint->port;
}

}  // namespace tidemark::test
