// The service's ingest: started, paused while the outbox is full or the log cannot take more,
// retried, and reconnected when a reload changes the topic filters.
#include <spdlog/spdlog.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <chrono>

#include "adapters/mqtt/client_options.h"
#include "firmware/adapter_options.h"
#include "firmware/service/alarms.h"
#include "firmware/service/runtime_service.h"

namespace tidemark::firmware {

namespace {

// The first ingest retry after a failed connect waits 1 s (twice this), doubling to 30 s.
constexpr auto ingest_retry_delay_min = std::chrono::milliseconds(500);
// Ingest stopped by a failed log append starts again once the disk has room (log_has_room)
// and this long has passed: 1 s, doubling (while the appends still fail) to 30 s, so that a
// disk that statvfs says has room but still refuses costs one message read per 30 s.
constexpr auto append_retry_delay_min = std::chrono::milliseconds(1000);
constexpr auto append_retry_delay_max = std::chrono::milliseconds(30'000);
// Room beside the largest message for a new segment's anchor and the LMDB commit after it.
constexpr uint64_t disk_room_margin_bytes = uint64_t{1} << 20;
// How long a start waits for the gateway broker's CONNACK before it retries in the background,
// and how long a stop gives ingest to disconnect.
constexpr auto ingest_connect_timeout = std::chrono::seconds(5);
constexpr auto ingest_stop_timeout = std::chrono::seconds(3);

}  // namespace

// Ingest is the process's one Paho C client (the forwarder and health are libmosquitto, each on
// its own thread), and Paho runs its callbacks on one thread: nothing here holds a message in
// ingest's callback. A full outbox pauses ingest by disconnecting it (the
// broker keeps the persistent session's messages), and a log append that fails has the
// callback cut the connection unacknowledged (mqtt/ingest.h) and the loop stop ingest until
// the disk has room (poll_ingest).
Result<std::unique_ptr<mqtt::Ingest>> Service::make_ingest() {
    return mqtt::Ingest::create(
        source_broker_options(config_), filters_,
        [appender = appender_.get()](const mqtt::IncomingMessage& m) {
            return appender->handle(m);
        },
        ingest_options(config_));
}

void Service::try_start_ingest() {
    append_errors_at_start_ = parts_->alarms().append_errors();
    auto started = ingest_->start(ingest_connect_timeout);
    if (started) {
        ingest_started_ = true;
        spdlog::info("ingest: connected to {}", config_.source.uri);
        return;
    }
    ++ingest_failures_;
    ingest_retry_ms_ = clock_.steady_ms() +
                       mqtt::reconnect_delay(ingest_failures_, ingest_retry_delay_min).count();
    spdlog::warn("ingest: {} (retrying)", started.error().message);
}

void Service::stop_ingest() {
    appender_->set_live(false, 0);
    ingest_->stop(ingest_stop_timeout);
}

Result<void> Service::start_ingest() {
    // Ingest: the durable append happens inside the Paho callback, before the PUBACK.
    filters_ = topic_filters();
    auto ingest = make_ingest();
    if (!ingest) return std::unexpected(ingest.error());
    ingest_ = std::move(*ingest);
    ticker_ = std::make_unique<Ticker>(parts_->host().log(), parts_->alarms(), *appender_, clock_);

    try_start_ingest();
    notifier_.ready();
    notifier_.status(ingest_started_ ? "running, connected to " + config_.source.uri
                                     : "running, gateway broker unreachable: retrying");
    return {};
}

std::vector<std::string> Service::topic_filters() const {
    std::vector<std::string> filters;
    for (const auto& p : parts_->config().pipelines)
        if (std::find(filters.begin(), filters.end(), p.topic_filter) == filters.end())
            filters.push_back(p.topic_filter);
    return filters;
}

// New topic filters need a new subscription: ingest reconnects (its session is persistent, so
// the broker keeps what arrives meanwhile; DESIGN.md section 5 holds across it).
Result<void> Service::reload() {
    if (!parts_->reload(options_.config_path, notifier_)) return {};
    std::vector<std::string> filters = topic_filters();
    if (filters == filters_) return {};
    filters_ = std::move(filters);
    spdlog::info("reload: the topic filters changed; ingest subscribes again");
    if (ingest_started_) stop_ingest();
    auto ingest = make_ingest();
    if (!ingest) return std::unexpected(ingest.error());
    ingest_ = std::move(*ingest);
    ingest_started_ = false;
    ingest_retry_ms_ = 0;
    return {};
}

Result<void> Service::poll_ingest() {
    const Alarms& alarms = parts_->alarms();
    const int64_t now = clock_.steady_ms();
    const bool outbox_paused = alarms.ingest_paused();
    // An append failed since ingest started (the handler refused the message, the connection
    // was cut): stop it, or every reconnect would read a message only to refuse it.
    const bool append_failed =
        alarms.append_failing() && alarms.append_errors() != append_errors_at_start_;
    if (ingest_started_ && (outbox_paused || append_failed)) {
        stop_ingest();
        auto ingest = make_ingest();
        if (!ingest) return std::unexpected(ingest.error());
        ingest_ = std::move(*ingest);
        ingest_started_ = false;
        if (outbox_paused) {
            spdlog::warn("ingest paused: the outbox cannot take more results");
        } else {
            ingest_retry_ms_ =
                now + mqtt::reconnect_delay(append_retries_++, append_retry_delay_min,
                                            append_retry_delay_max)
                          .count();
            spdlog::warn(
                "ingest paused: the log cannot take more messages; it resumes when {} "
                "has room",
                config_.data_dir);
        }
    }
    if (!alarms.append_failing()) append_retries_ = 0;
    if (!ingest_started_ && !outbox_paused && now >= ingest_retry_ms_ &&
        (!alarms.append_failing() || log_has_room()))
        try_start_ingest();
    const bool live = ingest_started_ && !alarms.ingest_paused() && ingest_->connected();
    appender_->set_live(live, live ? ingest_->connection() : 0);
    return {};
}

bool Service::log_has_room() const {
    struct statvfs fs {};
    if (::statvfs(log_dir(config_.data_dir).c_str(), &fs) != 0) return true;  // let the append say
    const uint64_t free_bytes = static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
    return free_bytes >= config_.source.max_payload_bytes + disk_room_margin_bytes &&
           (fs.f_files == 0 || fs.f_favail > 0);  // a new segment needs an inode
}

}  // namespace tidemark::firmware
