// Ingest's connection: the connect and its outcome, the subscription, a clean disconnect, and
// the thread that reconnects with backoff (ingest_state.h).
#include <MQTTAsync.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "adapters/mqtt/ingest_state.h"
#include "adapters/mqtt/paho_options.h"
#include "adapters/mqtt/paho_socket.h"

namespace tidemark::mqtt {
namespace {

// Extra time over Paho's own connect timeout before an attempt is given up on.
constexpr std::chrono::milliseconds outcome_margin{2000};

}  // namespace

std::string paho_error(int code, const char* message) {
    std::string text;
    switch (code) {  // CONNACK reason codes (MQTT 5, 3.2.2.2) worded for the likely fix
        case MQTTREASONCODE_UNSUPPORTED_PROTOCOL_VERSION:
            text = "broker refused MQTT 5 (mosquitto 2.0 or later speaks it)";
            break;
        case MQTTREASONCODE_CLIENT_IDENTIFIER_NOT_VALID:
            text = "broker rejected the client id";
            break;
        case MQTTREASONCODE_SERVER_UNAVAILABLE:
        case MQTTREASONCODE_SERVER_BUSY:
            text = "broker unavailable";
            break;
        case MQTTREASONCODE_BAD_USER_NAME_OR_PASSWORD:
            text = "bad user name or password";
            break;
        case MQTTREASONCODE_NOT_AUTHORIZED:
            text = "not authorised";
            break;
        default: {
            const char* s = code >= MQTTREASONCODE_UNSPECIFIED_ERROR
                                ? MQTTReasonCode_toString(static_cast<enum MQTTReasonCodes>(code))
                                : MQTTAsync_strerror(code);
            text = s != nullptr ? s : "error " + std::to_string(code);
        }
    }
    if (message != nullptr && *message != '\0') text += std::string(" (") + message + ")";
    return text;
}

void Ingest::State::on_connect_success(void* context, MQTTAsync_successData5* response) {
    auto* s = static_cast<State*>(context);
    // Paho C calls this on its receive thread while handling the CONNACK, before it reads the
    // connection's first PUBLISH (MQTTAsync_receiveThread, 1.3.x), so every message of this
    // connection, redeliveries included, carries the new number and the socket is known.
    s->socket.store(paho_socket::find(s->options.client_id, s->options.host, s->options.port));
    s->connection.store(connections_in_process.fetch_add(1) + 1);
    const bool session_present = response != nullptr && response->alt.connect.sessionPresent != 0;
    bool subscribe = false;
    {
        std::lock_guard lock(s->mutex);
        // Without a session the broker has forgotten our subscriptions (first run, or its
        // state was lost); with one, subscribing again would resend retained messages.
        subscribe = !session_present || !s->subscribed_once;
    }
    if (session_present) {
        // The broker kept our subscriptions: the connection is up now. It may send a large
        // backlog before the SUBACK of a re-subscription (mosquitto does), so waiting for that
        // would report "no answer" while messages are being logged.
        s->is_connected = true;
        s->set_outcome(Outcome::ok, {});
    }
    {
        std::lock_guard lock(s->mutex);
        s->subscribe_awaited = !session_present;
    }
    if (!subscribe) return;
    if (session_present == false) s->resubscribes.fetch_add(1, std::memory_order_relaxed);
    bool unsubscribe = false;
    {
        std::lock_guard lock(s->mutex);
        if (!session_present) s->stale_gone = true;  // nothing of the old filters is held
        unsubscribe = session_present && !s->stale_gone && !s->stale_filters.empty();
    }
    if (unsubscribe) {
        MQTTAsync_responseOptions unsub = MQTTAsync_responseOptions_initializer;
        unsub.onSuccess5 = &State::on_unsubscribe_success;
        unsub.onFailure5 = &State::on_unsubscribe_failure;
        unsub.context = s;
        const int rc = MQTTAsync_unsubscribeMany(
            s->client, static_cast<int>(s->stale_filters.size()), s->stale_pointers.data(), &unsub);
        if (rc != MQTTASYNC_SUCCESS)
            spdlog::warn(
                "{}: unsubscribing {} filter(s) no longer in the config failed: {}; "
                "tried again on the next connect",
                s->options.config_name, s->stale_filters.size(), paho_error(rc, nullptr));
    }
    MQTTAsync_responseOptions sub = MQTTAsync_responseOptions_initializer;
    sub.onSuccess5 = &State::on_subscribe_success;
    sub.onFailure5 = &State::on_subscribe_failure;
    sub.context = s;
    const int rc = MQTTAsync_subscribeMany(s->client, static_cast<int>(s->filters.size()),
                                           s->filter_pointers.data(), s->filter_qos.data(), &sub);
    if (rc != MQTTASYNC_SUCCESS)
        s->subscription_refused("subscribe on " + s->address +
                                " failed: " + paho_error(rc, nullptr));
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
    s->set_outcome(Outcome::failed,
                   "cannot connect to " + s->address + " as client id '" + s->options.client_id +
                       "': " +
                       (response != nullptr ? paho_error(response->code, response->message)
                                            : std::string("connection refused or unreachable")));
}

void Ingest::State::on_subscribe_success(void* context, MQTTAsync_successData5* response) {
    auto* s = static_cast<State*>(context);
    for (std::size_t i = 0; i < s->filters.size(); ++i) {
        int granted = 0;  // MQTT 5 SUBACK reason codes: the granted QoS, or 0x80 and up
        if (response != nullptr) {
            granted = s->filters.size() == 1 ? static_cast<int>(response->reasonCode)
                      : response->alt.sub.reasonCodes != nullptr
                          ? static_cast<int>(response->alt.sub.reasonCodes[i])
                          : 0;
        }
        if (granted >= MQTTREASONCODE_UNSPECIFIED_ERROR) {
            s->subscription_refused("broker " + s->address + " refused the subscription to '" +
                                    s->filters[i] + "' for client id '" + s->options.client_id +
                                    "': " + paho_error(granted, nullptr) +
                                    " (check the broker's ACL)");
            return;
        }
        if (granted < 1) {
            spdlog::warn("{}: broker granted QoS {} for '{}': messages may be lost on a crash",
                         s->options.config_name, granted, s->filters[i]);
        }
    }
    bool awaited = false;
    {
        std::lock_guard lock(s->mutex);
        s->subscribed_once = true;
        awaited = s->subscribe_awaited;
    }
    if (!awaited) return;  // reported up at the CONNACK
    s->is_connected = true;
    s->set_outcome(Outcome::ok, {});
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

void Ingest::State::on_subscribe_failure(void* context, MQTTAsync_failureData5* response) {
    auto* s = static_cast<State*>(context);
    // Not a refusal: the connection went (a cut, a loss: on_connection_lost reconnects) or the
    // client is being stopped before the SUBACK came.
    if (response != nullptr && response->code == MQTTASYNC_OPERATION_INCOMPLETE) return;
    const int code = response == nullptr ? 0
                     : response->reasonCode != MQTTREASONCODE_SUCCESS
                         ? static_cast<int>(response->reasonCode)
                         : response->code;
    s->subscription_refused(
        "broker " + s->address + " refused the subscription for client id '" +
        s->options.client_id + "': " +
        (response != nullptr ? paho_error(code, response->message) : std::string("no reason")) +
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
    d.timeout = static_cast<int>(timeout.count());
    d.onSuccess5 = &State::on_disconnect_done;
    d.onFailure5 = &State::on_disconnect_failed;
    d.context = this;
    if (MQTTAsync_disconnect(client, &d) != MQTTASYNC_SUCCESS) return;  // nothing to drop
    std::unique_lock lock(mutex);
    changed.wait_for(lock, timeout + std::chrono::seconds(1), [this] { return disconnect_done; });
}

Result<void> Ingest::State::connect_once() {
    if (MQTTAsync_isConnected(client)) disconnect(std::chrono::seconds(1));  // a refused SUBACK's
    // Persistent session (the broker queues and redelivers while we are away); supervise()
    // reconnects, to see session-present. max_inflight bounds our publishes only: none here.
    PahoConnect paho;
    fill_paho_connect(options, ingest_options.packet_bytes_max, paho);
    MQTTAsync_connectOptions& connect = paho.connect;
    connect.onSuccess5 = &State::on_connect_success;
    connect.onFailure5 = &State::on_connect_failure;
    connect.context = this;
    {
        std::lock_guard lock(mutex);
        outcome = Outcome::pending;
    }
    // Until the CONNACK (or the failure) Paho traces its CONNECT, which names the socket.
    paho_socket::connect_starting();
    if (const int rc = MQTTAsync_connect(client, &connect); rc != MQTTASYNC_SUCCESS) {
        set_outcome(Outcome::failed,
                    "cannot connect to " + address + ": " + paho_error(rc, nullptr));
    }
    std::unique_lock lock(mutex);
    const auto limit = std::chrono::seconds(options.connect_timeout_s) + outcome_margin;
    const bool answered =
        changed.wait_for(lock, limit, [this] { return outcome != Outcome::pending || stopping; });
    paho_socket::connect_finished();
    if (!answered) {
        last_error =
            "no answer from " + address + " within " + std::to_string(limit.count()) + " ms";
        std::string error = last_error;
        lock.unlock();
        disconnect(
            std::chrono::seconds(1));  // or the next attempt would connect a connected client
        return fail(error);
    }
    if (outcome == Outcome::ok) return {};
    if (outcome == Outcome::failed) {
        std::string error = outcome_error;
        lock.unlock();
        // A refused subscription leaves a live connection behind: drop it before retrying.
        if (MQTTAsync_isConnected(client)) disconnect(std::chrono::seconds(1));
        return fail(error);
    }
    return fail("stopped while connecting to " + address);
}

void Ingest::State::supervise() {
    int failures = 0;
    std::unique_lock lock(mutex);
    while (true) {
        changed.wait(lock, [this] { return stopping || need_reconnect; });
        if (stopping) return;
        const int waits = std::max(failures, refusal_streak.load() - 1);
        if (changed.wait_for(lock, reconnect_delay(std::min(waits, 32)),
                             [this] { return stopping; }))
            return;
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
            connect_failures.fetch_add(1, std::memory_order_relaxed);
            spdlog::warn("{}: {}; next attempt in {} ms", options.config_name,
                         connected_now.error().message,
                         reconnect_delay(std::min(failures, 32)).count());
        }
    }
}

}  // namespace tidemark::mqtt
