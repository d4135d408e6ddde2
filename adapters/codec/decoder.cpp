#include "adapters/codec/decoder.h"

#include <simdjson.h>

#include <charconv>
#include <cmath>

#include "adapters/codec/payload_parser_impl.h"
#include "adapters/codec/timestamp.h"
#include "adapters/codec/topic.h"
#include "core/result.h"
#include "core/time_text.h"

namespace tidemark::codec {
namespace {

EpochUnit epoch_unit(TimeFormat format) {
    switch (format) {
        case TimeFormat::epoch_s:
            return EpochUnit::s;
        case TimeFormat::epoch_us:
            return EpochUnit::us;
        case TimeFormat::epoch_ns:
            return EpochUnit::ns;
        default:
            return EpochUnit::ms;
    }
}

std::string_view format_name(TimeFormat format) {
    switch (format) {
        case TimeFormat::epoch_s:
            return "epoch_s";
        case TimeFormat::epoch_ms:
            return "epoch_ms";
        case TimeFormat::epoch_us:
            return "epoch_us";
        case TimeFormat::epoch_ns:
            return "epoch_ns";
        case TimeFormat::rfc3339:
            return "rfc3339";
    }
    return "?";
}

// Shortest text that reads back as the same number.
void append_number(std::string& out, double value) {
    char buffer[32];
    auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, value);
    out.append(buffer, end);
}
template <typename Int>
void append_integer(std::string& out, Int value) {
    char buffer[24];
    auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, value);
    out.append(buffer, end);
}

void append_escaped_part(std::string& out, std::string_view part) {
    for (char c : part) {
        if (c == '|') {
            out += "%7C";
        } else if (c == '%') {
            out += "%25";
        } else {
            out += c;
        }
    }
}

}  // namespace

std::string_view decode_status_name(DecodeStatus status) {
    switch (status) {
        case DecodeStatus::ok:
            return "ok";
        case DecodeStatus::not_utf8:
            return "not_utf8";
        case DecodeStatus::malformed_json:
            return "malformed_json";
        case DecodeStatus::not_an_object:
            return "not_an_object";
        case DecodeStatus::missing_key:
            return "missing_key";
        case DecodeStatus::bad_key:
            return "bad_key";
        case DecodeStatus::missing_partition:
            return "missing_partition";
        case DecodeStatus::bad_partition:
            return "bad_partition";
        case DecodeStatus::missing_timestamp:
            return "missing_timestamp";
        case DecodeStatus::bad_timestamp:
            return "bad_timestamp";
    }
    return "?";
}

struct Decoder::Impl {
    explicit Impl(const DecoderSpec& s) : spec(s), filter(s.topic_filter) {}

    DecoderSpec spec;
    TopicFilter filter;  // spec.topic_filter's levels

