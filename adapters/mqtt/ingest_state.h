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
#include <vector>

#include "adapters/mqtt/ingest.h"

namespace tidemark::mqtt {

// Numbers IncomingMessage::connection. Process-wide, not per Ingest: the runtime replaces its
// Ingest on every pause, and the handler must still see each new connection as new.
extern std::atomic<std::uint64_t> connections_in_process;

// A Paho return code, or an MQTT 5 reason code, worded for the likely fix; `message` appended.
std::string paho_error(int code, const char* message);

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
    static void on_unsubscribe_success(void* context, MQTTAsync_successData5* response);
    static void on_unsubscribe_failure(void* context, MQTTAsync_failureData5* response);
    static void on_disconnect_done(void* context, MQTTAsync_successData5* response);
    static void on_disconnect_failed(void* context, MQTTAsync_failureData5* response);
};

}  // namespace tidemark::mqtt
