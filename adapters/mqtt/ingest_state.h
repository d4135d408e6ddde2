// Ingest's inside (internal to adapters/mqtt), one class over two files by job: ingest.cpp (the
// client's life, each message, cutting a connection) and ingest_connect.cpp (connecting,
// subscribing, disconnecting, the reconnect thread).
#pragma once

#include <MQTTAsync.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "adapters/mqtt/ingest.h"
#include "adapters/mqtt/node_rotation.h"

namespace tidemark::mqtt {

// Numbers IncomingMessage::connection. Process-wide, not per Ingest: the runtime replaces its
// Ingest on every pause, and the handler must still see each new connection as new.
extern std::atomic<std::uint64_t> connections_in_process;

// A Paho return code, an MQTT 5 reason code or an MQTT 3.1.1 CONNACK return code, in Paho's
// words (MQTTReasonCode_toString, MQTTAsync_strerror) with the likely fix; `message` appended.
std::string paho_error(int code, const char* message);

struct Ingest::State {
    BrokerOptions options;
    std::vector<std::string> filters;
    std::vector<char*> filter_pointers;  // MQTTAsync_subscribeMany wants char* const*
    std::vector<int> filter_qos;
    Handler handler;
    IngestOptions ingest_options;
    MQTTAsync client = nullptr;

    std::atomic<std::uint64_t> messages{0}, bytes{0}, duplicates{0}, reconnects{0},
        connect_failures{0}, handler_retries{0}, resubscribes{0}, retained_skipped{0},
        connections_cut{0}, failovers{0};
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
    // Which address the next attempt goes to, and the node of the current (or last)
    // connection: read by Paho's callbacks, moved by start() and supervise() between attempts.
    NodeRotation rotation{1};
    BrokerAddress node;
    std::string address;         // broker_address(node), for messages
    std::string connected_node;  // the address of the latest connection; "" before one
    std::string last_error;
    bool started = false;
    bool stopping = false;
    bool need_reconnect = false;
    bool subscribed_once = false;  // subscribe on the first connect even if a session exists:
                                   // the filters may have changed since the last run
    // Recorded filters (IngestOptions::subscriptions_file) no longer wanted: unsubscribed on
    // the first connect that finds the session; `stale_gone` once they are (or the session
    // was not there to hold them), so that stop() can shrink the record to `filters`.
    std::vector<std::string> stale_filters;
    std::vector<char*> stale_pointers;
    bool stale_gone = false;
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

    bool v5() const { return ingest_options.protocol == MqttVersion::v5; }
    // The address of the next attempt (`node`, `address`), from rotation; under `mutex`.
    void aim_at_current_node();
    // (host, port) of the current node, for finding and cutting its socket.
    std::pair<std::string, int> node_host_port() const;
    Result<void> connect_once();
    void disconnect(std::chrono::milliseconds timeout);
    void subscription_refused(std::string error);
    void supervise();
    void cut(std::uint64_t connection_number);

    // What Paho's callbacks report, whichever protocol's callback it came through.
    void connected(bool session_present);
    void connect_failed(int code, const char* message);
    void subscribed(const std::vector<int>& granted);
    void subscribe_failed(int code, const char* message);

    // Paho C callbacks: `context` is the State. Paho takes the *5 ones with MQTT 5 only and
    // the others with 3.1.1 only.
    static int on_message(void* context, char* topic, int topic_length, MQTTAsync_message* m);
    static void on_connection_lost(void* context, char* cause);
    static void on_connect_success(void* context, MQTTAsync_successData5* response);
    static void on_connect_failure(void* context, MQTTAsync_failureData5* response);
    static void on_subscribe_success(void* context, MQTTAsync_successData5* response);
    static void on_subscribe_failure(void* context, MQTTAsync_failureData5* response);
    static void on_unsubscribe_success(void* context, MQTTAsync_successData5* response);
    static void on_unsubscribe_failure(void* context, MQTTAsync_failureData5* response);
    static void on_disconnect_done(void* context, MQTTAsync_successData5* response);
    static void on_disconnect_failed(void* context, MQTTAsync_failureData5* response);
    static void on_connect_success3(void* context, MQTTAsync_successData* response);
    static void on_connect_failure3(void* context, MQTTAsync_failureData* response);
    static void on_subscribe_success3(void* context, MQTTAsync_successData* response);
    static void on_subscribe_failure3(void* context, MQTTAsync_failureData* response);
    static void on_unsubscribe_success3(void* context, MQTTAsync_successData* response);
    static void on_unsubscribe_failure3(void* context, MQTTAsync_failureData* response);
    static void on_disconnect_done3(void* context, MQTTAsync_successData* response);
    static void on_disconnect_failed3(void* context, MQTTAsync_failureData* response);
};

}  // namespace tidemark::mqtt
