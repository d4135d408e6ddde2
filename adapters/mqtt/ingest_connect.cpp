// Ingest's connection: the connect and its outcome, the subscription, a clean disconnect, and
// the thread that reconnects with backoff (ingest_state.h).
#include <MQTTAsync.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <random>

#include "adapters/mqtt/ingest_state.h"
#include "adapters/mqtt/paho_options.h"
#include "adapters/mqtt/paho_socket.h"

namespace tidemark::mqtt {
namespace {

// Extra time over Paho's own connect timeout before an attempt is given up on.
constexpr std::chrono::milliseconds outcome_margin{2000};

}  // namespace

namespace {

// MQTT 3.1.1 CONNACK return codes (3.2.2.3) as the MQTT 5 reason codes that took their place
// (3.2.2.2), so that one library function names both.
int connack_reason(int code) {
    switch (code) {
        case 1:
            return MQTTREASONCODE_UNSUPPORTED_PROTOCOL_VERSION;
        case 2:
            return MQTTREASONCODE_CLIENT_IDENTIFIER_NOT_VALID;
        case 3:
            return MQTTREASONCODE_SERVER_UNAVAILABLE;
        case 4:
            return MQTTREASONCODE_BAD_USER_NAME_OR_PASSWORD;
        case 5:
            return MQTTREASONCODE_NOT_AUTHORIZED;
        default:
            return code;
    }
}

// What a person can do about a refusal: ours to say, the refusal's words are the library's.
const char* likely_fix(int reason) {
    switch (reason) {
        case MQTTREASONCODE_UNSUPPORTED_PROTOCOL_VERSION:
            return "mosquitto 2.0 and later speak MQTT 5; for a broker that does not "
                   "(nats-server), set \"protocol\": \"3.1.1\"";
        case MQTTREASONCODE_CLIENT_IDENTIFIER_NOT_VALID:
            return "check client_id";
        case MQTTREASONCODE_BAD_USER_NAME_OR_PASSWORD:
        case MQTTREASONCODE_NOT_AUTHORIZED:
            return "check username and password_file";
        default:
            return nullptr;
    }
}

}  // namespace

std::string paho_error(int code, const char* message) {
    const char* words = code >= MQTTREASONCODE_UNSPECIFIED_ERROR
                            ? MQTTReasonCode_toString(static_cast<enum MQTTReasonCodes>(code))
                            : MQTTAsync_strerror(code);
    std::string text = words != nullptr ? words : "error " + std::to_string(code);
    if (const char* fix = likely_fix(code)) text += std::string(": ") + fix;
    if (message != nullptr && *message != '\0') text += std::string(" (") + message + ")";
    return text;
}

void Ingest::State::aim_at_current_node() {
    node = options.addresses[rotation.current()];
    address = broker_address(node);
}

std::pair<std::string, int> Ingest::State::node_host_port() const {
    std::lock_guard lock(mutex);
    return {node.host, node.port};
}

void Ingest::State::on_connect_success(void* context, MQTTAsync_successData5* response) {
    static_cast<State*>(context)->connected(response != nullptr &&
                                            response->alt.connect.sessionPresent != 0);
}

void Ingest::State::on_connect_success3(void* context, MQTTAsync_successData* response) {
    static_cast<State*>(context)->connected(response != nullptr &&
                                            response->alt.connect.sessionPresent != 0);
}

void Ingest::State::connected(bool session_present) {
    // Paho C calls this on its receive thread while handling the CONNACK, before it reads the
    // connection's first PUBLISH (MQTTAsync_receiveThread, 1.3.x), so every message of this
    // connection, redeliveries included, carries the new number and the socket is known.
    const auto [host, port] = node_host_port();
    socket.store(paho_socket::find(options.client_id, host, port));
    connection.store(connections_in_process.fetch_add(1) + 1);
    bool subscribe = false;
    {
        std::lock_guard lock(mutex);
        // Without a session the broker has forgotten our subscriptions (first run, or its
        // state was lost); with one, subscribing again would resend retained messages.
        subscribe = !session_present || !subscribed_once;
    }
    if (session_present) {
        // The broker kept our subscriptions: the connection is up now. It may send a large
        // backlog before the SUBACK of a re-subscription (mosquitto does), so waiting for that
        // would report "no answer" while messages are being logged.
        is_connected = true;
        set_outcome(Outcome::ok, {});
    }
    std::string at;
    {
        std::lock_guard lock(mutex);
        subscribe_awaited = !session_present;
        at = address;
    }
    if (!subscribe) return;
    if (session_present == false) resubscribes.fetch_add(1, std::memory_order_relaxed);
    bool unsubscribe = false;
    {
        std::lock_guard lock(mutex);
        if (!session_present) stale_gone = true;  // nothing of the old filters is held
        unsubscribe = session_present && !stale_gone && !stale_filters.empty();
    }
    if (unsubscribe) {
        MQTTAsync_responseOptions unsub = MQTTAsync_responseOptions_initializer;
        if (v5()) {
            unsub.onSuccess5 = &State::on_unsubscribe_success;
            unsub.onFailure5 = &State::on_unsubscribe_failure;
        } else {
            unsub.onSuccess = &State::on_unsubscribe_success3;
            unsub.onFailure = &State::on_unsubscribe_failure3;
        }
        unsub.context = this;
        const int rc = MQTTAsync_unsubscribeMany(client, static_cast<int>(stale_filters.size()),
                                                 stale_pointers.data(), &unsub);
        if (rc != MQTTASYNC_SUCCESS)
            spdlog::warn(
                "{}: unsubscribing {} filter(s) no longer in the config failed: {}; "
                "tried again on the next connect",
                options.config_name, stale_filters.size(), paho_error(rc, nullptr));
    }
    MQTTAsync_responseOptions sub = MQTTAsync_responseOptions_initializer;
    if (v5()) {
        sub.onSuccess5 = &State::on_subscribe_success;
        sub.onFailure5 = &State::on_subscribe_failure;
    } else {
        sub.onSuccess = &State::on_subscribe_success3;
        sub.onFailure = &State::on_subscribe_failure3;
    }
    sub.context = this;
    const int rc = MQTTAsync_subscribeMany(client, static_cast<int>(filters.size()),
                                           filter_pointers.data(), filter_qos.data(), &sub);
    if (rc != MQTTASYNC_SUCCESS)
        subscription_refused("subscribe on " + at + " failed: " + paho_error(rc, nullptr));
}

void Ingest::State::subscription_refused(std::string error) {
    bool awaited = false;
    {
        std::lock_guard lock(mutex);
        awaited = subscribe_awaited;
    }
    if (awaited) {
        set_outcome(Outcome::failed, std::move(error));  // connect_once() drops the connection
        return;
    }
    // The connection was reported up (session present): drop it and let supervise() try again.
    spdlog::error("{}: {}; reconnecting", options.config_name, error);
    is_connected = false;
    std::lock_guard lock(mutex);
    last_error = std::move(error);
    if (!stopping) need_reconnect = true;
    changed.notify_all();
}

void Ingest::State::on_connect_failure(void* context, MQTTAsync_failureData5* response) {
    auto* s = static_cast<State*>(context);
    if (response == nullptr) return s->connect_failed(0, nullptr);
    // A refusal's reason is the CONNACK's; anything else (unreachable, TLS) is in `code`.
    s->connect_failed(response->reasonCode != MQTTREASONCODE_SUCCESS
                          ? static_cast<int>(response->reasonCode)
                          : response->code,
                      response->message);
}

void Ingest::State::on_connect_failure3(void* context, MQTTAsync_failureData* response) {
    auto* s = static_cast<State*>(context);
    if (response == nullptr) return s->connect_failed(0, nullptr);
    s->connect_failed(connack_reason(response->code), response->message);
}

void Ingest::State::connect_failed(int code, const char* message) {
    std::string at;
    {
        std::lock_guard lock(mutex);
        at = address;
    }
    set_outcome(Outcome::failed,
                "cannot connect to " + at + " as client id '" + options.client_id + "': " +
                    (code != 0 ? paho_error(code, message)
                               : std::string("connection refused or unreachable")));
}

void Ingest::State::on_subscribe_success(void* context, MQTTAsync_successData5* response) {
    auto* s = static_cast<State*>(context);
    std::vector<int> granted(s->filters.size(), 0);  // MQTT 5 reason codes: QoS, or 0x80 up
    for (std::size_t i = 0; response != nullptr && i < granted.size(); ++i) {
        granted[i] = s->filters.size() == 1 ? static_cast<int>(response->reasonCode)
                     : response->alt.sub.reasonCodes != nullptr
                         ? static_cast<int>(response->alt.sub.reasonCodes[i])
                         : 0;
    }
    s->subscribed(granted);
}

void Ingest::State::on_subscribe_success3(void* context, MQTTAsync_successData* response) {
    auto* s = static_cast<State*>(context);
    std::vector<int> granted(s->filters.size(), 0);  // MQTT 3.1.1: the QoS, or 0x80
    for (std::size_t i = 0; response != nullptr && i < granted.size(); ++i) {
        granted[i] = s->filters.size() == 1             ? response->alt.qos
                     : response->alt.qosList != nullptr ? response->alt.qosList[i]
                                                        : 0;
    }
    s->subscribed(granted);
}

void Ingest::State::subscribed(const std::vector<int>& granted) {
    std::string at;
    {
        std::lock_guard lock(mutex);
        at = address;
    }
    for (std::size_t i = 0; i < filters.size(); ++i) {
        if (granted[i] >= MQTTREASONCODE_UNSPECIFIED_ERROR) {
            subscription_refused("broker " + at + " refused the subscription to '" + filters[i] +
                                 "' for client id '" + options.client_id + "': " +
                                 paho_error(granted[i], nullptr) + " (check the broker's ACL)");
            return;
        }
        if (granted[i] < 1) {
            spdlog::warn("{}: broker granted QoS {} for '{}': messages may be lost on a crash",
                         options.config_name, granted[i], filters[i]);
        }
    }
    bool awaited = false;
    {
        std::lock_guard lock(mutex);
        subscribed_once = true;
        awaited = subscribe_awaited;
    }
    if (!awaited) return;  // reported up at the CONNACK
    is_connected = true;
    set_outcome(Outcome::ok, {});
}

// Any reason code is taken as done: "no subscription existed" (0x11) included, since then the
// session holds nothing of it either.
void Ingest::State::on_unsubscribe_success(void* context, MQTTAsync_successData5*) {
    auto* s = static_cast<State*>(context);
    spdlog::info("{}: unsubscribed {} filter(s) no longer in the config", s->options.config_name,
                 s->stale_filters.size());
    std::lock_guard lock(s->mutex);
    s->stale_gone = true;
}

void Ingest::State::on_unsubscribe_failure(void* context, MQTTAsync_failureData5* response) {
    auto* s = static_cast<State*>(context);
    if (response != nullptr && response->code == MQTTASYNC_OPERATION_INCOMPLETE) return;
    spdlog::warn(
        "{}: unsubscribing filters no longer in the config failed: {}; tried again on "
        "the next start",
        s->options.config_name,
        response != nullptr ? paho_error(response->code, response->message)
                            : std::string("no reason"));
}

void Ingest::State::on_unsubscribe_success3(void* context, MQTTAsync_successData*) {
    on_unsubscribe_success(context, nullptr);
}

void Ingest::State::on_unsubscribe_failure3(void* context, MQTTAsync_failureData* response) {
    if (response != nullptr && response->code == MQTTASYNC_OPERATION_INCOMPLETE) return;
    MQTTAsync_failureData5 data = MQTTAsync_failureData5_initializer;
    if (response != nullptr) {
        data.code = response->code;
        data.message = response->message;
    }
    on_unsubscribe_failure(context, response != nullptr ? &data : nullptr);
}

void Ingest::State::on_subscribe_failure(void* context, MQTTAsync_failureData5* response) {
    auto* s = static_cast<State*>(context);
    if (response == nullptr) return s->subscribe_failed(0, nullptr);
    s->subscribe_failed(
        response->code == MQTTASYNC_OPERATION_INCOMPLETE ? MQTTASYNC_OPERATION_INCOMPLETE
        : response->reasonCode != MQTTREASONCODE_SUCCESS ? static_cast<int>(response->reasonCode)
                                                         : response->code,
        response->message);
}

void Ingest::State::on_subscribe_failure3(void* context, MQTTAsync_failureData* response) {
    auto* s = static_cast<State*>(context);
    if (response == nullptr) return s->subscribe_failed(0, nullptr);
    s->subscribe_failed(response->code, response->message);
}

void Ingest::State::subscribe_failed(int code, const char* message) {
    // Not a refusal: the connection went (a cut, a loss: on_connection_lost reconnects) or the
    // client is being stopped before the SUBACK came.
    if (code == MQTTASYNC_OPERATION_INCOMPLETE) return;
    std::string at;
    {
        std::lock_guard lock(mutex);
        at = address;
    }
    subscription_refused(
        "broker " + at + " refused the subscription for client id '" + options.client_id +
        "': " + (code != 0 ? paho_error(code, message) : std::string("no reason")) +
        " (check the broker's ACL)");
}

void Ingest::State::on_disconnect_done(void* context, MQTTAsync_successData5*) {
    auto* s = static_cast<State*>(context);
    std::lock_guard lock(s->mutex);
    s->disconnect_done = true;
    s->changed.notify_all();
}

void Ingest::State::on_disconnect_failed(void* context, MQTTAsync_failureData5*) {
    on_disconnect_done(context, nullptr);
}

void Ingest::State::on_disconnect_done3(void* context, MQTTAsync_successData*) {
    on_disconnect_done(context, nullptr);
}

void Ingest::State::on_disconnect_failed3(void* context, MQTTAsync_failureData*) {
    on_disconnect_done(context, nullptr);
}

// Leaves no connection (live or half-open) behind, waiting up to `timeout` for Paho: a connect
// on a client that is still connected never completes. A normal DISCONNECT: the broker keeps
// the session (its expiry is "never", paho_options.h) and discards no queued message.
void Ingest::State::disconnect(std::chrono::milliseconds timeout) {
    is_connected = false;
    {
        std::lock_guard lock(mutex);
        disconnect_done = false;
    }
    MQTTAsync_disconnectOptions d = MQTTAsync_disconnectOptions_initializer5;
    if (v5()) {
        d.onSuccess5 = &State::on_disconnect_done;
        d.onFailure5 = &State::on_disconnect_failed;
    } else {
        d = MQTTAsync_disconnectOptions_initializer;
        d.onSuccess = &State::on_disconnect_done3;
        d.onFailure = &State::on_disconnect_failed3;
    }
    d.timeout = static_cast<int>(timeout.count());
    d.context = this;
    if (MQTTAsync_disconnect(client, &d) != MQTTASYNC_SUCCESS) return;  // nothing to drop
    std::unique_lock lock(mutex);
    changed.wait_for(lock, timeout + std::chrono::seconds(1), [this] { return disconnect_done; });
}

Result<void> Ingest::State::connect_once() {
    if (MQTTAsync_isConnected(client)) disconnect(std::chrono::seconds(1));  // a refused SUBACK's
    BrokerAddress target;
    std::string at;
    {
        std::lock_guard lock(mutex);
        aim_at_current_node();
        target = node;
        at = address;
        outcome = Outcome::pending;
    }
    // Persistent session (the broker queues and redelivers while we are away); supervise()
    // reconnects, to see session-present. max_inflight bounds our publishes only: none here.
    PahoConnect paho;
    fill_paho_connect(options, target, ingest_options.packet_bytes_max, ingest_options.protocol,
                      paho);
    MQTTAsync_connectOptions& connect = paho.connect;
    if (v5()) {
        connect.onSuccess5 = &State::on_connect_success;
        connect.onFailure5 = &State::on_connect_failure;
    } else {
        connect.onSuccess = &State::on_connect_success3;
        connect.onFailure = &State::on_connect_failure3;
    }
    connect.context = this;
    // Until the CONNACK (or the failure) Paho traces its CONNECT, which names the socket.
    paho_socket::connect_starting();
    if (const int rc = MQTTAsync_connect(client, &connect); rc != MQTTASYNC_SUCCESS) {
        set_outcome(Outcome::failed, "cannot connect to " + at + ": " + paho_error(rc, nullptr));
    }
    std::unique_lock lock(mutex);
    const auto limit = std::chrono::seconds(options.connect_timeout_s) + outcome_margin;
    const bool answered =
        changed.wait_for(lock, limit, [this] { return outcome != Outcome::pending || stopping; });
    paho_socket::connect_finished();
    if (!answered) {
        last_error = "no answer from " + at + " within " + std::to_string(limit.count()) + " ms";
        std::string error = last_error;
        lock.unlock();
        disconnect(
            std::chrono::seconds(1));  // or the next attempt would connect a connected client
        return fail(error);
    }
    if (outcome == Outcome::ok) {
        rotation.connected();
        connected_node = at;
        failovers.store(rotation.failovers(), std::memory_order_relaxed);
        return {};
    }
    if (outcome == Outcome::failed) {
        std::string error = outcome_error;
        lock.unlock();
        // A refused subscription leaves a live connection behind: drop it before retrying.
        if (MQTTAsync_isConnected(client)) disconnect(std::chrono::seconds(1));
        return fail(error);
    }
    return fail("stopped while connecting to " + at);
}

void Ingest::State::supervise() {
    std::mt19937_64 rng(std::random_device{}());
    std::uniform_real_distribution<double> jitter(0.0, 1.0);
    int failures = 0;
    std::unique_lock lock(mutex);
    while (true) {
        changed.wait(lock, [this] { return stopping || need_reconnect; });
        if (stopping) return;
        const int waits = std::max(failures, refusal_streak.load() - 1);
        // A lost connection is retried at once on the next node (a refusal's cut, on the
        // same node after the refusals' backoff: the node is not at fault).
        const bool lost = failures == 0 && refusal_streak.load() == 0;
        const auto wait = std::chrono::milliseconds(
            lost ? 0 : reconnect_backoff.wait_ms(std::min(waits, 32), jitter(rng)));
        if (changed.wait_for(lock, wait, [this] { return stopping; })) return;
        if (lost) rotation.move_on();
        // Cleared before the attempt, not after it: a connection lost while connect_once() is
        // still returning (a message refused at once, cut in its callback) asks again, and
        // clearing the flag after a successful connect would forget that loss for good.
        need_reconnect = false;
        lock.unlock();
        auto connected_now = connect_once();
        lock.lock();
        if (connected_now) {
            failures = 0;
            reconnects.fetch_add(1, std::memory_order_relaxed);
            spdlog::info("{}: reconnected to {}", options.config_name, address);
        } else {
            need_reconnect = !stopping;
            ++failures;
            rotation.move_on();  // a refused or unreachable node: the next one, round the list
            connect_failures.fetch_add(1, std::memory_order_relaxed);
            spdlog::warn("{}: {}; next attempt on {}", options.config_name,
                         connected_now.error().message,
                         broker_address(options.addresses[rotation.current()]));
        }
    }
}

}  // namespace tidemark::mqtt
