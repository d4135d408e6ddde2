// How tidemark's MQTT clients reach a broker: one plain struct shared by ingest, forwarder and
// health, and the translation of it into Paho's connect options.
#pragma once

#include <chrono>
#include <string>

#include "core/result.h"

namespace mqtt {
class connect_options;  // Paho C++ (<mqtt/connect_options.h>); forward-declared to keep it out.
}

namespace tidemark::mqtt {

/// Where and how to connect. Filled from the config's `source` / `upstream` sections.
struct BrokerOptions {
    std::string uri;        ///< tcp://host:port, or ssl://host:port for TLS
    std::string client_id;  ///< fixed: the broker keeps the persistent session under this id
    std::string username;   ///< empty = no user name sent
    std::string password;   ///< the secret itself (read from password_file by the config loader)
    std::string ca_file;    ///< TLS: CA bundle to verify the broker; all three empty = no TLS
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

/// True when the URI asks for TLS (ssl://).
bool uses_tls(const BrokerOptions& options);

/// Checks what a person wrote before any socket is opened: the URI scheme and port, a
/// non-empty client id, TLS files that exist and are readable and agree with the URI scheme,
/// a password without a user name, bounds of keep-alive and in-flight. Names the setting.
Result<void> validate(const BrokerOptions& options);

/// Fills Paho C++ connect options from `options` (validated first): MQTT 3.1.1, clean
/// session OFF (the broker keeps subscriptions and unacknowledged QoS1 messages while we are
/// away), keep-alive, in-flight window, user name / password, TLS with server certificate and
/// host name verification. Automatic reconnect is left OFF: each client runs its own backoff
/// loop (reconnect_delay) so that it can check the CONNACK's session-present flag.
Result<void> fill_connect_options(const BrokerOptions& options, ::mqtt::connect_options& out);

}  // namespace tidemark::mqtt
