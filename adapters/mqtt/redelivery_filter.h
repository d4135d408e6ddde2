// Recognises MQTT redeliveries of records that are already in the log.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tidemark::mqtt {

/// Operation: a QoS1 message is appended to the log before its PUBACK is sent, so a PUBACK lost
/// to a crash or a dropped link makes the broker send that message again, flagged DUP, with its
/// original packet id, when we reconnect (MQTT 3.1.1, 4.4: only then). What can come back is
/// bounded by the broker's in-flight window: the last records taken before the connection
/// ended. So the candidates are fixed when a connection starts (connection_started()): the
/// last `candidates_max` records remembered before it, minus those already matched. A DUP
/// message is a redelivery (is_redelivery()) only when it matches a candidate on both packet id
/// and a hash of topic and payload; the match consumes the candidate and makes it a record of
/// the new connection (its PUBACK can be lost again). A DUP message that matches nothing is
/// one the broker sent but we never read (it was in flight when the link went): it is new, even
/// when its bytes repeat an earlier record, as readings without a time stamp often do. Records
/// of the current connection are never candidates: the broker does not redeliver within one.
/// After a process restart the packet ids of the log's last records are unknown: seed() adds
/// them as candidates that match any packet id.
///
/// Concurrency: none; owned by the ingest callback thread (seeded before ingest starts).
///
/// Limits: `candidates_max` = 128. mosquitto's max_inflight_messages defaults to 20 per client
/// (the most a broker sends us without our PUBACK), so 128 covers it six times over and the
/// raised settings seen on gateways (our test broker uses 100). A broker set above 128, or to
/// 0 (unlimited), can redeliver more than the filter keeps: the oldest of those are logged
/// twice, never lost. A larger bound costs a longer scan per DUP message and, for seeded
/// records, more chances of the false match below. Seeded records match on bytes alone: after
/// a restart, a never-read DUP message whose topic and payload equal a seeded record that no
/// real redelivery has matched yet is taken for it and skipped (lost); storing the packet id
/// in the log record would close this. A broker that reuses a packet id within
/// `candidates_max` messages for the same bytes, and 64-bit hash collisions (2^-64 a pair),
/// likewise.
class RedeliveryFilter {
  public:
    static constexpr std::size_t candidates_max = 128;

    /// A new broker connection starts: the last `candidates_max` records remembered before this
    /// call (seeded, taken or matched on earlier connections, not yet matched) become the
    /// candidates. Call it before the connection's first message.
    void connection_started();

    /// A record was appended for this message (fresh, or DUP but not a redelivery).
    void remember(int packet_id, std::string_view topic, std::string_view payload);

    /// A record of the log written by an earlier process, oldest first; its packet id is lost.
    /// Only before the first connection_started().
    void seed(std::string_view topic, std::string_view payload);

    /// For a message flagged DUP: true when it is the redelivery of a candidate (consumed).
    /// A message without DUP is never a redelivery; do not ask.
    bool is_redelivery(int packet_id, std::string_view topic, std::string_view payload);

    /// Candidates not yet matched (<= candidates_max).
    std::size_t candidates() const { return candidate_count_; }

    /// The hash used: FNV-1a 64 over the topic, a 0 byte, then the payload.
    static std::uint64_t hash(std::string_view topic, std::string_view payload);

  private:
    static constexpr int any_packet_id = -1;  // seeded: the packet id died with the process
    struct Entry {
        std::uint64_t hash = 0;
        int packet_id = any_packet_id;
    };
    void push_recent(Entry entry);

    std::array<Entry, candidates_max> candidates_{};  // oldest first
    std::size_t candidate_count_ = 0;
    std::array<Entry, candidates_max> recent_{};  // ring: records since connection_started()
    std::size_t recent_next_ = 0;
    std::size_t recent_count_ = 0;
    bool started_ = false;  // connection_started() was called once: seeding is over
};

}  // namespace tidemark::mqtt
