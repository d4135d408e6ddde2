// mqtt::BrokerOptions for a broker named by a uri ("tcp://127.0.0.1:PORT"), the way firmware
// fills them: the address parsed by the config's one URI parser into a typed endpoint.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "adapters/config/config.h"
#include "adapters/mqtt/client_options.h"

namespace tidemark::test {

/// Makes `uri` the one address of `options`. Throws std::invalid_argument with the parser's
/// message when `uri` is not a broker uri.
inline void set_address(mqtt::BrokerOptions& options, const std::string& uri) {
    auto endpoint = config::parse_broker_uri(uri);
    if (!endpoint) throw std::invalid_argument(endpoint.error());
    options.addresses = {{endpoint->tls, endpoint->host, endpoint->port}};
}

/// Makes `uris` the addresses of `options` (a cluster's nodes), in that order.
inline void set_addresses(mqtt::BrokerOptions& options, const std::vector<std::string>& uris) {
    options.addresses.clear();
    for (const std::string& uri : uris) {
        auto endpoint = config::parse_broker_uri(uri);
        if (!endpoint) throw std::invalid_argument(endpoint.error());
        options.addresses.push_back({endpoint->tls, endpoint->host, endpoint->port});
    }
}

}  // namespace tidemark::test
