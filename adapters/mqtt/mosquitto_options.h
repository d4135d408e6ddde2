// libmosquitto's options from BrokerOptions (internal to adapters/mqtt): the one mapping of
// credentials and TLS onto this library, for the forwarder and the health publisher.
#pragma once

#include <mosquitto.h>

#include "adapters/mqtt/client_options.h"
#include "core/result.h"

namespace tidemark::mqtt {

// libmosquitto's global set-up (OpenSSL, sockets) is not thread-safe: once per process.
void mosquitto_library_init();

/// MQTT 3.1.1, the user name and password, and, when `node` (one of options.addresses) is
/// ssl://, TLS that verifies the broker's certificate chain and host name (the system's trust
/// store when no ca_file is named; an encrypted private key is refused rather than prompted
/// for). Errors name the setting (options.config_name).
Result<void> apply_mosquitto_options(mosquitto* mosq, const BrokerOptions& options,
                                     const BrokerAddress& node);

}  // namespace tidemark::mqtt
