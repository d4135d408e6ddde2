// Payload decoding on the hot path: one MQTT message parsed once (PayloadParser), then one
// core::Event for each pipeline whose topic filter matches it (Decoder).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/event.h"

namespace tidemark::codec {

/// Where a key or partition part comes from: the Nth level of the MQTT topic (from 0) or a JSON
/// pointer into the payload (RFC 6901, starts with '/').
struct KeySource {
    enum Kind { topic_level, json_pointer };
    Kind kind = topic_level;
    int level = 0;        // topic_level only
    std::string pointer;  // json_pointer only
    bool operator==(const KeySource&) const = default;
};

/// How a payload writes its event time.
enum class TimeFormat { epoch_s, epoch_ms, epoch_us, epoch_ns, rfc3339 };

/// Where an event's time comes from: the ingest time given to decode, or a payload field.
struct TimeSource {
    bool ingest = true;
    std::string pointer;  // when !ingest
    TimeFormat format = TimeFormat::epoch_ms;
    bool operator==(const TimeSource&) const = default;
};

/// What one pipeline's Decoder reads from a message. firmware fills it from the config
/// (firmware/adapter_options.h, decoder_spec); the codec does not read the config itself.
struct DecoderSpec {
    std::string topic_filter;          // MQTT filter, '+' and '#' allowed; see Decoder::matches
    std::vector<KeySource> key;        // one, or several for a composite key; never empty
    std::vector<KeySource> partition;  // empty: the partition is the key
    TimeSource timestamp;
    std::vector<std::string> field_pointers;  // event.fields[i] is the number at pointer i
};

/// Why a message did not become an event. Each is counted as malformed by the caller and the
/// message kept with `DecodedEvent::reason` for inspection; none is fatal.
enum class DecodeStatus : uint8_t {
    ok,
    not_utf8,           // the payload is not valid UTF-8
    malformed_json,     // not JSON, truncated, or nested deeper than the parser allows
    not_an_object,      // JSON, but not an object
    missing_key,        // a key part is absent (topic level or pointer), or the key is empty
    bad_key,            // a key part is null, an object or an array; or the key is too long
    missing_partition,  // as missing_key, for the partition
    bad_partition,      // as bad_key, for the partition
    missing_timestamp,  // the timestamp pointer is absent or null
    bad_timestamp,      // the timestamp is not in the configured format, or out of range
};
std::string_view decode_status_name(DecodeStatus status);  // "ok", "not_utf8", ...

/// The JSON parser's kernel chosen for this CPU at run time (simdjson: "haswell", "westmere",
/// "arm64", "fallback", ...), for `tidemark --version` and health.
std::string_view json_kernel();

/// A key (or partition) longer than this is refused: it goes into topics and LMDB keys (whose
/// limit is 511 bytes with the window bounds and pipeline id alongside).
inline constexpr size_t key_bytes_max = 256;

/// The result of Decoder::decode, reused from one message to the next.
///
/// Operation: after `ok`, `event` holds views into this object's own buffers (key, partition,
/// fields) and into the topic and payload passed to decode; it is valid until the next decode
/// into the same object or until those bytes go away. Not copyable, so views cannot dangle.
/// After any other status, `reason` says what was wrong in a sentence naming the pointer or
/// topic level.
struct DecodedEvent {
    DecodedEvent() = default;
    DecodedEvent(const DecodedEvent&) = delete;
    DecodedEvent& operator=(const DecodedEvent&) = delete;

    core::Event event;
    std::string reason;
    uint32_t fields_missing = 0;  // fields absent or not numbers (NaN in event.fields)

    // Buffers that `event` points into; capacity is kept across messages.
    std::string key_buffer;
    std::string partition_buffer;
    std::vector<double> field_values;
};

/// A payload up to this size is parsed by a parser a PayloadParser keeps from one message to the
/// next; a larger one by a parser made for it and freed after it. simdjson's DOM parser holds
/// parser_bytes_per_payload_byte x the largest document it has parsed and never gives it back:
/// kept, one large message would pin that memory for good, in every processor that saw it.
/// The default source.max_payload: with the default config no payload takes the slower path.
inline constexpr size_t payload_retained_bytes_max = 64 * 1024;

/// The most memory simdjson's DOM parser allocates per byte of the document it parses, rounded
/// up: its padded copy of the payload (1), structural indexes (4 bytes a byte), the tape (8) and
/// the string buffer (5/3), 14.7 in all plus a few KiB. Measured (docs/CONFIG.md, "Memory for
/// payloads"): the worst payload found, [0,0,0,...], makes 13.0 of them resident.
inline constexpr size_t parser_bytes_per_payload_byte = 15;

/// One message's payload, parsed once for every pipeline whose topic filter matches it.
///
/// Operation: parse() validates the payload (JSON, UTF-8, an object) with simdjson's DOM parser
/// from a padded copy; every Decoder then reads its fields from the same document. A payload of
/// at most payload_retained_bytes_max bytes goes to the parser kept across messages (its
/// buffers grow to the largest such payload, then stay); a larger one to a parser made for it,
/// freed by release() or the next parse(). So a 4 MiB message costs its ~60 MiB once, not for
/// the rest of the process's life.
/// Concurrency: one thread at a time; the parsed document is valid until the next parse() or
/// release(), and never after the payload's bytes go away.
/// Limits: kept memory at most parser_bytes_per_payload_byte x payload_retained_bytes_max
/// (under 1 MiB); during one large document, that multiple of its size (the caller bounds it by
/// source.max_payload). Process-wide: a program that links this pins glibc's mmap threshold at
/// 128 KiB at start (payload_parser.cpp says why), so that freed large buffers leave the heap.
class PayloadParser {
  public:
    PayloadParser();
    ~PayloadParser();
    PayloadParser(PayloadParser&&) noexcept;
    PayloadParser& operator=(PayloadParser&&) noexcept;

