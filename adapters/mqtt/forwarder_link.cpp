// The forwarder's libmosquitto connection: its options (credentials and TLS through
// mosquitto_options.h), the connect and its CONNACK, one round of socket work, and failures
// worded for a person.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "adapters/mqtt/forwarder_impl.h"

namespace tidemark::mqtt {
namespace {

// MQTT keep-alive below 5 s is refused by libmosquitto.
constexpr int keep_alive_s_min = 5;

// The connect loop polls the socket in steps of this, checking stop() and the deadline.
constexpr int64_t connect_poll_ms = 100;

}  // namespace

void Forwarder::Impl::on_connect(mosquitto*, void* self, int rc) {
    auto* impl = static_cast<Impl*>(self);
    impl->connack_received_ = true;
    impl->connack_rc_ = rc;
}

void Forwarder::Impl::on_disconnect(mosquitto*, void* self, int rc) {
    auto* impl = static_cast<Impl*>(self);
    impl->link_lost_ = true;
    if (impl->lost_cause_.empty()) {
        impl->lost_cause_ = rc == 0 ? std::string("disconnected")
                                    : std::string("connection lost: ") + mosquitto_strerror(rc);
    }
}

void Forwarder::Impl::on_publish(mosquitto*, void* self, int mid) {
    static_cast<Impl*>(self)->acknowledged(mid);
}

void Forwarder::Impl::on_log(mosquitto*, void* self, int level, const char* text) {
    auto* impl = static_cast<Impl*>(self);
    // OpenSSL's own words (e.g. "certificate verify failed") for the connect error.
    if ((level & MOSQ_LOG_ERR) != 0 && impl->tls_error_.empty() &&
        std::strstr(text, "OpenSSL") != nullptr) {
        impl->tls_error_ = text;
    }
}

void Forwarder::Impl::destroy_client() {
    if (mosq_ != nullptr) mosquitto_destroy(mosq_);  // closes the socket; no callbacks
    mosq_ = nullptr;
}

void Forwarder::Impl::lose_link(std::string cause) {
    if (link_lost_) return;
    link_lost_ = true;
    lost_cause_ = std::move(cause);
}

// Connects on a clean session; fails with a message that names the address and the likely
// cause. A fresh client each time: libmosquitto would otherwise re-send its own in-flight
// copies on the new connection, beside the outbox's.
Result<void> Forwarder::Impl::connect() {
    destroy_client();
    timers_.connecting();
    inflight_.clear();
    early_acks_.clear();
    link_lost_ = false;
    lost_cause_.clear();
    tls_error_.clear();
    connack_received_ = false;
    connack_rc_ = 0;
    const BrokerOptions& broker = options_.broker;
    const BrokerAddress& node = broker.addresses[rotation_.current()];
    address_ = broker_address(node);

    mosq_ = mosquitto_new(broker.client_id.c_str(), /*clean_session=*/true, this);
    if (mosq_ == nullptr)
        return fail(std::string("cannot create an MQTT client: ") + std::strerror(errno));
    if (auto ok = set_options(node); !ok) return ok;

    const int keep_alive_s = std::max(broker.keep_alive_s, keep_alive_s_min);
    errno = 0;
    const int rc = mosquitto_connect_async(mosq_, node.host.c_str(), node.port, keep_alive_s);
    if (rc != MOSQ_ERR_SUCCESS) return fail(describe_connect_failure(rc, errno));
    if (auto ok = wait_for_connack(); !ok) return ok;
    timers_.connected();
    first_ack_seen_ = false;
    std::lock_guard lock(mutex_);
    stats_.first_row_after_reconnect_ms.reset();
    return {};
}

Result<void> Forwarder::Impl::set_options(const BrokerAddress& node) {
    // Credentials, TLS and the protocol version: mosquitto_options.h, shared with health.
    if (auto ok = apply_mosquitto_options(mosq_, options_.broker, node); !ok) return ok;
    // Rows go out as they are published, not after Nagle's delay.
    mosquitto_int_option(mosq_, MOSQ_OPT_TCP_NODELAY, 1);
    // The window is ours (max_inflight): libmosquitto must not queue behind its own quota.
    mosquitto_max_inflight_messages_set(mosq_, 0);
    mosquitto_connect_callback_set(mosq_, on_connect);
    mosquitto_disconnect_callback_set(mosq_, on_disconnect);
    mosquitto_publish_callback_set(mosq_, on_publish);
    mosquitto_log_callback_set(mosq_, on_log);
    return {};
}

Result<void> Forwarder::Impl::wait_for_connack() {
    const int64_t timeout_s = options_.broker.connect_timeout_s;
    const int64_t deadline_ms = clock_.steady_ms() + timeout_s * 1000;
    while (!connack_received_) {
        if (stopping_.load()) return fail("stopped while connecting");
        if (clock_.steady_ms() > deadline_ms) {
            return fail("connect to " + address_ + " timed out after " + std::to_string(timeout_s) +
                        " s");
        }
        int error = 0;
        const int step = poll_client(connect_poll_ms, error);
        if (step != MOSQ_ERR_SUCCESS) return fail(describe_connect_failure(step, error));
        if (link_lost_ && !connack_received_) {
            return fail(describe_connect_failure(MOSQ_ERR_CONN_LOST, 0));
        }
    }
    if (connack_rc_ != 0) return fail(describe_connack(connack_rc_));
    return {};
}

std::string Forwarder::Impl::describe_connect_failure(int rc, int error) const {
    std::string tls_error = tls_error_;
    while (!tls_error.empty() && (tls_error.back() == '\n' || tls_error.back() == '\r')) {
        tls_error.pop_back();
    }
    if (!tls_error.empty() || rc == MOSQ_ERR_TLS) {
        return "TLS handshake with " + address_ +
               " failed: " + (tls_error.empty() ? std::string(mosquitto_strerror(rc)) : tls_error) +
               " (check that ca_file '" + options_.broker.ca_file +
               "' holds the CA that signed the broker's certificate, and that the certificate "
               "names the host in the uri)";
    }
    if (rc == MOSQ_ERR_ERRNO && error != 0) {
        return "cannot connect to " + address_ + ": " + std::strerror(error);
    }
    if (rc == MOSQ_ERR_EAI) return "cannot resolve the host of " + address_;
    return "cannot connect to " + address_ + ": " + mosquitto_strerror(rc);
}

std::string Forwarder::Impl::describe_connack(int rc) const {
    const BrokerOptions& broker = options_.broker;
    if (rc == 4 || rc == 5) {
        return "upstream " + address_ + " refused the login of client '" + broker.client_id +
               "' as user '" + broker.username +
               "' (check username and password_file): " + mosquitto_connack_string(rc);
    }
    return "upstream " + address_ + " refused the connection: " + mosquitto_connack_string(rc);
}

// One round of socket work: waits up to `timeout_ms` for the socket (or a wake-up), then
// reads, writes and keeps the connection alive. Returns a libmosquitto error code; `error` is
// errno when that code is MOSQ_ERR_ERRNO.
int Forwarder::Impl::poll_client(int64_t timeout_ms, int& error) {
    const int sock = mosquitto_socket(mosq_);
    if (sock < 0) return MOSQ_ERR_NO_CONN;
    pollfd fds[2] = {
        {sock, static_cast<short>(POLLIN | (mosquitto_want_write(mosq_) ? POLLOUT : 0)), 0},
        {wake_fd_, POLLIN, 0}};
    const int ready = ::poll(fds, 2, static_cast<int>(std::max<int64_t>(timeout_ms, 0)));
    if (ready < 0 && errno != EINTR) {
        error = errno;
        return MOSQ_ERR_ERRNO;
    }
    if (ready > 0 && (fds[1].revents & POLLIN) != 0) drain_wake();
    int rc = MOSQ_ERR_SUCCESS;
    errno = 0;
    if (ready > 0 && (fds[0].revents & (POLLIN | POLLERR | POLLHUP)) != 0) {
        // Every PUBACK that has arrived, not one per poll.
        rc = mosquitto_loop_read(mosq_, options_.broker.max_inflight);
        // Acknowledge the broker's segments at once. A broker with Nagle on (mosquitto's
        // default) holds its next PUBACKs until our TCP ACK of the last one; with our ACK
        // delayed, a full window waited on the delayed-ACK timer, and on this project's VMs
        // stalled for minutes (bench_forward reproduced it in bursts mode every run).
        // Linux clears the flag after use: set it after every read.
        const int one = 1;
        ::setsockopt(sock, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof one);
    }
    if (rc == MOSQ_ERR_SUCCESS && ready > 0 && (fds[0].revents & POLLOUT) != 0) {
        rc = mosquitto_loop_write(mosq_, 1);
    }
    if (rc == MOSQ_ERR_SUCCESS) rc = mosquitto_loop_misc(mosq_);  // keep-alive
    error = errno;
    return rc;
}

}  // namespace tidemark::mqtt
