// Ingest: the gateway broker's QoS1 messages, handed to the caller before they are acknowledged.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "adapters/mqtt/client_options.h"
#include "core/result.h"

namespace tidemark::mqtt {

/// One message as the broker delivered it. The views point into the client library's buffer
/// and are valid only during the handler call.
struct IncomingMessage {
    std::string_view topic;
    std::string_view payload;
    bool duplicate = false;  ///< MQTT DUP flag: the broker may have delivered it before
    /// MQTT RETAIN flag: sent because a subscription matched a retained message (a retained
    /// message published while we are subscribed arrives without it, MQTT 3.1.1 3.3.1.3).
    /// Reaches the handler only with IngestOptions::accept_retained.
    bool retained = false;
    int qos = 0;
    int packet_id = 0;  ///< MQTT packet identifier (0 for QoS0); kept on a redelivery
    /// The broker connection that delivered it: unique in the process (across Ingest
    /// objects) and increasing, set before the connection's first message. A change tells the
    /// handler that a new connection started, so the broker may now redeliver, with DUP, what
    /// was in flight on the earlier ones (RedeliveryFilter::connection_started()).
    std::uint64_t connection = 0;
};

/// What the handler did with a message.
enum class HandleResult {
    accepted,  ///< done with it (appended, or deliberately skipped): acknowledge it
    /// Cannot take it now (log or disk full): do not acknowledge it. The connection is cut at
    /// once and re-established later; the broker then sends it again (DUP).
    retry_later,
};

/// Called on the client library's receive thread for every message, one at a time, before the
/// PUBACK is sent. It must not throw (an exception would cross C code: it stops the process),
/// and must not wait for long: Paho C runs every callback of the process under one mutex.
using Handler = std::function<HandleResult(const IncomingMessage&)>;

struct IngestStats {
    std::uint64_t messages = 0;          ///< handler calls that returned accepted
    std::uint64_t bytes = 0;             ///< payload bytes of those
    std::uint64_t duplicates = 0;        ///< of those, flagged DUP by the broker
    std::uint64_t reconnects = 0;        ///< successful connects after the first
    std::uint64_t connect_failures = 0;  ///< failed connect attempts
    std::uint64_t handler_retries = 0;   ///< handler calls that returned retry_later
    std::uint64_t connections_cut = 0;   ///< connections cut for such a refusal
    std::uint64_t resubscribes = 0;      ///< connects where the broker had lost our session
    std::uint64_t retained_skipped = 0;  ///< retained messages acknowledged unseen (see options)
    /// Connections made on another address than the previous connection's (NodeRotation).
    std::uint64_t failovers = 0;
    bool connected = false;
    /// The address the connection is on (while connected) or was last on; "" before the first.
    std::string node;
    /// Whether the current connection's socket is known (paho_socket.h); when not, a refusal
    /// cuts every connection of the process to the broker.
    bool socket_known = false;
    std::string last_error;  ///< the most recent connect failure or connection loss, or empty
};

struct IngestOptions {
    /// Whether retained messages the broker sends because of our subscription reach the
    /// handler. Off by default: every Ingest subscribes on its first connect (the filters may
    /// have changed), and the broker then resends every matching retained message (MQTT
    /// 3.1.1 3.3.1.3), so each start and each pause would log them again. Live messages,
    /// retained or not, are unaffected.
    bool accept_retained = false;
    /// MQTT 5 CONNECT's Maximum Packet Size: the broker sends no larger packet (mosquitto drops
    /// it for this client and logs "Dropping too large outgoing PUBLISH"), so a huge publish is
    /// never read into memory. 0: no limit (the broker's own, up to MQTT's 256 MiB). MQTT 5 only.
    std::uint32_t packet_bytes_max = 0;
    /// Where the filters subscribed in the broker's session are recorded (a small file beside
    /// the data). A persistent session keeps every filter ever subscribed, so a filter a new
    /// config no longer has would still be delivered and logged, run after run: with a record,
    /// the first connect that finds the session unsubscribes the recorded filters that are no
    /// longer wanted. Empty: nothing is recorded or unsubscribed.
    std::string subscriptions_file{};
    /// MQTT 5, or 3.1.1 for a broker without it (client_options.h).
    MqttVersion protocol = MqttVersion::v5;
};

/// Operation: a persistent MQTT 5 session with the broker (clean start off, a session that
/// never expires, a fixed client id; or an MQTT 3.1.1 one, clean session off), QoS1
/// subscriptions to every filter, made on the first
/// connect of each Ingest and whenever the broker reports no session present (it lost our
/// state); otherwise the broker's stored subscriptions are reused. Each subscription makes the
/// broker resend the matching retained messages: they are acknowledged without the handler and
/// counted (retained_skipped) unless IngestOptions::accept_retained. A lost connection is
/// re-established by a background thread with capped exponential backoff (reconnect_backoff:
/// 250 ms .. 30 s, equal jitter), on the next of the broker's addresses (NodeRotation: a
/// cluster's nodes share the session, so another node resumes it). The broker queues messages
/// while we are away. With packet_bytes_max the broker never sends a larger packet.
///
/// Acknowledgement: the handler runs inside Paho C's message-arrived callback, and Paho C
/// (MQTTProtocol_handlePublishes, 1.3.x) sends the QoS1 PUBACK only after that callback
/// returns (or queues it behind a pending write: later, never earlier), so a message the
/// broker considers delivered has been through the handler (for the runtime: is in the log).
/// A crash or a lost connection between handler and PUBACK makes the broker redeliver it with
/// DUP set on the next connection (IncomingMessage::connection); RedeliveryFilter recognises
/// it. Paho acknowledges whatever the callback returns (returning "not processed" only keeps
/// the message in Paho's memory), so a message the handler does not take is kept from being
/// acknowledged by cutting the connection before the callback returns (paho_socket.h).
///
/// Back-pressure: when the handler returns retry_later, the callback shuts the connection's
/// socket down and returns at once: the PUBACK cannot leave, messages still read on that
/// connection are not handed to the handler, and the broker keeps them all in our session
/// (bounded by its max_queued_messages) and resends them, in order and flagged DUP, on the next
/// connection, on the same node (the node is not at fault). The reconnect waits the backoff of
/// refusals in a row, so a handler that keeps refusing costs one message read per 30 s at most. The
/// callback never waits: Paho C runs the callbacks of every client in the process under one mutex,
/// and a held callback would stop them all (and stop(), and the next create()). A pause longer than
/// that is the caller's: stop and start later.
///
/// Concurrency: create/start/stop from one owner thread; stats() and connected() from any
/// thread. The handler is called from one Paho thread, never concurrently with itself.
///
/// Limits: QoS1 is asked for every filter (a QoS0 publish arrives as QoS0: it cannot be
/// redelivered). No Receive Maximum is sent: the number of messages in flight towards us is the
/// broker's max_inflight_messages. Topic filters: at most 64.
class Ingest {
  public:
    static constexpr std::size_t topic_filters_max = 64;

