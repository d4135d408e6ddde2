#include "adapters/mqtt/client_options.h"

#include <unistd.h>

#include <mqtt/connect_options.h>
#include <mqtt/ssl_options.h>
#include <algorithm>
#include <charconv>
#include <exception>

namespace tidemark::mqtt {

namespace {

constexpr int keep_alive_s_max = 65535;  // MQTT's keep-alive is a 16-bit field
constexpr int max_inflight_max = 65535;  // MQTT packet ids are 16 bits

bool starts_with(std::string_view text, std::string_view prefix) {
    return text.substr(0, prefix.size()) == prefix;
}

Result<void> check_readable(const BrokerOptions& options, std::string_view key,
                            const std::string& path) {
    if (path.empty()) return {};
    if (::access(path.c_str(), R_OK) != 0) {
        return fail(options.config_name + ".tls." + std::string(key) + ": cannot read '" + path +
                    "': check the path and that the tidemark user may read it");
    }
    return {};
}

}  // namespace

std::chrono::milliseconds reconnect_delay(int failed_attempts, std::chrono::milliseconds min,
                                          std::chrono::milliseconds max) {
    TM_ASSERT(failed_attempts >= 0 && min.count() > 0 && max >= min);
    auto delay = min;
    for (int i = 0; i < failed_attempts && delay < max; ++i)
        delay *= 2;
    return std::min(delay, max);
}

bool uses_tls(const BrokerOptions& options) {
    return starts_with(options.uri, "ssl://");
}

Result<void> validate(const BrokerOptions& options) {
    const std::string& name = options.config_name;
    std::string_view rest;
    if (starts_with(options.uri, "tcp://")) {
        rest = std::string_view(options.uri).substr(6);
    } else if (starts_with(options.uri, "ssl://")) {
        rest = std::string_view(options.uri).substr(6);
    } else {
        return fail(name + ".uri: '" + options.uri +
                    "' must start with tcp:// or ssl:// (for example tcp://127.0.0.1:1883)");
    }
    const auto colon = rest.rfind(':');
    if (colon == std::string_view::npos || colon == 0) {
        return fail(name + ".uri: '" + options.uri + "' needs a host and a port, as host:port");
    }
    const std::string_view port_text = rest.substr(colon + 1);
    int port = 0;
    const auto [end, ec] =
        std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
    if (ec != std::errc{} || end != port_text.data() + port_text.size() || port < 1 ||
        port > 65535) {
        return fail(name + ".uri: '" + options.uri + "' has no valid port (1..65535)");
    }
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
    if (has_tls_files && !uses_tls(options)) {
        return fail(name + ".tls is set but " + name + ".uri '" + options.uri +
                    "' uses tcp://: use ssl:// or remove the tls section");
    }
    if (options.cert_file.empty() != options.key_file.empty()) {
        return fail(name + ".tls: cert_file and key_file go together (client certificate)");
    }
    if (auto ok = check_readable(options, "ca_file", options.ca_file); !ok) return ok;
    if (auto ok = check_readable(options, "cert_file", options.cert_file); !ok) return ok;
    if (auto ok = check_readable(options, "key_file", options.key_file); !ok) return ok;
    return {};
}

Result<void> fill_connect_options(const BrokerOptions& options, ::mqtt::connect_options& out) {
    if (auto ok = validate(options); !ok) return ok;
    try {
        out.set_mqtt_version(MQTTVERSION_3_1_1);
        // Persistent session: the broker keeps our subscriptions and queues QoS1 messages
        // (and redelivers unacknowledged ones) while we are disconnected.
        out.set_clean_session(false);
        out.set_keep_alive_interval(options.keep_alive_s);
        out.set_connect_timeout(options.connect_timeout_s);
        out.set_max_inflight(options.max_inflight);
        out.set_automatic_reconnect(false);
        if (!options.username.empty()) out.set_user_name(options.username);
        if (!options.password.empty()) out.set_password(options.password);
        if (uses_tls(options)) {
            ::mqtt::ssl_options ssl;
            if (!options.ca_file.empty()) ssl.set_trust_store(options.ca_file);
            if (!options.cert_file.empty()) ssl.set_key_store(options.cert_file);
            if (!options.key_file.empty()) ssl.set_private_key(options.key_file);
            ssl.set_enable_server_cert_auth(true);
            ssl.set_verify(true);  // host name must match the certificate
            out.set_ssl(std::move(ssl));
        }
    } catch (const std::exception& e) {
        return fail(options.config_name + ": cannot build MQTT connect options: " + e.what());
    }
    return {};
}

}  // namespace tidemark::mqtt
