#include "firmware/service/log_appender.h"

#include <algorithm>
#include <deque>
#include <string>
#include <utility>

#include "adapters/log/log_reader.h"
#include "adapters/log/log_writer.h"
#include "adapters/log/record.h"
#include "adapters/log/segment_files.h"
#include "firmware/service/alarms.h"
#include "firmware/service/processor.h"

namespace tidemark::firmware {

LogAppender::LogAppender(const config::Config& config, log::LogWriter& log, Alarms& alarms,
                         const core::Clock& clock)
    : config_(config),
      log_(log),
      alarms_(alarms),
      clock_(clock),
      last_append_steady_ms_(clock.steady_ms()) {}

Result<std::unique_ptr<LogAppender>> LogAppender::open(const config::Config& config,
                                                       log::LogWriter& log, Alarms& alarms,
                                                       const core::Clock& clock) {
    std::unique_ptr<LogAppender> appender(new LogAppender(config, log, alarms, clock));
    if (auto ok = seed_redelivery_filter(log, appender->filter_); !ok)
        return std::unexpected(ok.error());
    return appender;
}

// The config's bound on max_payload and the log's on a record agree, to within the frame head
// that handle() checks exactly (a payload within max_payload on a topic near 64 KiB).
static_assert(config::SourceConfig::max_payload_bytes_limit + log::topic_bytes_max <=
              log::record_body_bytes_max + 1);

std::string malformed_filter_topic(std::string_view reason, std::string_view topic) {
    std::string out;
    out.reserve(reason.size() + 1 + topic.size());
    out.append(reason).push_back(log::malformed_reason_separator);
    out.append(topic);
    return out;
}

Result<void> seed_redelivery_filter(const log::LogWriter& log, mqtt::RedeliveryFilter& filter) {
    auto segments = log::list_segments(log.options().dir);
    if (!segments) return std::unexpected(segments.error());
    if (segments->empty()) return {};
    auto tail_reader = log::LogReader::open(log.options().dir);
    if (!tail_reader) return std::unexpected(tail_reader.error());
    std::deque<std::pair<std::string, std::string>> tail;
    const size_t want = mqtt::RedeliveryFilter::candidates_max;
    size_t first = segments->size() - 1;
    for (;;) {
        tail.clear();
        const uint64_t from = std::max((*segments)[first].first_offset, log.first_offset());
        if (auto ok = (*tail_reader)->seek(from); !ok) return std::unexpected(ok.error());
        log::Record rec;
        for (;;) {
            auto next = (*tail_reader)->next(rec, log.end_offset());
            if (!next) return std::unexpected(next.error());
            if (!*next) break;
            // What handle() remembered live: every message and malformed record of a message
            // the broker may send again (not QoS0, not ticks), by what the log keeps.
            if (!rec.redeliverable || rec.type == log::RecordType::tick) continue;
            if (rec.type == log::RecordType::malformed) {
                tail.emplace_back(malformed_filter_topic(rec.reason, rec.topic),
                                  std::string(rec.payload));
            } else {
                tail.emplace_back(std::string(rec.topic), std::string(rec.payload));
            }
            if (tail.size() > want) tail.pop_front();
        }
        if (tail.size() >= want || first == 0) break;
        --first;
    }
    for (const auto& [topic, payload] : tail)
        filter.seed(topic, payload);
    return {};
}

bool LogAppender::mark_resumed(uint64_t connection) {
    if (connection == resumed_for_) return true;
    auto ok = log_.append(log::RecordType::tick, clock_.wall_ms(), ingest_resumed_tick, {});
    if (!ok) {
        alarms_.append_failed(ok.error().message);
        return false;
    }
    alarms_.append_succeeded();
    resumed_for_ = connection;
    return true;
}

mqtt::HandleResult LogAppender::handle(const mqtt::IncomingMessage& m) {
    std::lock_guard<std::mutex> guard(mutex_);
    if (!mark_resumed(m.connection)) return mqtt::HandleResult::retry_later;
    mqtt::RedeliveryFilter& filter = filter_;
    if (m.connection != connection_seen_) {
        // What the previous connections left unacknowledged may now come back, with DUP.
        filter.connection_started();
        connection_seen_ = m.connection;
    }
    const int64_t now = clock_.wall_ms();
    const uint64_t payload_max = config_.source.max_payload_bytes;
    // A record the log cannot hold is not a passing failure: it is kept as malformed, never
    // refused (a refusal would have the broker send it again for ever).
    const bool oversized = m.payload.size() > payload_max ||
                           m.topic.size() + m.payload.size() > log::record_topic_payload_bytes_max;
    // The redelivery filter knows a record by what the log keeps of it, so that a restart
    // seeded from the log (seed_redelivery_filter) recognises the same records as this process
    // does.
    std::string reason, filter_topic;
    std::string_view topic = m.topic, payload = m.payload;
    if (oversized) {
        reason = m.payload.size() > payload_max
                     ? "oversized: " + std::to_string(m.payload.size()) + " bytes > max_payload " +
                           std::to_string(payload_max)
                     : "oversized: topic " + std::to_string(m.topic.size()) + " + payload " +
                           std::to_string(m.payload.size()) + " bytes > the log's " +
                           std::to_string(log::record_topic_payload_bytes_max) + " per record";
        // MQTT topics are at most 65535 bytes, like the log's topic field, which the reason
        // shares: the topic is cut to leave the reason room.
        topic = m.topic.substr(0, log::topic_bytes_max - reason.size() - 1);
        filter_topic = malformed_filter_topic(reason, topic);
    }
    const std::string_view identity_topic = oversized ? std::string_view(filter_topic) : topic;
    const std::string_view identity_payload =
        oversized ? payload.substr(0, log::malformed_payload_bytes_max) : payload;
    if (m.duplicate && filter.is_redelivery(m.packet_id, identity_topic, identity_payload)) {
        ++redeliveries_skipped_;
        return mqtt::HandleResult::accepted;
    }
    // A QoS0 message is never redelivered: its record says so, and it stays out of the filter's
    // window, where it would break the run of the QoS1 redeliveries around it (live and, through
    // Record::redeliverable, after a restart).
    const bool redeliverable = m.qos > 0;
    // Kept for inspection with its reason; counted by every pipeline it matches.
    Result<uint64_t> appended =
        oversized ? log_.append_malformed(now, reason, topic, payload, redeliverable)
                  : log_.append(log::RecordType::message, now, topic, payload, redeliverable);
    if (!appended) {
        alarms_.append_failed(appended.error().message);
        return mqtt::HandleResult::retry_later;
    }
    if (redeliverable) filter.remember(m.packet_id, identity_topic, identity_payload);
    last_append_steady_ms_.store(clock_.steady_ms(), std::memory_order_relaxed);
    alarms_.append_succeeded();
    return mqtt::HandleResult::accepted;
}

void LogAppender::set_live(bool live, uint64_t connection) {
    if (!live) {
        live_ = false;
        return;
    }
    std::lock_guard<std::mutex> guard(mutex_);
    live_ = mark_resumed(connection);
}

void LogAppender::tick_if_idle(int64_t interval_ms) {
    if (!live_.load() ||
        clock_.steady_ms() - last_append_steady_ms_.load(std::memory_order_relaxed) < interval_ms)
        return;
    std::lock_guard<std::mutex> guard(mutex_);
    auto ok = log_.append(log::RecordType::tick, clock_.wall_ms(), {}, {});
    if (ok)
        last_append_steady_ms_.store(clock_.steady_ms(), std::memory_order_relaxed);
    else
        alarms_.append_failed(ok.error().message);
}

bool LogAppender::append_clock_marker(bool trusted) {
    std::lock_guard<std::mutex> guard(mutex_);
    const std::string_view marker = trusted ? clock_synchronised_tick : clock_unsynchronised_tick;
    return log_.append(log::RecordType::tick, clock_.wall_ms(), marker, {}).has_value();
}

}  // namespace tidemark::firmware
