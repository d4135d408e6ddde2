// Recognises MQTT redeliveries of records that are already in the log.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace tidemark::mqtt {

/// Operation: a QoS1 message is appended to the log before its PUBACK is sent, so a PUBACK lost
/// to a crash or a dropped link makes the broker send that message again, flagged DUP, with its
/// original packet id, when we reconnect (MQTT 3.1.1, 4.4: only then). The filter keeps the
/// log's last `candidates_max` records in log order (seed(), then remember()), which is the
/// order the broker sent them in: a redelivery is never logged again, so every message the
/// broker delivered is there once. PUBACKs go out, and are read by the broker, in that order
/// (MQTT 3.1.1, 4.6), so what the broker still holds unacknowledged when a connection ends is
/// a suffix of those records, and it resends it first on the next connection, in order
/// (4.6), before the DUP messages it had sent but we never read and before anything new.
///
/// So on each connection (connection_started()) the redeliveries form one run: the first DUP
/// message starts it if it matches a record of the window (a hash of topic and payload, and
/// the packet id when known), and each further DUP message continues it only if it matches the
/// record after the one the previous message matched; the run ends at the first DUP message
/// that does not, or at the last record taken before the connection started. Everything after
/// the run is new, even when its bytes repeat an earlier record, as readings without a time
/// stamp often do. A message without DUP is never a redelivery. A record matched stays where
/// it is in the window: its new PUBACK can be lost again.
///
/// When the first DUP message matches several records (repeated bytes; after a restart the
/// packet ids are unknown: seeded records match any id), the filter follows up to
/// `alignments_max` candidate runs at once, the newest starts first, and drops each at its
/// first mismatch; a message is a redelivery while any run still matches it.
///
/// Concurrency: none; owned by the ingest callback thread (seeded before ingest starts).
///
/// Limits: `candidates_max` = 65535: the broker's packet ids are unique among the messages it
/// has not seen acknowledged (MQTT 3.1.1, 2.3.1), so no more can come back, whatever its
/// max_inflight_messages says (mosquitto 2.0.11 sends a resumed session its whole backlog at
/// once). Memory: 16 bytes a record (1 MiB). Cost: nothing per message without DUP beyond an
/// append; one scan of the window for a connection's first DUP message; then at most
/// `alignments_max` comparisons per DUP message. Records the process never saw (dropped before
/// the log, or the log holds fewer than the broker redelivers, e.g. after retention) are
/// logged twice, never lost. Repeated bytes: when every record looks alike, whether a DUP
/// message is a redelivery or one we never read cannot be told from topic and payload: the
/// filter then takes at most `alignments_max` DUP messages beyond the real run for
/// redeliveries (skipped: lost) or, when the real run is longer than that, logs the rest
/// twice; storing the packet id in the log record would close this. A broker that reuses a
/// packet id within the window for the same bytes, and 64-bit hash collisions (2^-64 a pair),
/// likewise.
class RedeliveryFilter {
  public:
    static constexpr std::size_t candidates_max = 65535;
    static constexpr std::size_t alignments_max = 128;

    RedeliveryFilter();

    /// A new broker connection starts: the records remembered before this call are the
    /// candidates. Call it before the connection's first message.
    void connection_started();

    /// A record was appended for this message (fresh, or DUP but not a redelivery). Only for
    /// messages the broker may send again (QoS1): a QoS0 one in the window breaks the run of
    /// the redeliveries around it, which are then logged again.
    void remember(int packet_id, std::string_view topic, std::string_view payload);

    /// A record of the log written by an earlier process, oldest first; its packet id is lost.
    /// Only before the first connection_started(), and only records of messages the broker may
    /// send again (log::Record::redeliverable), as remember().
    void seed(std::string_view topic, std::string_view payload);

    /// For a message flagged DUP: true when it is the redelivery of a candidate.
    /// A message without DUP is never a redelivery; do not ask.
    bool is_redelivery(int packet_id, std::string_view topic, std::string_view payload);

    /// Records in the window that a redelivery could still match on this connection.
    std::size_t candidates() const;

    /// The hash used: FNV-1a 64 over the topic, a 0 byte, then the payload.
    static std::uint64_t hash(std::string_view topic, std::string_view payload);

  private:
    static constexpr int any_packet_id = -1;  // seeded: the packet id died with the process
    struct Entry {
        std::uint64_t hash = 0;
        int packet_id = any_packet_id;
    };
    void push(Entry entry);
    Entry& at(std::uint64_t seq) { return window_[seq % candidates_max]; }
    bool matches(std::uint64_t seq, std::uint64_t h, int packet_id);
    std::uint64_t oldest() const { return next_ - count_; }

    std::vector<Entry> window_;  // ring of the last candidates_max records, by sequence number
    std::uint64_t next_ = 0;     // sequence number of the next record
    std::size_t count_ = 0;
    std::uint64_t end_ = 0;  // records before this were taken before the connection started
    enum class Run { not_started, running, over };
    Run run_ = Run::over;
    std::vector<std::uint64_t> alignments_;  // per candidate run: the record it expects next
    bool started_ = false;  // connection_started() was called once: seeding is over
};

}  // namespace tidemark::mqtt
