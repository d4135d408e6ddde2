// TLS to the upstream broker with a CA made by the test: results arrive when tidemark trusts
// the CA that signed the broker's certificate; with another CA nothing is sent, health names
// the certificate problem and tidemark keeps running.
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cctype>

#include "tests/integration/forwarding/forwarding_support.h"

using namespace tidemark::test;
using namespace tidemark::test::fwd;

namespace {

int free_port() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = 0;
    socklen_t length = sizeof address;
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0)
        throw std::runtime_error("cannot find a free loopback port");
    ::close(fd);
    return ntohs(address.sin_port);
}

void sh(const std::string& dir, const std::string& command) {
    const std::string full = "cd '" + dir + "' && (" + command + ") >>openssl.log 2>&1";
    if (std::system(full.c_str()) != 0)
        throw std::runtime_error("failed: " + command + "\n" + read_file(dir + "/openssl.log"));
}

// ca.pem signs server.pem (CN and subjectAltName IP 127.0.0.1); other-ca.pem signs nothing
// the broker uses.
void make_certificates(const std::string& dir) {
    sh(dir,
       "openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 "
       "-subj /CN=tidemark-test-ca");
    sh(dir,
       "openssl req -x509 -newkey rsa:2048 -nodes -keyout other-ca.key -out other-ca.pem -days 2 "
       "-subj /CN=tidemark-other-ca");
    sh(dir,
       "openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr "
       "-subj /CN=127.0.0.1");
    write_file(dir + "/server.ext", "subjectAltName=IP:127.0.0.1\n");
    sh(dir,
       "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
       "-out server.pem -days 2 -extfile server.ext");
}

std::string lower(std::string s) {
    std::transform(s.begin(), s.end(), s.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return s;
}

}  // namespace

TEST_CASE("TLS upstream: a trusted CA delivers, a wrong CA is refused with a clear error",
          "[forwarding][slow]") {
    TempDir dir("tm-fwd-tls");
    const std::string d = dir.path();
    make_certificates(d);
    const int tls_port = free_port();
    Broker::Options options;
    options.extra_conf = "listener " + std::to_string(tls_port) + " 127.0.0.1\n" + "cafile " + d +
                         "/ca.pem\ncertfile " + d + "/server.pem\nkeyfile " + d + "/server.key\n";
    Broker upstream = Broker::start(options);
    const std::string tls_uri = "ssl://127.0.0.1:" + std::to_string(tls_port);
    Broker gateway = Broker::start();
    TestClient health = TestClient::connect(gateway.uri());
    health.subscribe(health_topic, 1);
    TestClient publisher = TestClient::connect(gateway.uri());

    SECTION("the CA that signed the broker's certificate: results arrive") {
        Consumer consumer(upstream);
        json config = base_config(d, gateway, tls_uri);
        config["upstream"]["tls"] = {{"ca_file", d + "/ca.pem"}};
        Daemon daemon(write_config(d, config), daemon_log_path("tls_good"));
        daemon.start();
        INFO("tidemark log: " << daemon.log_path() << "\nmosquitto log:\n" << upstream.log());
        REQUIRE(wait_ready(health, true));
        Load load(publisher, 5, load_base_ms(), 1000);
        load.rounds(10);
        load.flush();
        // 5 keys x 10 windows, and a few corrections.
        const bool arrived = wait_until([&] { return consumer.count() >= 50; }, 30s);
        INFO("received " << consumer.count() << "; health " << latest_health(health).dump());
        REQUIRE(arrived);
        const auto results = consumer.results();
        CHECK(results.front().pipeline == "t1s");
        CHECK(health_value(health, "/upstream/last_error", std::string("?")).empty());
        CHECK(daemon.terminate() == 0);
    }

    SECTION("another CA: nothing is sent, health names the certificate, tidemark keeps running") {
        Consumer consumer(upstream);
        json config = base_config(d, gateway, tls_uri);
        config["upstream"]["tls"] = {{"ca_file", d + "/other-ca.pem"}};
        Daemon daemon(write_config(d, config), daemon_log_path("tls_wrong_ca"));
        daemon.start();
        INFO("tidemark log: " << daemon.log_path());
        REQUIRE(wait_ready(health, false));
        Load load(publisher, 5, load_base_ms(), 1000);
        load.rounds(10);
        load.flush();
        std::string last_error;
        const bool named = wait_until(
            [&] {
                last_error = health_value(health, "/upstream/last_error", std::string());
                return !last_error.empty();
            },
            20s);
        INFO("upstream.last_error: " << last_error);
        REQUIRE(named);
        CHECK(lower(last_error).find("certificate") != std::string::npos);
        CHECK_FALSE(health_value(health, "/upstream/link_up", true));
        // Still running: processing goes on, results wait in the outbox.
        REQUIRE(wait_until([&] { return health_value(health, "/outbox/rows", int64_t{0}) >= 50; },
                           20s));
        std::this_thread::sleep_for(3s);
        CHECK(daemon.alive());
        CHECK(consumer.count() == 0);
        CHECK(health_value(health, "/upstream/acks", int64_t{-1}) == 0);
        CHECK(daemon.terminate() == 0);
    }
}
