// How tidemark's MQTT clients reach a broker: one plain struct shared by ingest, forwarder and
// health, its checks, its address as the client libraries take it, and the reconnect backoff.
// The mapping onto each client library's connect options is in paho_options.h (Paho C, for
// ingest) and mosquitto_options.h (libmosquitto, for the forwarder and health), once per library.
#pragma once

#include <chrono>
#include <string>

#include "core/result.h"

namespace tidemark::mqtt {

/// Where and how to connect. Filled from the config's `source` / `upstream` sections.
struct BrokerOptions {
    /// The address, from the config's typed endpoint (config::parse_broker_uri, the one URI
    /// parser). true: TLS (ssl:// in the uri); false: plain TCP (tcp://).
    bool tls = false;
    std::string host;       ///< a host name or IP address; an IPv6 address without brackets
    int port = 0;           ///< 1..65535
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

/// Reconnect backoff shared by the clients: `min` doubling per failed attempt, capped at `max`
/// (ingest and health: 250 ms .. 30 s; the forwarder: upstream.reconnect_max).
inline constexpr std::chrono::milliseconds reconnect_delay_min{250};
inline constexpr std::chrono::milliseconds reconnect_delay_max{30'000};
std::chrono::milliseconds reconnect_delay(int failed_attempts,
                                          std::chrono::milliseconds min = reconnect_delay_min,
                                          std::chrono::milliseconds max = reconnect_delay_max);

/// The broker's address as Paho takes it and as messages name it: "tcp://host:port" or
/// "ssl://host:port", an IPv6 host in brackets.
std::string broker_address(const BrokerOptions& options);

/// True when the connection is TLS.
bool uses_tls(const BrokerOptions& options);

/// Checks what a person wrote before any socket is opened: the address (host and port; the
/// config parsed the uri), a non-empty client id, TLS files that exist and are readable and agree
/// with the transport, a password without a user name, bounds of keep-alive and in-flight.
/// Names the setting.
Result<void> validate(const BrokerOptions& options);

}  // namespace tidemark::mqtt
