#include "firmware/service/log_appender.h"

#include <chrono>
#include <string>

#include "adapters/log/log_writer.h"
#include "adapters/log/record.h"
#include "adapters/mqtt/redelivery_filter.h"
#include "firmware/service/processor.h"
#include "firmware/service/service_parts.h"

namespace tidemark::firmware {

namespace {

// Ingest appends a tick when nothing else was appended for this long.
constexpr int64_t tick_interval_ms = 1000;
// How often the ticker wakes to look at the tick interval and fsync_interval.
constexpr auto ticker_wake = std::chrono::milliseconds(100);

}  // namespace

LogAppender::LogAppender(const config::Config& config, ServiceParts& parts,
                         const core::Clock& clock)
    : config_(config), parts_(parts), clock_(clock), last_append_steady_ms_(clock.steady_ms()) {}

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

bool LogAppender::mark_resumed(uint64_t connection) {
    if (connection == resumed_for_) return true;
    auto ok = parts_.log().append(log::RecordType::tick, clock_.wall_ms(), ingest_resumed_tick, {});
    if (!ok) {
        parts_.append_failed(ok.error().message);
        return false;
    }
    parts_.append_succeeded();
    resumed_for_ = connection;
    return true;
}

mqtt::HandleResult LogAppender::handle(const mqtt::IncomingMessage& m) {
    std::lock_guard<std::mutex> guard(mutex_);
    if (!mark_resumed(m.connection)) return mqtt::HandleResult::retry_later;
    mqtt::RedeliveryFilter& filter = parts_.redelivery_filter();
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
    // seeded from the log (EngineHost) recognises the same records as this process does.
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
        parts_.count_redelivery_skipped();
        return mqtt::HandleResult::accepted;
    }
    // A QoS0 message is never redelivered: its record says so, and it stays out of the filter's
    // window, where it would break the run of the QoS1 redeliveries around it (live and, through
    // Record::redeliverable, after a restart).
    const bool redeliverable = m.qos > 0;
    // Kept for inspection with its reason; counted by every pipeline it matches.
    Result<uint64_t> appended =
        oversized
            ? parts_.log().append_malformed(now, reason, topic, payload, redeliverable)
            : parts_.log().append(log::RecordType::message, now, topic, payload, redeliverable);
    if (!appended) {
        parts_.append_failed(appended.error().message);
        return mqtt::HandleResult::retry_later;
    }
    if (redeliverable) filter.remember(m.packet_id, identity_topic, identity_payload);
    last_append_steady_ms_.store(clock_.steady_ms(), std::memory_order_relaxed);
    parts_.append_succeeded();
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
    auto ok = parts_.log().append(log::RecordType::tick, clock_.wall_ms(), {}, {});
    if (ok)
        last_append_steady_ms_.store(clock_.steady_ms(), std::memory_order_relaxed);
    else
        parts_.append_failed(ok.error().message);
}

bool LogAppender::append_clock_marker(bool trusted) {
    std::lock_guard<std::mutex> guard(mutex_);
    const std::string_view marker = trusted ? clock_synchronised_tick : clock_unsynchronised_tick;
    return parts_.log().append(log::RecordType::tick, clock_.wall_ms(), marker, {}).has_value();
}

Ticker::Ticker(const config::Config& config, ServiceParts& parts, LogAppender& appender,
               const core::Clock& clock)
    : config_(config), parts_(parts), appender_(appender), clock_(clock) {
    thread_ = std::thread([this] { run(); });
}

Ticker::~Ticker() {
    {
        std::lock_guard<std::mutex> lk(mutex_);
        stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
}

void Ticker::run() {
    std::unique_lock<std::mutex> lk(mutex_);
    int64_t next_sync_ms = clock_.steady_ms() + config_.storage.fsync_interval_ms;
    while (!wake_.wait_for(lk, ticker_wake, [&] { return stop_; })) {
        appender_.tick_if_idle(tick_interval_ms);
        // fsync=interval: the sync runs here, outside the append lock (LogWriter::sync
        // fdatasyncs a dup of the fd), so ingest never waits for the disk.
        if (config_.storage.fsync == config::FsyncPolicy::interval &&
            clock_.steady_ms() >= next_sync_ms) {
            next_sync_ms = clock_.steady_ms() + config_.storage.fsync_interval_ms;
            if (auto synced = parts_.log().sync(); !synced)
                parts_.append_failed(synced.error().message);
        }
    }
}

}  // namespace tidemark::firmware
