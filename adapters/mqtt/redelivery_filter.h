// Recognises MQTT redeliveries of records that are already in the log.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tidemark::mqtt {

/// Operation: remembers a 64-bit hash of (topic, payload) of the last `capacity` records
/// appended to the log. When the broker redelivers a QoS1 message (DUP flag set) because the
/// PUBACK was lost - tidemark crashed or the link dropped between the append and the PUBACK -
/// `seen` says whether that record is among the recent ones, so the caller skips it instead of
/// logging it twice. The runtime seeds it from the log's tail on start.
/// Only messages with DUP set are checked: a fresh message is always appended, even when a
/// device sends the same bytes twice.
///
/// Concurrency: none; owned by the ingest callback thread.
///
/// Limits: a redelivery older than the last `capacity` appends is not recognised (the broker
/// redelivers only its in-flight window, at most max_inflight_messages per client, so
/// `capacity` must stay above that). A redelivered message whose bytes equal a different,
/// recent record (a device repeating an identical payload, with no sequence number or time
/// stamp in it) is taken for that record and skipped. Hash collisions (2^-64 per pair) likewise.
class RedeliveryFilter {
  public:
    static constexpr std::size_t capacity = 4096;

    /// True when a record with this topic and payload is among the last `capacity` remembered.
    bool seen(std::string_view topic, std::string_view payload) const;

    /// Records an appended message, evicting the oldest when full.
    void remember(std::string_view topic, std::string_view payload);

    /// Number of hashes currently held (<= capacity).
    std::size_t size() const { return count_; }

    /// The hash used: FNV-1a 64 over the topic, a 0 byte, then the payload.
    static std::uint64_t hash(std::string_view topic, std::string_view payload);

  private:
    std::array<std::uint64_t, capacity> ring_{};
    std::size_t next_ = 0;
    std::size_t count_ = 0;
};

}  // namespace tidemark::mqtt
