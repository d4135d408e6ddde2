// The Paho C mapping (ingest) and the Paho C++ mapping (health) of BrokerOptions must say the
// same: a setting that one client honours and the other ignores would pass every other test.
#include <mqtt/connect_options.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <fstream>
#include <string>

#include "adapters/mqtt/paho_options.h"

using namespace tidemark::mqtt;

namespace {

// An unset C string and an empty C++ string both mean "not given".
std::string text(const char* s) {
    return s == nullptr ? std::string() : std::string(s);
}

void check_same(const BrokerOptions& options) {
    PahoConnect c;
    fill_paho_connect(options, c);
    ::mqtt::connect_options cpp;
    REQUIRE(fill_connect_options(options, cpp));
    CHECK(cpp.get_mqtt_version() == c.connect.MQTTVersion);
    CHECK(cpp.is_clean_session() == (c.connect.cleansession != 0));
    CHECK(cpp.get_keep_alive_interval().count() == c.connect.keepAliveInterval);
    CHECK(cpp.get_connect_timeout().count() == c.connect.connectTimeout);
    CHECK(cpp.get_max_inflight() == c.connect.maxInflight);
    CHECK(cpp.get_automatic_reconnect() == (c.connect.automaticReconnect != 0));
    CHECK(cpp.get_user_name() == text(c.connect.username));
    CHECK(cpp.get_password_str() == text(c.connect.password));
    // Paho C++ keeps its ssl_options whether or not they are set: compare them when C has TLS.
    if (c.connect.ssl != nullptr) {
        const ::mqtt::ssl_options& ssl = cpp.get_ssl_options();
        CHECK(ssl.get_trust_store() == text(c.ssl.trustStore));
        CHECK(ssl.get_key_store() == text(c.ssl.keyStore));
        CHECK(ssl.get_private_key() == text(c.ssl.privateKey));
        CHECK(ssl.get_enable_server_cert_auth() == (c.ssl.enableServerCertAuth != 0));
        CHECK(ssl.get_verify() == (c.ssl.verify != 0));
    } else {
        CHECK_FALSE(options.tls);
    }
}

}  // namespace

TEST_CASE("Paho C and Paho C++ connect options say the same", "[mqtt][options]") {
    BrokerOptions plain;
    plain.host = "127.0.0.1";
    plain.port = 1883;
    plain.client_id = "gw-01";
    plain.keep_alive_s = 17;
    plain.connect_timeout_s = 3;
    plain.max_inflight = 33;
    check_same(plain);

    BrokerOptions with_user = plain;
    with_user.username = "gateway";
    with_user.password = "s3cret";
    check_same(with_user);

    // TLS files must exist to pass validate(): any readable file will do for the mapping.
    const std::string pem = "/tmp/tidemark_paho_options_test.pem";
    std::ofstream(pem) << "not a certificate\n";
    BrokerOptions tls = with_user;
    tls.tls = true;
    tls.port = 8883;
    tls.ca_file = pem;
    tls.cert_file = pem;
    tls.key_file = pem;
    check_same(tls);

    BrokerOptions tls_system_store = plain;
    tls_system_store.tls = true;
    check_same(tls_system_store);
}
