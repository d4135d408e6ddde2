// Paho C's connect options from BrokerOptions (internal to adapters/mqtt): the one mapping of
// credentials, TLS and session settings onto Paho, for ingest (the only Paho client).
#pragma once

#include <MQTTAsync.h>

#include <cstdint>
#include <string>

#include "adapters/mqtt/client_options.h"

namespace tidemark::mqtt {

/// Paho C's connect options, the TLS options, the CONNECT properties and the one server URI
/// they point to. Not copyable: `connect.ssl`, `connect.connectProperties` and
/// `connect.serverURIs` point into it. Holds pointers into the BrokerOptions it was filled from.
struct PahoConnect {
    MQTTAsync_connectOptions connect = MQTTAsync_connectOptions_initializer5;
    MQTTAsync_SSLOptions ssl = MQTTAsync_SSLOptions_initializer;
    MQTTProperties properties = MQTTProperties_initializer;
    std::string uri;
    char* uris[1] = {nullptr};
    PahoConnect() = default;
    ~PahoConnect() { MQTTProperties_free(&properties); }
    PahoConnect(const PahoConnect&) = delete;
    PahoConnect& operator=(const PahoConnect&) = delete;
};

/// The Session Expiry Interval ingest asks for: never (MQTT 5, 3.1.2.11.2), what MQTT 3.1.1's
/// clean session 0 meant. With 0, the MQTT 5 default, the broker drops the session, our
/// subscriptions and every queued message at the first disconnect.
inline constexpr uint32_t session_expiry_never_s = 0xFFFFFFFF;

/// Fills Paho C connect options from validated `options` for one of its addresses, `address`
/// (the only server URI of this attempt: which node to try is the caller's, NodeRotation):
/// a persistent session (MQTT 5: clean start OFF and a session kept for ever; 3.1.1: clean
/// session OFF, which means the same), so the broker keeps subscriptions and unacknowledged QoS1
/// messages while we are away; keep-alive, connect timeout, in-flight window, user name /
/// password, TLS with server certificate and host name verification, and, with MQTT 5 and
/// `packet_bytes_max` > 0, CONNECT's Maximum Packet Size (the broker then never sends us a
/// larger packet: it drops it for us). Automatic reconnect is left OFF: the client runs its own
/// backoff loop so that it can check the CONNACK's session-present flag. The callbacks and
/// context are the caller's to set: Paho takes the *5 ones with MQTT 5 only, the others with
/// 3.1.1 only.
void fill_paho_connect(const BrokerOptions& options, const BrokerAddress& address,
                       uint32_t packet_bytes_max, MqttVersion version, PahoConnect& out);

}  // namespace tidemark::mqtt