    // Writes the key (or partition) into `out`; on failure sets reason and returns the status.
    DecodeStatus extract(const std::vector<KeySource>& parts, std::string_view topic,
                         simdjson::dom::element root, bool is_partition, std::string& out,
                         std::string& reason) const {
        const std::string_view what = is_partition ? "partition" : "key";
        const DecodeStatus missing =
            is_partition ? DecodeStatus::missing_partition : DecodeStatus::missing_key;
        const DecodeStatus bad = is_partition ? DecodeStatus::bad_partition : DecodeStatus::bad_key;
        const bool composite = parts.size() > 1;
        out.clear();
        for (size_t i = 0; i < parts.size(); ++i) {
            const KeySource& part = parts[i];
            if (i > 0) out += '|';
            if (part.kind == KeySource::topic_level) {
                auto level = topic_level_of(topic, part.level);
                if (!level) {
                    reason.assign("the ").append(what).append(" is topic level ");
                    append_integer(reason, part.level);
                    reason.append(" but topic \"").append(topic).append("\" has fewer levels");
                    return missing;
                }
                if (composite) {
                    append_escaped_part(out, *level);
                } else {
                    out.append(*level);
                }
                continue;
            }
            auto value = root.at_pointer(part.pointer);
            if (value.error()) {
                reason.assign("the ").append(what).append(" pointer ").append(part.pointer);
                reason.append(" is not in the payload");
                return missing;
            }
            simdjson::dom::element e = value.value_unsafe();
            switch (e.type()) {
                case simdjson::dom::element_type::STRING: {
                    std::string_view s = e.get_string().value_unsafe();
                    if (composite) {
                        append_escaped_part(out, s);
                    } else {
                        out.append(s);
                    }
                    break;
                }
                case simdjson::dom::element_type::INT64:
                    append_integer(out, e.get_int64().value_unsafe());
                    break;
                case simdjson::dom::element_type::UINT64:
                    append_integer(out, e.get_uint64().value_unsafe());
                    break;
                case simdjson::dom::element_type::DOUBLE:
                    append_number(out, e.get_double().value_unsafe());
                    break;
                case simdjson::dom::element_type::BOOL:
                    out.append(e.get_bool().value_unsafe() ? "true" : "false");
                    break;
                default:
                    reason.assign("the ").append(what).append(" pointer ").append(part.pointer);
                    reason.append(" is ").append(json_type_name(e.type()));
                    reason.append(": use a string, number or boolean");
                    return bad;
            }
        }
        if (out.empty()) {
            reason.assign("the ").append(what).append(" is empty");
            return missing;
        }
        if (out.size() > key_bytes_max) {
            reason.assign("the ").append(what).append(" is ");
            append_integer(reason, out.size());
            reason.append(" bytes, more than the ");
            append_integer(reason, key_bytes_max);
            reason.append(" allowed");
            // The buffer is kept for the next message: not at the size of a refused key, which
            // can be as large as the payload (a 4 MiB string at the key's pointer).
            out.clear();
            out.shrink_to_fit();
            return bad;
        }
        return DecodeStatus::ok;
    }

    DecodeStatus event_time(simdjson::dom::element root, int64_t& event_ms,
                            std::string& reason) const {
        const TimeSource& timestamp = spec.timestamp;
        auto value = root.at_pointer(timestamp.pointer);
        if (value.error() || value.value_unsafe().is_null()) {
            reason.assign("the timestamp pointer ").append(timestamp.pointer);
            reason.append(value.error() ? " is not in the payload" : " is null");
            return DecodeStatus::missing_timestamp;
        }
        simdjson::dom::element e = value.value_unsafe();
        std::optional<int64_t> ms;
        const auto type = e.type();
        if (timestamp.format == TimeFormat::rfc3339) {
            if (type == simdjson::dom::element_type::STRING) {
                if (auto t = core::parse_rfc3339_ms(e.get_string().value_unsafe())) ms = *t;
            }
        } else {
            const EpochUnit unit = epoch_unit(timestamp.format);
            switch (type) {
                case simdjson::dom::element_type::INT64:
                    ms = epoch_integer_ms(e.get_int64().value_unsafe(), unit);
                    break;
                case simdjson::dom::element_type::UINT64:
                    break;  // above int64: no time in range
                case simdjson::dom::element_type::DOUBLE:
                    ms = epoch_double_ms(e.get_double().value_unsafe(), unit);
                    break;
                case simdjson::dom::element_type::STRING:
                    ms = parse_epoch_text_ms(e.get_string().value_unsafe(), unit);
                    break;
                default:
                    break;
            }
        }
        if (!ms || *ms < timestamp_min_ms || *ms > timestamp_max_ms) {
            reason.assign("the timestamp at ").append(timestamp.pointer).append(" (");
            if (type == simdjson::dom::element_type::STRING) {
                std::string_view s = e.get_string().value_unsafe();
                reason.append("\"").append(s.substr(0, 64)).append("\"");
            } else {
                reason.append(json_type_name(type));
            }
            reason.append(") is not a valid ").append(format_name(timestamp.format));
            reason.append(timestamp.format == TimeFormat::rfc3339
                              ? " time such as \"2025-11-29T10:00:00.5Z\""
                              : " time between years 0 and 9999");
            return DecodeStatus::bad_timestamp;
        }
        event_ms = *ms;
        return DecodeStatus::ok;
    }

