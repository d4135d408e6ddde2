// Store-and-forward of outbox rows to the upstream broker.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "adapters/mqtt/client_options.h"
#include "core/clock.h"
#include "core/result.h"

namespace tidemark::mqtt {

/// One result ready to leave the process: its outbox sequence number, the expanded upstream
/// topic (see topic.h) and the JSON record of DESIGN.md section 7.
struct OutboundRow {
    uint64_t seq = 0;
    std::string topic;
    std::string payload;
    bool retain = false;  // a pipeline's version record, the gateway's health record
};

/// What the forwarder needs from the outbox; the runtime implements it over LMDB.
/// peek() is called from the forwarder's thread, delivered() from its deleter thread, possibly
/// while a peek() runs: an implementation must allow that. A row peek() returned may be on the
/// wire from then on: the source keeps it from compaction itself (lmdb's outbox_peek claims what
/// it returns), so nothing about it comes back from here.
class OutboxSource {
  public:
    virtual ~OutboxSource() = default;
    /// Up to `limit` rows with seq >= from_seq, in ascending seq order.
    virtual Result<std::vector<OutboundRow>> peek(uint64_t from_seq, size_t limit) = 0;
    /// These rows reached the upstream broker: delete them. `seqs` is ascending and holds no
    /// duplicate, but may name a row that is already gone (an acknowledgement that arrived for
    /// a copy sent before a reconnect): that is not an error.
    virtual Result<void> delivered(std::span<const uint64_t> seqs) = 0;
};

struct ForwarderOptions {
    /// addresses (one, or a cluster's nodes), client_id, credentials, TLS files, keep_alive_s,
    /// connect_timeout_s, and max_inflight = the most rows published and not yet acknowledged.
    /// The session is always clean here (libmosquitto, through the same mapping as the health
    /// publisher: mosquitto_options.h), whatever ingest's persistent session chooses.
    BrokerOptions broker;
    /// 1: at-least-once (a row is deleted on its PUBACK). 0: a row is deleted once written to
    /// the socket, so rows in flight when the link drops are lost; for links where loss is fine.
    int qos = 1;
    /// Acknowledged rows are handed to the deleter thread (one delivered() call, one LMDB
    /// commit) per this many acks... (while a commit runs, the next batches wait and are
    /// deleted together, so a slow disk gets fewer, larger commits, not a stalled link; what a
    /// crash may send again is bounded by crash_resend_rows_max()). 1024: an LMDB delete
    /// commit costs ~1 us of CPU per row at 1024 rows against ~3 us at 256 (bench_forward's
    /// store_ratio, docs/BENCHMARKS.md), and adds 768 rows to what a crash may re-send.
    size_t delete_batch_rows = 1024;
    /// ...or once the oldest undeleted ack is this old, whichever comes first.
    int64_t delete_interval_ms = 50;
    /// Rows read from the outbox per peek(): bounds the forwarder's own buffer.
    size_t peek_rows = 512;
    /// Without notify(), the outbox is looked at again after this long.
    int64_t poll_interval_ms = 1'000;
    /// Reconnect backoff (core::Backoff): the first retry after a lost link is immediate (on
    /// the next address), then the wait doubles from reconnect_delay_min_ms up to
    /// reconnect_delay_max_ms and each wait is drawn uniformly from [half, all] of that ("equal
    /// jitter"), so that a fleet of gateways spreads its reconnects while no wait ever exceeds
    /// the maximum: after an outage the first row leaves at most reconnect_delay_max_ms (plus
    /// the handshake) after the broker is back.
    int64_t reconnect_delay_min_ms = 250;
    /// With rows in flight and no acknowledgement for this long, the link is taken as lost and
    /// rebuilt (its rows are re-sent): a connection that is up but stalled must not hold the
    /// outbox forever.
    int64_t ack_timeout_ms = 30'000;
    int64_t reconnect_delay_max_ms = 1'500;
    /// Every time the forwarder reads: backoff, ack timeout, delete interval, polling, the stop
    /// deadline (steady_ms) and offline_since_ms (wall_ms). A test clock must be advanced for
    /// those to pass. Required (create() refuses nullptr): firmware passes its SystemClock.
    const core::Clock* clock = nullptr;
};

/// The most acknowledged rows that wait for their delete (the commit running and the rows
/// acknowledged since) before the forwarder stops sending until the disk catches up:
/// delete_batch_rows + max(4096, 4 * max_inflight); 5120 at the defaults (1024, 64).
size_t undeleted_rows_max(const ForwarderOptions& options);

/// The most rows a crash (kill -9, power loss) makes the next run send again: the acknowledged
/// rows whose delete had not committed plus the unacknowledged ones in flight, which together
/// never exceed undeleted_rows_max() - 1 + max_inflight; 5183 at the defaults. Upstream dedupes
/// them by id (DESIGN.md section 5).
size_t crash_resend_rows_max(const ForwarderOptions& options);

struct ForwarderStats {
    bool link_up = false;
    uint64_t sends = 0;       ///< publishes handed to the client, re-sends included
    uint64_t acks = 0;        ///< rows acknowledged by the broker (PUBACK, or written at QoS0)
    uint64_t reconnects = 0;  ///< successful connects after the first one
    uint64_t connect_failures = 0;
    size_t inflight = 0;  ///< published, not yet acknowledged
    /// Rows the broker can never take (an invalid UTF-8 topic, a payload over MQTT's 256 MiB):
    /// deleted, counted here and logged, so that one bad row cannot stop the rows behind it.
    uint64_t rejected = 0;
    std::string last_error;  ///< the latest failure, kept after the link recovers; "" if none
    /// Wall clock (ms since the epoch) when the link went down or the first attempt failed;
    /// 0 while the link is up or before the first attempt.
    int64_t offline_since_ms = 0;
    /// Time from the latest successful connect to the first row acknowledged on it; empty until
    /// that row is acknowledged.
    std::optional<int64_t> first_row_after_reconnect_ms;
    /// The address the link is on (while link_up) or was last on; "" before the first connect.
    std::string node;
    /// Links made up on another address than the previous link's (NodeRotation).
    uint64_t failovers = 0;
    /// The latest outage, from the loss of a link (or the first failed attempt) to the first
    /// row acknowledged after it, on whichever node: what a failover cost. Empty before one.
    std::optional<int64_t> last_outage_ms;
};

/// Publishes outbox rows upstream and deletes each one once the broker has acknowledged it.
///
/// Operation: a thread of its own connects (clean session: the outbox, not the broker session,
/// is the store) to one of broker.addresses (the first first; after a refused or lost
/// connection the next, round the list: NodeRotation, so a cluster's surviving nodes take over
/// from a dead one), publishes rows in seq order with at most broker.max_inflight unacknowledged,
/// and deletes acknowledged rows in batches (delete_batch_rows or delete_interval_ms, sorted by
/// seq). Several sources share the link (results, then side output): each keeps its own seq
/// order, and a later source is only read when the ones before it have nothing to send. When
/// the link drops, acknowledged rows are deleted and sending starts again from the oldest row
/// left in each source, on the next node, so a row may reach upstream twice (at-least-once:
/// upstream dedupes by the record's id); the outbox keeps every row until some node has
/// acknowledged it. Reconnects follow ForwarderOptions' backoff. A failure (a wrong CA, a
/// refused login, a broker down) is logged once per change, kept in stats().last_error, and
/// retried. Nothing leaves the outbox without an acknowledgement.
///
/// The client is libmosquitto driven from this one thread (poll on its socket; publishes are
/// written straight to the socket and PUBACKs handled in the same thread): no lock or thread
/// hand-off per row. Paho's asynchronous client, which ingest uses, cost about 100 us of CPU per
/// QoS1 row in three threads contending for its mutexes (docs/BENCHMARKS.md, "forward").
///
/// Concurrency: create/start/stop from one owner thread; notify() and stats() from any thread.
/// Two threads of its own: the network loop, and a deleter that runs delivered() so that the
/// disk's fsync never holds the link idle.
///
/// Limits: memory is bounded by peek_rows buffered rows per source plus max_inflight
/// unacknowledged ones. An outbox error (peek/delivered failing) is kept in last_error and
/// retried after poll_interval_ms; it does not stop the thread.
class Forwarder {
  public:
    /// Checks the options (validate(broker), qos, batch sizes) and builds the client; no I/O.
    static Result<std::unique_ptr<Forwarder>> create(ForwarderOptions options,
                                                     OutboxSource& source);
    /// Several sources on one link, in priority order (not empty, none null).
    static Result<std::unique_ptr<Forwarder>> create(ForwarderOptions options,
                                                     std::vector<OutboxSource*> sources);
    ~Forwarder();
    Forwarder(const Forwarder&) = delete;
    Forwarder& operator=(const Forwarder&) = delete;

    /// Starts the thread. The first connect happens there: start() does not wait for the broker.
    Result<void> start();
    /// New rows were appended to the outbox; cheap, never blocks on the network.
    void notify();
    /// Stops sending, waits up to `timeout` for in-flight acknowledgements, deletes the rows
    /// acknowledged so far and disconnects. Rows not acknowledged stay in the outbox.
    void stop(std::chrono::milliseconds timeout);
    ForwarderStats stats() const;

    class Impl;

  private:
    explicit Forwarder(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace tidemark::mqtt
