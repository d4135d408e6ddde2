// How tidemark's MQTT clients reach a broker: one plain struct shared by ingest, forwarder and
// health, its checks, its addresses as the client libraries take them, and the reconnect
// backoff's bounds (the arithmetic is core/backoff.h's). The mapping onto each client library's
// connect options is in paho_options.h (Paho C, for ingest) and mosquitto_options.h
// (libmosquitto, for the forwarder and health), once per library; which address a client tries
// next is node_rotation.h's.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include "core/backoff.h"
#include "core/result.h"

namespace tidemark::mqtt {

/// One address of a broker: the broker itself, or one node of a cluster. From the config's
/// typed endpoint (config::parse_broker_uri, the one URI parser).
struct BrokerAddress {
    bool tls = false;  ///< true: TLS (ssl:// in the uri); false: plain TCP (tcp://)
    std::string host;  ///< a host name or IP address; an IPv6 address without brackets
    int port = 0;      ///< 1..65535
    bool operator==(const BrokerAddress&) const = default;
};

/// The protocol a Paho client (ingest) speaks. MQTT 5 (the default) sends CONNECT's Maximum
/// Packet Size, so the broker never sends a larger packet; 3.1.1 is for brokers without MQTT 5
/// (nats-server 2.9 answers an MQTT 5 CONNECT with "Unsupported Protocol Version"), where a
/// large message is read before the handler can refuse it. libmosquitto's clients (forwarder,
/// health) always speak 3.1.1.
enum class MqttVersion { v5, v3_1_1 };

/// The most addresses one broker may be given (the nodes of a cluster a client knows): bounds
/// the list, and so one round of it.
inline constexpr std::size_t broker_addresses_max = 16;

/// Where and how to connect. Filled from the config's `source` / `upstream` sections.
struct BrokerOptions {
    /// One address, or the nodes of a cluster (DESIGN.md section 11): the first is tried
    /// first; after a refused or lost connection the client moves to the next, round the list
    /// (NodeRotation), with the usual backoff. Not empty, at most broker_addresses_max, no
    /// address twice.
    std::vector<BrokerAddress> addresses;
    std::string client_id;  ///< fixed: the broker keeps the persistent session under this id
    std::string username;   ///< empty = no user name sent
    std::string password;   ///< the secret itself (read from password_file by the config loader)
    std::string ca_file;    ///< TLS: CA bundle to verify the broker; empty = the system's store
    std::string cert_file;  ///< TLS: client certificate (optional, with key_file)
    std::string key_file;   ///< TLS: client private key (optional, with cert_file)
    int keep_alive_s = 30;
    /// Outbound QoS1 publishes awaiting PUBACK (forwarder, health). Bounded, never 0.
    int max_inflight = 64;
    int connect_timeout_s = 10;
    /// Prefix for error messages, e.g. "source" or "upstream", so a person finds the setting.
    std::string config_name = "broker";
};

/// The reconnect backoff of ingest and health (core::Backoff: 250 ms doubling to 30 s, equal
/// jitter drawn by each client); the forwarder's maximum is upstream.reconnect_max.
inline constexpr core::Backoff reconnect_backoff{250, 30'000};

/// The cap of core::Backoff{min, max} after `failed_attempts` (no jitter), for the service's
/// own retry waits (restarting ingest, retrying an append).
inline std::chrono::milliseconds reconnect_delay(
    int failed_attempts,
    std::chrono::milliseconds min = std::chrono::milliseconds(reconnect_backoff.min_ms),
    std::chrono::milliseconds max = std::chrono::milliseconds(reconnect_backoff.max_ms)) {
    return std::chrono::milliseconds(
        core::Backoff{min.count(), max.count()}.cap_ms(failed_attempts));
}

/// An address as Paho takes it and as messages name it: "tcp://host:port" or
/// "ssl://host:port", an IPv6 host in brackets.
std::string broker_address(const BrokerAddress& address);

/// Every address of `options`, ", "-separated, for messages.
std::string broker_addresses(const BrokerOptions& options);

/// Checks what a person wrote before any socket is opened: every address (host and port; the
/// config parsed the uris; at most broker_addresses_max, none twice), a non-empty client id, TLS
/// files that exist and are readable and agree with every address's transport, a password
/// without a user name, bounds of keep-alive and in-flight. Names the setting.
Result<void> validate(const BrokerOptions& options);

}  // namespace tidemark::mqtt
