#include "adapters/mqtt/client_options.h"

#include <unistd.h>

#include <MQTTAsync.h>
#include <algorithm>

#include "adapters/mqtt/paho_options.h"

namespace tidemark::mqtt {

namespace {

constexpr int keep_alive_s_max = 65535;  // MQTT's keep-alive is a 16-bit field
constexpr int max_inflight_max = 65535;  // MQTT packet ids are 16 bits
constexpr int port_max = 65535;

Result<void> check_readable(const BrokerOptions& options, std::string_view key,
                            const std::string& path) {
    if (path.empty()) return {};
    if (::access(path.c_str(), R_OK) != 0) {
        return fail(options.config_name + ".tls." + std::string(key) + ": cannot read '" + path +
                    "': check the path and that the tidemark user may read it");
    }
    return {};
}

Result<void> check_addresses(const BrokerOptions& options) {
    const std::string& name = options.config_name;
    if (options.addresses.empty()) return fail(name + ".uri: no broker address");
    if (options.addresses.size() > broker_addresses_max) {
        return fail(name + ".uri: " + std::to_string(options.addresses.size()) +
                    " addresses, at most " + std::to_string(broker_addresses_max));
    }
    for (std::size_t i = 0; i < options.addresses.size(); ++i) {
        const BrokerAddress& a = options.addresses[i];
        if (a.host.empty()) return fail(name + ".host: must not be empty");
        if (a.port < 1 || a.port > port_max) {
            return fail(name + ".port: " + std::to_string(a.port) + " is outside 1..65535");
        }
        if (a.tls != options.addresses.front().tls) {
            return fail(name + ".uri: '" + broker_address(a) + "' and '" +
                        broker_address(options.addresses.front()) +
                        "' differ in transport: every address of one broker is ssl://, or every "
                        "one tcp://");
        }
        for (std::size_t j = 0; j < i; ++j) {
            if (options.addresses[j] == a) {
                return fail(name + ".uri: '" + broker_address(a) +
                            "' is listed twice: each node of a cluster once");
            }
        }
    }
    return {};
}

}  // namespace

std::string broker_address(const BrokerAddress& address) {
    const bool bracket = address.host.find(':') != std::string::npos;
    return std::string(address.tls ? "ssl://" : "tcp://") + (bracket ? "[" : "") + address.host +
           (bracket ? "]" : "") + ":" + std::to_string(address.port);
}

std::string broker_addresses(const BrokerOptions& options) {
    std::string out;
    for (const BrokerAddress& a : options.addresses)
        out += (out.empty() ? "" : ", ") + broker_address(a);
    return out;
}

Result<void> validate(const BrokerOptions& options) {
    const std::string& name = options.config_name;
    if (auto ok = check_addresses(options); !ok) return ok;
    if (options.client_id.empty()) {
        return fail(name + ".client_id: must not be empty: the broker keeps the persistent " +
                    "session under this id");
    }
    if (!options.password.empty() && options.username.empty()) {
        return fail(name + ": a password is set but no username");
    }
    if (options.keep_alive_s < 1 || options.keep_alive_s > keep_alive_s_max) {
        return fail(name + ": keep-alive " + std::to_string(options.keep_alive_s) +
                    " s is outside 1..65535 s");
    }
    if (options.max_inflight < 1 || options.max_inflight > max_inflight_max) {
        return fail(name + ".max_inflight: " + std::to_string(options.max_inflight) +
                    " is outside 1..65535");
    }
    if (options.connect_timeout_s < 1) {
        return fail(name + ": connect timeout must be at least 1 s");
    }
    const bool has_tls_files =
        !options.ca_file.empty() || !options.cert_file.empty() || !options.key_file.empty();
    for (const BrokerAddress& a : options.addresses) {
        if (has_tls_files && !a.tls) {
            return fail(name + ".tls is set but " + name + ".uri '" + broker_address(a) +
                        "' uses tcp://: use ssl:// or remove the tls section");
        }
    }
    if (options.cert_file.empty() != options.key_file.empty()) {
        return fail(name + ".tls: cert_file and key_file go together (client certificate)");
    }
    if (auto ok = check_readable(options, "ca_file", options.ca_file); !ok) return ok;
    if (auto ok = check_readable(options, "cert_file", options.cert_file); !ok) return ok;
    if (auto ok = check_readable(options, "key_file", options.key_file); !ok) return ok;
    return {};
}

// ---- Paho C: the one mapping of BrokerOptions onto its connect options (ingest).

void fill_paho_connect(const BrokerOptions& options, const BrokerAddress& address,
                       uint32_t packet_bytes_max, MqttVersion version, PahoConnect& out) {
    // Persistent session: the broker keeps subscriptions and queues QoS1 messages while we
    // are away, and redelivers the ones we did not acknowledge.
    out.connect.cleansession = 0;  // Paho refuses anything else with MQTT 5
    out.connect.cleanstart = 0;    // and this with anything but MQTT 5
    if (version == MqttVersion::v5) {
        out.connect.MQTTVersion = MQTTVERSION_5;
        // In MQTT 5 a persistent session also takes a session expiry beyond the connection.
        MQTTProperty expiry;
        expiry.identifier = MQTTPROPERTY_CODE_SESSION_EXPIRY_INTERVAL;
        expiry.value.integer4 = session_expiry_never_s;
        MQTTProperties_add(&out.properties, &expiry);
        if (packet_bytes_max > 0) {
            MQTTProperty packet;
            packet.identifier = MQTTPROPERTY_CODE_MAXIMUM_PACKET_SIZE;
            packet.value.integer4 = packet_bytes_max;
            MQTTProperties_add(&out.properties, &packet);
        }
        out.connect.connectProperties = &out.properties;
    } else {
        out.connect.MQTTVersion = MQTTVERSION_3_1_1;
        out.connect.connectProperties = nullptr;  // MQTT 5 only: Paho refuses it with 3.1.1
    }
    // This attempt's node only: Paho would otherwise try the next URI itself, behind the
    // client's backoff and its count of failovers.
    out.uri = broker_address(address);
    out.uris[0] = out.uri.data();
    out.connect.serverURIs = out.uris;
    out.connect.serverURIcount = 1;
    out.connect.keepAliveInterval = options.keep_alive_s;
    out.connect.connectTimeout = options.connect_timeout_s;
    out.connect.maxInflight = options.max_inflight;
    out.connect.retryInterval = 0;       // resend only on reconnect
    out.connect.automaticReconnect = 0;  // the client reconnects itself, to see session-present
    out.connect.username = options.username.empty() ? nullptr : options.username.c_str();
    out.connect.password = options.password.empty() ? nullptr : options.password.c_str();
    out.connect.ssl = nullptr;
    if (address.tls) {
        out.ssl.trustStore = options.ca_file.empty() ? nullptr : options.ca_file.c_str();
        out.ssl.keyStore = options.cert_file.empty() ? nullptr : options.cert_file.c_str();
        out.ssl.privateKey = options.key_file.empty() ? nullptr : options.key_file.c_str();
        out.ssl.enableServerCertAuth = 1;
        out.ssl.verify = 1;  // the host name must match the certificate
        out.connect.ssl = &out.ssl;
    }
}

}  // namespace tidemark::mqtt