    /// Checks the options and filters and creates the client; no connection yet.
    static Result<std::unique_ptr<Ingest>> create(BrokerOptions options,
                                                  std::vector<std::string> topic_filters,
                                                  Handler handler,
                                                  IngestOptions ingest_options = {});
    ~Ingest();
    Ingest(const Ingest&) = delete;
    Ingest& operator=(const Ingest&) = delete;

    /// Connects and subscribes, waiting up to `first_connect_timeout` for the first connect
    /// and subscription, on each address in turn until one takes it (so at most that long per
    /// address). On failure returns why (refused, unreachable, bad credentials, TLS) and leaves
    /// the client stopped; start() may be called again. Once started, lost connections are
    /// retried in the background until stop().
    Result<void> start(std::chrono::milliseconds first_connect_timeout = std::chrono::seconds(10));

    /// Stops reconnecting and disconnects cleanly (the session stays on the broker), waiting
    /// at most `timeout` (plus a second) for the handler in progress and the DISCONNECT.
    /// Idempotent.
    void stop(std::chrono::milliseconds timeout = std::chrono::seconds(5));

    IngestStats stats() const;
    bool connected() const;
    /// The current (or last) broker connection's number, as IncomingMessage::connection; 0
    /// before the first.
    std::uint64_t connection() const;

    struct State;  // the Paho C callbacks reach it: defined in ingest.cpp

  private:
    explicit Ingest(std::unique_ptr<State> state);
    static void record_subscriptions(State& state);
    std::unique_ptr<State> state_;
};

}  // namespace tidemark::mqtt
