#include "adapters/mqtt/ingest.h"

#include <MQTTAsync.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include "adapters/mqtt/paho_options.h"
#include "adapters/mqtt/paho_socket.h"

// Why the Paho C API and not Paho C++'s async_client: async_client's message callback always
// returns "processed" to Paho C and copies topic and payload into a new message object per
// message. Here the callback decides per message whether the connection must be cut before the
// PUBACK goes (paho_socket.h), and hands the handler views into Paho's buffer with the DUP flag
// and the packet id.

namespace tidemark::mqtt {

namespace {

// Extra time over Paho's own connect timeout before an attempt is given up on.
constexpr std::chrono::milliseconds outcome_margin{2000};

// Numbers IncomingMessage::connection. Process-wide, not per Ingest: the runtime replaces its
// Ingest on every pause, and the handler must still see each new connection as new.
std::atomic<std::uint64_t> connections_in_process{0};

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

}  // namespace

struct Ingest::State {
    BrokerOptions options;
    std::string address;  // broker_address(options), for messages
    std::vector<std::string> filters;
    std::vector<char*> filter_pointers;  // MQTTAsync_subscribeMany wants char* const*
    std::vector<int> filter_qos;
    Handler handler;
    IngestOptions ingest_options;
    MQTTAsync client = nullptr;

    std::atomic<std::uint64_t> messages{0}, bytes{0}, duplicates{0}, reconnects{0},
        connect_failures{0}, handler_retries{0}, resubscribes{0}, retained_skipped{0},
        connections_cut{0};
    std::atomic<bool> is_connected{false};
    std::atomic<std::uint64_t> connection{0};  // of the current connection, see on_connect_success
    // The socket of the current connection (paho_socket::find), -1 when Paho's trace did not
    // name it; and the connection cut by a refusal (messages still read on it are not handed
    // to the handler: their PUBACKs cannot leave either, and the broker resends them in order).
    std::atomic<int> socket{-1};
    std::atomic<std::uint64_t> cut_connection{0};
    // Refusals since the handler last took a message: the reconnect after a cut waits as after
    // that many failed connects, so that a log that stays full costs one redelivered message
    // per reconnect_delay_max (30 s), not one per 250 ms.
    std::atomic<int> refusal_streak{0};

    mutable std::mutex mutex;  // guards everything below
    std::condition_variable changed;
    std::string last_error;
    bool started = false;
    bool stopping = false;
    bool need_reconnect = false;
    bool subscribed_once = false;  // subscribe on the first connect even if a session exists:
                                   // the filters may have changed since the last run
    // The connect attempt waits for the SUBACK (no session: nothing arrives before it). With
    // a session the connection is up at the CONNACK and the SUBACK comes when it comes.
    bool subscribe_awaited = false;
    bool disconnect_done = false;
    enum class Outcome { pending, ok, failed };
    Outcome outcome = Outcome::pending;
    std::string outcome_error;
    std::thread supervisor;

    void set_outcome(Outcome o, std::string error) {
        std::lock_guard lock(mutex);
        outcome = o;
        outcome_error = std::move(error);
        if (o == Outcome::failed) last_error = outcome_error;
        changed.notify_all();
    }

    Result<void> connect_once();
    void disconnect(std::chrono::milliseconds timeout);
    void subscription_refused(std::string error);
    void supervise();
    void cut(std::uint64_t connection_number);

