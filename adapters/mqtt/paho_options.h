// Paho's connect options from BrokerOptions (internal to adapters/mqtt): the C form for ingest,
// the C++ form for health, both in client_options.cpp so that credentials and TLS are mapped
// for Paho in one place.
#pragma once

#include <MQTTAsync.h>

#include "adapters/mqtt/client_options.h"
#include "core/result.h"

namespace mqtt {
class connect_options;  // Paho C++ (<mqtt/connect_options.h>)
}

namespace tidemark::mqtt {

/// Paho C's connect options and the TLS options they point to. Not copyable: `connect.ssl`
/// points at `ssl`. Holds pointers into the BrokerOptions it was filled from.
struct PahoConnect {
    MQTTAsync_connectOptions connect = MQTTAsync_connectOptions_initializer;
    MQTTAsync_SSLOptions ssl = MQTTAsync_SSLOptions_initializer;
    PahoConnect() = default;
    PahoConnect(const PahoConnect&) = delete;
    PahoConnect& operator=(const PahoConnect&) = delete;
};

/// Fills Paho C connect options from validated `options`: MQTT 3.1.1, clean
/// session OFF (the broker keeps subscriptions and unacknowledged QoS1 messages while we are
/// away), keep-alive, connect timeout, in-flight window, user name / password, TLS with server
/// certificate and host name verification. Automatic reconnect is left OFF: each client runs
/// its own backoff loop (reconnect_delay) so that it can check the CONNACK's session-present
/// flag. The callbacks and context are the caller's to set.
void fill_paho_connect(const BrokerOptions& options, PahoConnect& out);

/// The same in Paho C++'s connect options, after validate(options).
Result<void> fill_connect_options(const BrokerOptions& options, ::mqtt::connect_options& out);

}  // namespace tidemark::mqtt