    /// ok, not_utf8, malformed_json or not_an_object; reason() says why when not ok.
    DecodeStatus parse(std::string_view payload);
    DecodeStatus status() const noexcept;
    const std::string& reason() const noexcept;
    /// Frees the parser of a payload above payload_retained_bytes_max (after the last decoder
    /// read it); nothing otherwise. The document is gone after it.
    void release() noexcept;
    /// The largest payload the parsers held now can take without growing (bytes of payload;
    /// their memory is about parser_bytes_per_payload_byte x this).
    size_t capacity_bytes() const noexcept;
    /// Payloads parsed by this object: one per message however many pipelines read it.
    uint64_t parses() const noexcept;

  private:
    friend class Decoder;
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

/// Decodes messages for one pipeline: key and partition from topic levels or JSON pointers,
/// the event time, and numeric fields by JSON pointer, from a PayloadParser's document.
///
/// Operation: a composite key joins its parts with '|'; inside a part of a composite key, '%'
/// and '|' are written %25 and %7C so that different parts never join to the same key. Key
/// parts that are numbers or booleans are their JSON text (numbers in shortest round-trip form:
/// 7.50 -> "7.5"). Epoch timestamps may be JSON numbers (integer or fractional) or strings
/// holding a decimal number; rfc3339 must be a string (core/time_text.h's parser).
/// Concurrency: a Decoder holds only its spec; decode() is const. The PayloadParser and the
/// DecodedEvent are the caller's, one per thread.
/// Limits: no allocation per message once the DecodedEvent's buffers have grown to the largest
/// key seen. Payload size is bounded by the caller (source.max_payload).
class Decoder {
  public:
    explicit Decoder(const DecoderSpec& spec);
    ~Decoder();
    Decoder(Decoder&&) noexcept;
    Decoder& operator=(Decoder&&) noexcept;

    /// Fills `out.event` from the document `parsed` holds (with `ingest_ms`, `order`, `topic` and
    /// the parsed payload as given) or returns why it could not: the parse's own status and
    /// reason when the payload did not parse. Does not check the topic against the pipeline's
    /// filter (see matches). `out` points into nothing of `parsed`'s: release() may follow.
    DecodeStatus decode(const PayloadParser& parsed, std::string_view topic, int64_t ingest_ms,
                        uint64_t order, DecodedEvent& out) const;
    /// One pipeline alone (advise, tests): parse `payload` with `parser`, decode, release.
    DecodeStatus decode(PayloadParser& parser, std::string_view topic, std::string_view payload,
                        int64_t ingest_ms, uint64_t order, DecodedEvent& out) const;

    /// Does `topic` match this pipeline's topic filter?
    bool matches(std::string_view topic) const noexcept;

    /// Whether the key is one topic level (not composite, not a JSON pointer): then
    /// key_of_topic() gives it without the payload.
    bool key_is_topic_level() const noexcept;
    /// The key decode() makes of a message on `topic`, for a decoder whose key_is_topic_level(),
    /// as a view into `topic`; nothing when the topic has no such level. For prefetching a
    /// record's state before its payload is parsed: the filter, the key's length and its
    /// emptiness are not checked.
    std::optional<std::string_view> key_of_topic(std::string_view topic) const noexcept;

    /// Whether `other` makes the same event of every message but for the fields: the same topic
    /// filter, key, partition and timestamp. Several pipelines over one telemetry usually do.
    bool same_event_as(const Decoder& other) const noexcept;
    /// Whether `other` reads the same fields (the same pointers, in the same order): its
    /// decode_fields() gives this one's fields of every message.
    bool same_fields_as(const Decoder& other) const noexcept;
    /// Replaces the fields of `out`, which a decoder that same_event_as this one decoded from
    /// `parsed` with status ok, by this pipeline's: what decode() would give, for the cost of
    /// the field lookups alone.
    void decode_fields(const PayloadParser& parsed, DecodedEvent& out) const;

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace tidemark::codec
