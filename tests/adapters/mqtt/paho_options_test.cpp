// The Paho C mapping of BrokerOptions (ingest): a persistent MQTT 5 session (clean start off
// and a session that never expires: with MQTT 5's default expiry of 0 the broker would drop
// the session and every queued message at the first disconnect), the packet limit, credentials
// and TLS as given.
#include <catch2/catch.hpp>
#include <cstring>
#include <fstream>
#include <string>

#include "adapters/mqtt/paho_options.h"

using namespace tidemark::mqtt;

namespace {

// Paho C tracks its allocations in a heap table it sets up with its first client: without one,
// MQTTProperties_free leaves the table's entry for the array behind (LeakSanitizer reports it;
// a 10-line program with MQTTProperties_add and _free alone shows the same). Ingest always has
// its client before it fills connect options; this test makes one once, as ingest does.
void paho_initialised() {
    static const bool once = [] {
        MQTTAsync client = nullptr;
        REQUIRE(MQTTAsync_create(&client, "tcp://127.0.0.1:1", "paho-options-test",
                                 MQTTCLIENT_PERSISTENCE_NONE, nullptr) == MQTTASYNC_SUCCESS);
        MQTTAsync_destroy(&client);
        return true;
    }();
    (void)once;
}

std::string text(const char* s) {
    return s == nullptr ? std::string() : std::string(s);
}

void check_mapping(const BrokerOptions& options, uint32_t packet_bytes_max) {
    paho_initialised();
    PahoConnect c;
    const BrokerAddress& node = options.addresses.back();
    fill_paho_connect(options, node, packet_bytes_max, MqttVersion::v5, c);
    // This attempt's node only: which node to try is the client's (NodeRotation).
    REQUIRE(c.connect.serverURIcount == 1);
    CHECK(text(c.connect.serverURIs[0]) == broker_address(node));
    CHECK(c.connect.MQTTVersion == MQTTVERSION_5);
    CHECK(c.connect.cleanstart == 0);
    CHECK(c.connect.cleansession == 0);  // Paho refuses MQTT 5 with anything else
    REQUIRE(c.connect.connectProperties == &c.properties);
    // Paho returns the 4-byte value as an int.
    CHECK(static_cast<uint32_t>(MQTTProperties_getNumericValue(
              &c.properties, MQTTPROPERTY_CODE_SESSION_EXPIRY_INTERVAL)) == session_expiry_never_s);
    if (packet_bytes_max > 0) {
        CHECK(static_cast<uint32_t>(MQTTProperties_getNumericValue(
                  &c.properties, MQTTPROPERTY_CODE_MAXIMUM_PACKET_SIZE)) == packet_bytes_max);
    } else {
        CHECK_FALSE(
            MQTTProperties_hasProperty(&c.properties, MQTTPROPERTY_CODE_MAXIMUM_PACKET_SIZE));
    }
    CHECK(c.connect.keepAliveInterval == options.keep_alive_s);
    CHECK(c.connect.connectTimeout == options.connect_timeout_s);
    CHECK(c.connect.maxInflight == options.max_inflight);
    CHECK(c.connect.automaticReconnect == 0);
    CHECK(text(c.connect.username) == options.username);
    CHECK(text(c.connect.password) == options.password);
    if (node.tls) {
        REQUIRE(c.connect.ssl == &c.ssl);
        CHECK(text(c.ssl.trustStore) == options.ca_file);
        CHECK(text(c.ssl.keyStore) == options.cert_file);
        CHECK(text(c.ssl.privateKey) == options.key_file);
        CHECK(c.ssl.enableServerCertAuth == 1);
        CHECK(c.ssl.verify == 1);
    } else {
        CHECK(c.connect.ssl == nullptr);
    }
}

}  // namespace

TEST_CASE("Paho C connect options: a persistent MQTT 5 session, as configured", "[mqtt][options]") {
    BrokerOptions plain;
    plain.addresses = {{false, "127.0.0.1", 1883}};
    plain.client_id = "gw-01";
    plain.keep_alive_s = 17;
    plain.connect_timeout_s = 3;
    plain.max_inflight = 33;
    check_mapping(plain, 0);
    check_mapping(plain, 65536 + 1024);

    BrokerOptions with_user = plain;
    with_user.username = "gateway";
    with_user.password = "s3cret";
    check_mapping(with_user, 0);

    // TLS files must exist to pass validate(): any readable file will do for the mapping.
    const std::string pem = "/tmp/tidemark_paho_options_test.pem";
    std::ofstream(pem) << "not a certificate\n";
    BrokerOptions tls = with_user;
    tls.addresses = {{true, "127.0.0.1", 8883}};
    tls.ca_file = pem;
    tls.cert_file = pem;
    tls.key_file = pem;
    check_mapping(tls, 1 << 20);

    BrokerOptions tls_system_store = plain;
    tls_system_store.addresses = {{true, "127.0.0.1", 8883}};
    check_mapping(tls_system_store, 0);

    BrokerOptions cluster = plain;  // the last node is the one check_mapping connects to
    cluster.addresses = {
        {false, "127.0.0.1", 4001}, {false, "127.0.0.1", 4002}, {false, "::1", 4003}};
    check_mapping(cluster, 0);
}

TEST_CASE("Paho C connect options for MQTT 3.1.1: a persistent session, no properties",
          "[mqtt][options]") {
    BrokerOptions plain;
    plain.addresses = {{false, "127.0.0.1", 4222}, {false, "127.0.0.1", 4223}};
    plain.client_id = "sink-1";
    paho_initialised();
    PahoConnect c;
    fill_paho_connect(plain, plain.addresses[1], 1 << 20, MqttVersion::v3_1_1, c);
    CHECK(c.connect.MQTTVersion == MQTTVERSION_3_1_1);
    CHECK(c.connect.cleansession == 0);  // a persistent session in 3.1.1's words
    CHECK(c.connect.cleanstart == 0);
    CHECK(c.connect.connectProperties == nullptr);  // Paho refuses properties with 3.1.1
    REQUIRE(c.connect.serverURIcount == 1);
    CHECK(text(c.connect.serverURIs[0]) == "tcp://127.0.0.1:4223");
}

TEST_CASE("broker addresses: every one checked, none twice, one transport", "[mqtt][options]") {
    BrokerOptions o;
    o.client_id = "gw";
    o.config_name = "upstream";
    CHECK_FALSE(validate(o).has_value());  // no address
    o.addresses = {{false, "127.0.0.1", 4001}, {false, "127.0.0.1", 4002}};
    CHECK(validate(o).has_value());
    CHECK(broker_addresses(o) == "tcp://127.0.0.1:4001, tcp://127.0.0.1:4002");
    o.addresses.push_back({false, "127.0.0.1", 4001});
    auto twice = validate(o);
    REQUIRE_FALSE(twice.has_value());
    CHECK_THAT(twice.error().message, Catch::Contains("twice"));
    o.addresses.back() = {false, "127.0.0.1", 0};
    auto port = validate(o);
    REQUIRE_FALSE(port.has_value());
    CHECK_THAT(port.error().message, Catch::Contains("upstream.port"));
    o.addresses.back() = {true, "127.0.0.1", 8883};
    auto mixed = validate(o);
    REQUIRE_FALSE(mixed.has_value());
    CHECK_THAT(mixed.error().message, Catch::Contains("transport"));
}