    // Paho C callbacks: `context` is the State.
    static int on_message(void* context, char* topic, int topic_length, MQTTAsync_message* m);
    static void on_connection_lost(void* context, char* cause);
    static void on_connect_success(void* context, MQTTAsync_successData5* response);
    static void on_connect_failure(void* context, MQTTAsync_failureData5* response);
    static void on_subscribe_success(void* context, MQTTAsync_successData5* response);
    static void on_subscribe_failure(void* context, MQTTAsync_failureData5* response);
    static void on_disconnect_done(void* context, MQTTAsync_successData5* response);
    static void on_disconnect_failed(void* context, MQTTAsync_failureData5* response);
};

// Runs on Paho's receive thread inside on_message, before Paho writes the PUBACK: after the
// shutdown that write fails (EPIPE; Paho ignores SIGPIPE), so nothing of this connection is
// acknowledged any more, and Paho reports the connection lost.
void Ingest::State::cut(std::uint64_t connection_number) {
    cut_connection.store(connection_number);
    connections_cut.fetch_add(1, std::memory_order_relaxed);
    const int fd = socket.load();
    if (fd >= 0 && paho_socket::connected_to(fd, options.host, options.port)) {
        ::shutdown(fd, SHUT_RDWR);
        return;
    }
    // Paho's trace did not name the socket: cut every connection of this process to the
    // broker (the health publisher's too, which reconnects by itself).
    const int cut_count = paho_socket::shutdown_all_connected_to(options.host, options.port);
    spdlog::warn("{}: cut {} connection(s) to {} (ingest's own socket is not known)",
                 options.config_name, cut_count, address);
}

int Ingest::State::on_message(void* context, char* topic, int topic_length, MQTTAsync_message* m) {
    auto* s = static_cast<State*>(context);
    const IncomingMessage message{
        .topic = std::string_view(
            topic, topic_length > 0 ? static_cast<std::size_t>(topic_length) : std::strlen(topic)),
        .payload = std::string_view(static_cast<const char*>(m->payload),
                                    static_cast<std::size_t>(m->payloadlen)),
        .duplicate = m->dup != 0,
        .retained = m->retained != 0,
        .qos = m->qos,
        .packet_id = m->msgid,
        .connection = s->connection.load(),
    };
    // Paho frees nothing we return 1 for; it sends the PUBACK (QoS1) right after we return,
    // whatever we return: 0 would only keep the message in its memory, acknowledged.
    const auto done = [&] {
        MQTTAsync_freeMessage(&m);
        MQTTAsync_free(topic);
        return 1;
    };
    if (s->cut_connection.load() == message.connection) return done();  // see State::socket
    if (message.retained && !s->ingest_options.accept_retained) {
        // Acknowledged: the broker keeps the retained message, and resends it on the next
        // subscription, where it is skipped again.
        s->retained_skipped.fetch_add(1, std::memory_order_relaxed);
        return done();
    }
    if (s->handler(message) == HandleResult::retry_later) {
        // Not taken: cut the connection before Paho can acknowledge it. The callback never
        // waits (Paho holds its process-wide mutex while it runs); the broker redelivers the
        // message, DUP, on the next connection.
        s->handler_retries.fetch_add(1, std::memory_order_relaxed);
        s->refusal_streak.fetch_add(1, std::memory_order_relaxed);
        s->cut(message.connection);
        return done();
    }
    s->refusal_streak.store(0, std::memory_order_relaxed);
    s->messages.fetch_add(1, std::memory_order_relaxed);
    s->bytes.fetch_add(message.payload.size(), std::memory_order_relaxed);
    if (message.duplicate) s->duplicates.fetch_add(1, std::memory_order_relaxed);
    return done();
}

void Ingest::State::on_connection_lost(void* context, char* cause) {
    auto* s = static_cast<State*>(context);
    s->is_connected = false;
    s->socket.store(-1);
    const bool cut_by_us = s->cut_connection.load() == s->connection.load();
    std::lock_guard lock(s->mutex);
    s->last_error = cut_by_us ? "the handler refused a message: connection to " + s->address +
                                    " cut so that it is not acknowledged"
                              : "connection to " + s->address + " lost" +
                                    (cause != nullptr ? std::string(": ") + cause : std::string());
    if (!s->stopping) {
        if (!cut_by_us) spdlog::warn("{}: {}; reconnecting", s->options.config_name, s->last_error);
        s->need_reconnect = true;
    }
    s->changed.notify_all();
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

void Ingest::State::on_subscribe_failure(void* context, MQTTAsync_failureData5* response) {
    auto* s = static_cast<State*>(context);
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
        lock.unlock();
        auto connected_now = connect_once();
        lock.lock();
        if (connected_now) {
            need_reconnect = false;
            failures = 0;
            reconnects.fetch_add(1, std::memory_order_relaxed);
            spdlog::info("{}: reconnected to {}", options.config_name, address);
        } else {
            ++failures;
            connect_failures.fetch_add(1, std::memory_order_relaxed);
            spdlog::warn("{}: {}; next attempt in {} ms", options.config_name,
                         connected_now.error().message,
                         reconnect_delay(std::min(failures, 32)).count());
        }
    }
}

Ingest::Ingest(std::unique_ptr<State> state) : state_(std::move(state)) {}

Result<std::unique_ptr<Ingest>> Ingest::create(BrokerOptions options,
                                               std::vector<std::string> topic_filters,
                                               Handler handler, IngestOptions ingest_options) {
    if (auto ok = validate(options); !ok) return std::unexpected(ok.error());
    if (topic_filters.empty()) {
        return fail(options.config_name + ": no topic filter to subscribe to");
    }
    if (topic_filters.size() > topic_filters_max) {
        return fail(options.config_name + ": " + std::to_string(topic_filters.size()) +
                    " topic filters, at most " + std::to_string(topic_filters_max));
    }
    for (const auto& f : topic_filters) {
        if (f.empty()) return fail(options.config_name + ": an empty topic filter");
    }
    TM_ASSERT(handler);
    std::sort(topic_filters.begin(), topic_filters.end());
    topic_filters.erase(std::unique(topic_filters.begin(), topic_filters.end()),
                        topic_filters.end());

    auto state = std::make_unique<State>();
    state->options = std::move(options);
    state->address = broker_address(state->options);
    state->filters = std::move(topic_filters);
    for (auto& f : state->filters) {
        state->filter_pointers.push_back(f.data());
        state->filter_qos.push_back(1);
    }
    state->handler = std::move(handler);
    state->ingest_options = ingest_options;

    MQTTAsync_createOptions create = MQTTAsync_createOptions_initializer5;
    create.sendWhileDisconnected = 0;
    // No client-side persistence: ingest publishes nothing, and received QoS1 messages are
    // made durable by the handler (the log) before the PUBACK.
    int rc = MQTTAsync_createWithOptions(&state->client, state->address.c_str(),
                                         state->options.client_id.c_str(),
                                         MQTTCLIENT_PERSISTENCE_NONE, nullptr, &create);
    if (rc != MQTTASYNC_SUCCESS) {
        return fail(state->options.config_name + ".uri '" + state->address +
                    "': cannot create the MQTT client: " + paho_error(rc, nullptr));
    }
    rc = MQTTAsync_setCallbacks(state->client, state.get(), &State::on_connection_lost,
                                &State::on_message, nullptr);
    if (rc != MQTTASYNC_SUCCESS) {
        MQTTAsync_destroy(&state->client);
        return fail(state->options.config_name +
                    ": cannot set MQTT callbacks: " + paho_error(rc, nullptr));
    }
    return std::unique_ptr<Ingest>(new Ingest(std::move(state)));
}

Ingest::~Ingest() {
    stop();
    MQTTAsync_destroy(&state_->client);
}

Result<void> Ingest::start(std::chrono::milliseconds first_connect_timeout) {
    State& s = *state_;
    {
        std::lock_guard lock(s.mutex);
        TM_ASSERT(!s.started);
        s.stopping = false;
        s.need_reconnect = false;
    }
    const int saved_timeout_s = s.options.connect_timeout_s;
    s.options.connect_timeout_s = std::max<int>(
        1,
        static_cast<int>(std::chrono::ceil<std::chrono::seconds>(first_connect_timeout).count()));
    auto connected_now = s.connect_once();
    s.options.connect_timeout_s = saved_timeout_s;
    if (!connected_now) {
        s.connect_failures.fetch_add(1, std::memory_order_relaxed);
        return connected_now;
    }
    spdlog::info("{}: connected to {} as '{}', {} filter(s) at QoS1", s.options.config_name,
                 s.address, s.options.client_id, s.filters.size());
    std::lock_guard lock(s.mutex);
    s.started = true;
    s.supervisor = std::thread([&s] { s.supervise(); });
    return {};
}

void Ingest::stop(std::chrono::milliseconds timeout) {
    State& s = *state_;
    {
        std::lock_guard lock(s.mutex);
        if (!s.started) return;
        s.started = false;
        s.stopping = true;
        s.changed.notify_all();
    }
    if (s.supervisor.joinable()) s.supervisor.join();
    // No callback waits (on_message never holds a message), so Paho answers within the
    // timeout; a message read but not yet acknowledged is redelivered on the next run.
    s.disconnect(timeout);
}

std::uint64_t Ingest::connection() const {
    return state_->connection.load();
}

IngestStats Ingest::stats() const {
    IngestStats out;
    const State& s = *state_;
    out.messages = s.messages.load(std::memory_order_relaxed);
    out.bytes = s.bytes.load(std::memory_order_relaxed);
    out.duplicates = s.duplicates.load(std::memory_order_relaxed);
    out.reconnects = s.reconnects.load(std::memory_order_relaxed);
    out.connect_failures = s.connect_failures.load(std::memory_order_relaxed);
    out.handler_retries = s.handler_retries.load(std::memory_order_relaxed);
    out.resubscribes = s.resubscribes.load(std::memory_order_relaxed);
    out.retained_skipped = s.retained_skipped.load(std::memory_order_relaxed);
    out.connections_cut = s.connections_cut.load(std::memory_order_relaxed);
    out.socket_known = s.socket.load() >= 0;
    out.connected = s.is_connected.load();
    std::lock_guard lock(s.mutex);
    out.last_error = s.last_error;
    return out;
}

bool Ingest::connected() const {
    return state_->is_connected.load();
}

}  // namespace tidemark::mqtt
