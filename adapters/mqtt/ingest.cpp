#include "adapters/mqtt/ingest.h"

#include <MQTTAsync.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>

#include "adapters/mqtt/ingest_state.h"
#include "adapters/mqtt/ingest_subscriptions.h"
#include "adapters/mqtt/paho_socket.h"

// Why the Paho C API and not Paho C++'s async_client: async_client's message callback always
// returns "processed" to Paho C and copies topic and payload into a new message object per
// message. Here the callback decides per message whether the connection must be cut before the
// PUBACK goes (paho_socket.h), and hands the handler views into Paho's buffer with the DUP flag
// and the packet id.

namespace tidemark::mqtt {

std::atomic<std::uint64_t> connections_in_process{0};

// Runs on Paho's receive thread inside on_message, before Paho writes the PUBACK: after the
// shutdown that write fails (EPIPE; Paho ignores SIGPIPE), so nothing of this connection is
// acknowledged any more, and Paho reports the connection lost.
void Ingest::State::cut(std::uint64_t connection_number) {
    cut_connection.store(connection_number);
    connections_cut.fetch_add(1, std::memory_order_relaxed);
    const int fd = socket.load();
    const auto [host, port] = node_host_port();
    if (fd >= 0 && paho_socket::connected_to(fd, host, port)) {
        ::shutdown(fd, SHUT_RDWR);
        return;
    }
    // Paho's trace did not name the socket: cut every connection of this process to the
    // broker (the health publisher's too, which reconnects by itself).
    const int cut_count = paho_socket::shutdown_all_connected_to(host, port);
    spdlog::warn("{}: cut {} connection(s) to {}:{} (ingest's own socket is not known)",
                 options.config_name, cut_count, host, port);
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

    if (ingest_options.protocol != MqttVersion::v5 && ingest_options.packet_bytes_max > 0) {
        spdlog::info("{}: MQTT 3.1.1 has no Maximum Packet Size: the broker's own limit applies",
                     options.config_name);
    }
    auto state = std::make_unique<State>();
    state->options = std::move(options);
    state->rotation = NodeRotation(state->options.addresses.size());
    state->aim_at_current_node();
    state->filters = std::move(topic_filters);
    for (auto& f : state->filters) {
        state->filter_pointers.push_back(f.data());
        state->filter_qos.push_back(1);
    }
    state->handler = std::move(handler);
    state->ingest_options = ingest_options;
    record_subscriptions(*state);

    MQTTAsync_createOptions create = MQTTAsync_createOptions_initializer5;
    create.sendWhileDisconnected = 0;
    // No client-side persistence: ingest publishes nothing, and received QoS1 messages are
    // made durable by the handler (the log) before the PUBACK.
    // The first address names the client (and its transport: every address of one broker
    // has the same, validate()); each attempt names its node (fill_paho_connect).
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

// The record of what the session holds becomes what it held plus what this Ingest subscribes,
// before anything is subscribed (a crash then leaves a record that holds too much, never too
// little); stop() shrinks it once the stale filters are gone. A record that cannot be read or
// written only costs the unsubscribing: said, not fatal.
void Ingest::record_subscriptions(State& s) {
    const std::string& path = s.ingest_options.subscriptions_file;
    if (path.empty()) return;
    auto recorded = detail::read_subscriptions(path);
    if (!recorded) {
        spdlog::warn("{}: {}; filters no longer in the config stay subscribed",
                     s.options.config_name, recorded.error().message);
        return;
    }
    std::vector<std::string> all = s.filters;
    for (std::string& f : *recorded) {
        if (std::binary_search(s.filters.begin(), s.filters.end(), f)) continue;
        all.push_back(f);
        s.stale_filters.push_back(std::move(f));
    }
    for (std::string& f : s.stale_filters)
        s.stale_pointers.push_back(f.data());
    if (s.stale_filters.empty() && recorded->size() == s.filters.size()) return;
    if (auto ok = detail::write_subscriptions(path, all); !ok)
        spdlog::warn("{}: recording the subscriptions: {}", s.options.config_name,
                     ok.error().message);
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
    // Each address once, from the one the rotation is at: a cluster's first node being down
    // must not keep the client from the others.
    Result<void> connected_now = fail("no address");
    for (std::size_t tried = 0; tried < s.options.addresses.size(); ++tried) {
        connected_now = s.connect_once();
        if (connected_now) break;
        s.connect_failures.fetch_add(1, std::memory_order_relaxed);
        std::lock_guard lock(s.mutex);
        s.rotation.move_on();
        if (s.stopping) break;
    }
    s.options.connect_timeout_s = saved_timeout_s;
    if (!connected_now) return connected_now;
    spdlog::info("{}: connected to {} as '{}', {} filter(s) at QoS1", s.options.config_name,
                 s.connected_node, s.options.client_id, s.filters.size());
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
    bool shrink = false;
    {
        std::lock_guard lock(s.mutex);
        shrink = s.stale_gone && !s.stale_filters.empty();
    }
    if (shrink && !s.ingest_options.subscriptions_file.empty())
        if (auto ok = detail::write_subscriptions(s.ingest_options.subscriptions_file, s.filters);
            !ok)
            spdlog::warn("{}: recording the subscriptions: {}", s.options.config_name,
                         ok.error().message);
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
    out.failovers = s.failovers.load(std::memory_order_relaxed);
    out.socket_known = s.socket.load() >= 0;
    out.connected = s.is_connected.load();
    std::lock_guard lock(s.mutex);
    out.last_error = s.last_error;
    out.node = s.connected_node;
    return out;
}

bool Ingest::connected() const {
    return state_->is_connected.load();
}

}  // namespace tidemark::mqtt