    // The numbers at the field pointers into out.field_values (NaN where absent or not a
    // number, counted), and out.event.fields over them.
    void fields(simdjson::dom::element root, DecodedEvent& out) const {
        out.fields_missing = 0;
        out.field_values.resize(spec.field_pointers.size());
        for (size_t i = 0; i < spec.field_pointers.size(); ++i) {
            auto value = root.at_pointer(spec.field_pointers[i]);
            double number = core::field_missing;
            if (!value.error()) {
                auto as_double = value.value_unsafe().get_double();
                if (!as_double.error()) number = as_double.value_unsafe();
            }
            if (std::isnan(number)) ++out.fields_missing;
            out.field_values[i] = number;
        }
        out.event.fields = out.field_values;
    }
};

Decoder::Decoder(const DecoderSpec& spec) : impl_(std::make_unique<Impl>(spec)) {
    TM_ASSERT(!spec.key.empty());
}

Decoder::~Decoder() = default;
Decoder::Decoder(Decoder&&) noexcept = default;
Decoder& Decoder::operator=(Decoder&&) noexcept = default;

bool Decoder::matches(std::string_view topic) const noexcept {
    return impl_->filter.matches(topic);
}

bool Decoder::key_is_topic_level() const noexcept {
    const std::vector<KeySource>& key = impl_->spec.key;
    return key.size() == 1 && key[0].kind == KeySource::topic_level;
}

std::optional<std::string_view> Decoder::key_of_topic(std::string_view topic) const noexcept {
    TM_ASSERT(key_is_topic_level());
    return topic_level_of(topic, impl_->spec.key[0].level);
}

DecodeStatus Decoder::decode(PayloadParser& parser, std::string_view topic,
                             std::string_view payload, int64_t ingest_ms, uint64_t order,
                             DecodedEvent& out) const {
    parser.parse(payload);
    const DecodeStatus status = decode(parser, topic, ingest_ms, order, out);
    parser.release();
    return status;
}

DecodeStatus Decoder::decode(const PayloadParser& parsed, std::string_view topic, int64_t ingest_ms,
                             uint64_t order, DecodedEvent& out) const {
    const Impl& d = *impl_;
    const DecoderSpec& spec = d.spec;
    const PayloadParser::Impl& p = *parsed.impl_;
    TM_ASSERT(!p.released);
    out.event = core::Event{};
    out.fields_missing = 0;
    if (p.status != DecodeStatus::ok) {
        out.reason = p.reason;
        return p.status;
    }
    out.reason.clear();
    const simdjson::dom::element root = p.root;

    DecodeStatus status = d.extract(spec.key, topic, root, false, out.key_buffer, out.reason);
    if (status != DecodeStatus::ok) return status;
    std::string_view partition = out.key_buffer;
    if (!spec.partition.empty()) {
        status = d.extract(spec.partition, topic, root, true, out.partition_buffer, out.reason);
        if (status != DecodeStatus::ok) return status;
        partition = out.partition_buffer;
    }

    int64_t event_ms = ingest_ms;
    if (!spec.timestamp.ingest) {
        status = d.event_time(root, event_ms, out.reason);
        if (status != DecodeStatus::ok) return status;
    }

    out.event.key = out.key_buffer;
    out.event.partition = partition;
    out.event.event_ms = event_ms;
    out.event.ingest_ms = ingest_ms;
    out.event.order = order;
    out.event.topic = topic;
    out.event.payload = p.payload;
    d.fields(root, out);
    return DecodeStatus::ok;
}

bool Decoder::same_event_as(const Decoder& other) const noexcept {
    const DecoderSpec& a = impl_->spec;
    const DecoderSpec& b = other.impl_->spec;
    return a.topic_filter == b.topic_filter && a.key == b.key && a.partition == b.partition &&
           a.timestamp == b.timestamp;
}

bool Decoder::same_fields_as(const Decoder& other) const noexcept {
    return impl_->spec.field_pointers == other.impl_->spec.field_pointers;
}

void Decoder::decode_fields(const PayloadParser& parsed, DecodedEvent& out) const {
    const PayloadParser::Impl& p = *parsed.impl_;
    TM_ASSERT(!p.released && p.status == DecodeStatus::ok);
    impl_->fields(p.root, out);
}

std::string_view json_kernel() {
    return simdjson::get_active_implementation()->name();
}

}  // namespace tidemark::codec
