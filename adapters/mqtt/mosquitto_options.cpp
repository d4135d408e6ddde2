#include "adapters/mqtt/mosquitto_options.h"

#include <mutex>
#include <string>

namespace tidemark::mqtt {
namespace {

// An encrypted private key has no one to type its passphrase under systemd: refuse it with
// OpenSSL's own error instead of prompting on a terminal.
int no_passphrase(char*, int, int, void*) {
    return 0;
}

Result<void> apply_tls(mosquitto* mosq, const BrokerOptions& broker) {
    auto or_null = [](const std::string& s) { return s.empty() ? nullptr : s.c_str(); };
    if (broker.ca_file.empty()) {
        // No CA named: the system's trust store, as a browser would.
        mosquitto_int_option(mosq, MOSQ_OPT_TLS_USE_OS_CERTS, 1);
    }
    int rc = mosquitto_tls_set(mosq, or_null(broker.ca_file), nullptr, or_null(broker.cert_file),
                               or_null(broker.key_file), no_passphrase);
    if (rc != MOSQ_ERR_SUCCESS) {
        return fail(broker.config_name + ".tls: cannot use ca_file '" + broker.ca_file +
                    "', cert_file '" + broker.cert_file + "', key_file '" + broker.key_file +
                    "': " + mosquitto_strerror(rc));
    }
    // Verify the broker's certificate chain and that it names the host in the address.
    rc = mosquitto_tls_opts_set(mosq, 1 /* SSL_VERIFY_PEER */, nullptr, nullptr);
    if (rc == MOSQ_ERR_SUCCESS) rc = mosquitto_tls_insecure_set(mosq, false);
    if (rc != MOSQ_ERR_SUCCESS) {
        return fail(broker.config_name + ".tls: " + mosquitto_strerror(rc));
    }
    return {};
}

}  // namespace

void mosquitto_library_init() {
    static std::once_flag once;
    std::call_once(once, [] { mosquitto_lib_init(); });
}

Result<void> apply_mosquitto_options(mosquitto* mosq, const BrokerOptions& broker,
                                     const BrokerAddress& node) {
    mosquitto_int_option(mosq, MOSQ_OPT_PROTOCOL_VERSION, MQTT_PROTOCOL_V311);
    if (!broker.username.empty()) {
        const int rc =
            mosquitto_username_pw_set(mosq, broker.username.c_str(),
                                      broker.password.empty() ? nullptr : broker.password.c_str());
        if (rc != MOSQ_ERR_SUCCESS) {
            return fail(broker.config_name +
                        ": user name or password refused by the client: " + mosquitto_strerror(rc));
        }
    }
    if (node.tls) return apply_tls(mosq, broker);
    return {};
}

}  // namespace tidemark::mqtt
