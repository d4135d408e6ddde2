#include "firmware/service/runtime.h"

#include <spdlog/spdlog.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "adapters/log/log_writer.h"
#include "adapters/mqtt/client_options.h"
#include "adapters/mqtt/ingest.h"
#include "firmware/adapter_options.h"
#include "firmware/dir_lock.h"
#include "firmware/notify.h"
#include "firmware/service/log_appender.h"
#include "firmware/service/service_parts.h"

namespace tidemark::firmware {

namespace {

// Bounds of one engine step: records read before the outbox batch is committed.
constexpr size_t step_records_max = 4096;
// A backfill slice is bounded by its time (backfill.max_share, max_live_delay), not by this:
// the larger the slice, the fewer outbox commits (each with its fsync) per record. 4096 gave
// vs_replay 0.12-0.17, 65536 0.24 (docs/BENCHMARKS.md, Backfill).
constexpr size_t backfill_records_max = 65536;
// While the disk is full, log segments before the checkpoint are trimmed at most this often:
// each attempt lists the log directory, and what a full disk frees comes back only as the
// forwarder drains or retention ages segments out, not within a loop turn.
constexpr int64_t disk_full_trim_interval_ms = 10'000;
// read_clock_status() reads a few files and one system call: about once a second (clock.h).
constexpr int64_t clock_poll_interval_ms = 1000;
// Health is rebuilt at least this often (and every health.interval when that is shorter), so
// that the systemd status line follows alarms within a second.
constexpr int64_t health_refresh_interval_ms_max = 1000;
// The loop sleeps this long when a step found nothing to read; while a backfill waits for its
// share, briefly, so that its slices come often and small.
constexpr auto idle_sleep = std::chrono::milliseconds(20);
constexpr auto backfill_wait_sleep = std::chrono::milliseconds(2);
// Recovery waiting for room in the outbox looks again this often.
constexpr int64_t recovery_wait_ms = 250;
// Replaying a long log can outlast the unit's start timeout: recovery asks systemd for this
// much more before it starts, and for recovery_wait_extension each time it waits for room.
constexpr auto recovery_timeout_extension = std::chrono::minutes(10);
constexpr auto recovery_wait_extension = std::chrono::minutes(1);
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
// Steps taken to drain the log on stop: 10,000 steps of step_records_max records, about 41
// million records, far more than fsync_interval leaves unprocessed, so that a stop is bounded
// even if something kept appending. What is left is replayed on the next start, nothing lost
// (the warning in drain_log says when it was hit).
constexpr int shutdown_drain_steps_max = 10'000;

// One run of the service, in the steps run_service names: open and recover, start ingest, the
// loop, shutdown. The members are what those steps share; they are destroyed in reverse order
// (the ticker, then ingest, whose handler is the appender, then the parts, then the lock).
class Service {
  public:
    Service(const config::Config& config, const RunOptions& options, Signals& signals,
            const core::Clock& clock)
        : config_(config), options_(options), signals_(signals), clock_(clock) {}

    // Opens the parts and replays the log; false when told to stop while recovery waited.
    Result<bool> open_and_recover();
    Result<void> start_ingest();
    // Returns why the loop ended early (the log poisoned, the engine failed), or {} on a stop.
    Result<void> loop();
    Result<void> shutdown(Result<void> result);

  private:
    Result<std::unique_ptr<mqtt::Ingest>> make_ingest();
    void try_start_ingest();
    void stop_ingest();
    // Pauses ingest while the outbox cannot take more, retries a failed start, and tells the
    // appender whether ingest can hear the devices.
    Result<void> poll_ingest();
    // Reads the config again (SIGHUP); a new set of topic filters reconnects ingest.
    Result<void> reload();
    std::vector<std::string> topic_filters() const;
    // Whether the log's file system has room for the largest message and what follows it (a
    // new segment, the outbox commit): ingest stopped by a failed append starts again then.
    bool log_has_room() const;
    void poll_disk_and_clock(int64_t now);
    void refresh_health_if_due(int64_t now);
    // Steps the engine until the log is processed to its end, at most shutdown_drain_steps_max.
    Result<void> drain_log(Result<void> result, bool synced);

    const config::Config& config_;
    const RunOptions& options_;
    Signals& signals_;
    const core::Clock& clock_;
    Notifier notifier_;
    std::optional<DirLock> lock_;
    std::unique_ptr<ServiceParts> parts_;
    std::unique_ptr<LogAppender> appender_;
    std::vector<std::string> filters_;
    std::unique_ptr<mqtt::Ingest> ingest_;
    std::unique_ptr<Ticker> ticker_;

    // The clock as the log last recorded it; a change is appended as a marker tick, so that
    // the engine (and every replay) sees it at the same record.
    bool clock_trusted_logged_ = false;
    bool ingest_started_ = false;
    int ingest_failures_ = 0;
    int64_t ingest_retry_ms_ = 0;
    uint64_t append_errors_at_start_ = 0;  // the appender's failures when ingest last started
    int append_retries_ = 0;               // ingest starts that a failed append stopped again
    int64_t next_checkpoint_ms_ = 0;
    int64_t next_health_ms_ = 0;
    int64_t next_clock_ms_ = 0;
    int64_t next_trim_ms_ = 0;
    std::string last_status_;
};

Result<bool> Service::open_and_recover() {
    notifier_.status("recovering");
    std::error_code ec;
    std::filesystem::create_directories(config_.data_dir, ec);
    if (ec) return fail("cannot create data_dir " + config_.data_dir + ": " + ec.message());
    auto lock = DirLock::take(config_.data_dir);
    if (!lock) return std::unexpected(lock.error());
    lock_.emplace(std::move(*lock));

    auto parts = ServiceParts::open(config_, clock_);
    if (!parts) return std::unexpected(parts.error());
    parts_ = std::move(*parts);
    ServiceParts& sp = *parts_;

    // The forwarder is the only thing that frees room in the outbox: it runs before recovery,
    // so that a restart with a full outbox drains it instead of waiting for itself. It sends
    // only rows already committed, which recovery never rewrites.
    if (auto forwarder = sp.start_forwarder(); !forwarder)
        spdlog::error("upstream: {}", forwarder.error().message);
    sp.refresh_health(nullptr);  // the first retained snapshot is a real one, never "{}"
    if (auto health = sp.start_health(); !health)
        spdlog::error("health: {}", health.error().message);

    // Recovery: the checkpoint, then the log from its offset (regenerated emissions that are
    // already in the outbox are skipped by id).
    notifier_.extend_timeout(recovery_timeout_extension);
    const int64_t recover_start_ms = clock_.steady_ms();
    int64_t waited_ms = 0;
    auto recovered = sp.recover([&] {
        if (waited_ms == 0) spdlog::warn("recovery waits for room in the outbox (upstream down?)");
        std::this_thread::sleep_for(std::chrono::milliseconds(recovery_wait_ms));
        waited_ms += recovery_wait_ms;
        notifier_.extend_timeout(recovery_wait_extension);
        notifier_.watchdog(clock_.steady_ms());
        sp.refresh_health(nullptr);
        return !signals_.stop.load();
    });
    if (!recovered && signals_.stop.load()) {
        // Stopped while waiting for room: a clean stop, the next start recovers again.
        spdlog::info("stopped during recovery: {}", recovered.error().message);
        sp.stop_clients();
        return false;
    }
    if (!recovered) return std::unexpected(recovered.error());
    spdlog::info("recovered: checkpoint at log offset {}, {} records replayed in {} ms",
                 sp.checkpoint_offset(), *recovered, clock_.steady_ms() - recover_start_ms);
    notifier_.status("recovered " + std::to_string(*recovered) + " records");
    // Not fatal: the loop checkpoints again, and a failed one changes nothing stored.
    if (auto ok = sp.checkpoint(); !ok) spdlog::error("{}", ok.error().message);
    clock_trusted_logged_ = sp.engine_clock_trusted();
    return true;
}

// Paho C runs the callbacks of every client in the process under one mutex, so nothing here
// holds a message in ingest's callback: a full outbox pauses ingest by disconnecting it (the
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
    append_errors_at_start_ = parts_->append_errors();
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
    appender_ = std::make_unique<LogAppender>(config_, *parts_, clock_);
    filters_ = topic_filters();
    auto ingest = make_ingest();
    if (!ingest) return std::unexpected(ingest.error());
    ingest_ = std::move(*ingest);
    ticker_ = std::make_unique<Ticker>(config_, *parts_, *appender_, clock_);

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
    ServiceParts& sp = *parts_;
    const int64_t now = clock_.steady_ms();
    const bool outbox_paused = sp.ingest_paused();
    // An append failed since ingest started (the handler refused the message, the connection
    // was cut): stop it, or every reconnect would read a message only to refuse it.
    const bool append_failed = sp.append_failing() && sp.append_errors() != append_errors_at_start_;
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
    if (!sp.append_failing()) append_retries_ = 0;
    if (!ingest_started_ && !outbox_paused && now >= ingest_retry_ms_ &&
        (!sp.append_failing() || log_has_room()))
        try_start_ingest();
    const bool live = ingest_started_ && !sp.ingest_paused() && ingest_->connected();
    appender_->set_live(live, live ? ingest_->connection() : 0);
    return {};
}

bool Service::log_has_room() const {
    struct statvfs fs {};
    if (::statvfs((config_.data_dir + "/log").c_str(), &fs) != 0)
        return true;  // let the append say
    const uint64_t free_bytes = static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
    return free_bytes >= config_.source.max_payload_bytes + disk_room_margin_bytes &&
           (fs.f_files == 0 || fs.f_favail > 0);  // a new segment needs an inode
}

void Service::poll_disk_and_clock(int64_t now) {
    ServiceParts& sp = *parts_;
    if (now >= next_trim_ms_ && sp.disk_full()) {
        // Retention first frees what replay alone needs; then back-pressure (ingest stopped,
        // the outbox waits) until the disk has room again.
        next_trim_ms_ = now + disk_full_trim_interval_ms;
        sp.trim_for_disk_full();
    }
    if (now < next_clock_ms_) return;
    next_clock_ms_ = now + clock_poll_interval_ms;
    const bool trusted = sp.refresh_clock();
    if (trusted == clock_trusted_logged_ || !appender_->append_clock_marker(trusted)) return;
    clock_trusted_logged_ = trusted;
    spdlog::warn("clock {}", trusted ? "synchronised: trusted from now on"
                                     : "not synchronised: clamping and idle advance held until it "
                                       "is");
}

void Service::refresh_health_if_due(int64_t now) {
    if (now < next_health_ms_) return;
    parts_->refresh_health(ingest_started_ ? ingest_.get() : nullptr);
    next_health_ms_ =
        now + std::min<int64_t>(config_.health.interval_ms, health_refresh_interval_ms_max);
    std::string status = parts_->status_line();
    if (status != last_status_) {
        notifier_.status(status);
        last_status_ = std::move(status);
    }
}

Result<void> Service::loop() {
    ServiceParts& sp = *parts_;
    next_checkpoint_ms_ = clock_.steady_ms() + config_.checkpoint.interval_ms;
    while (!signals_.stop.load()) {
        if (signals_.reload.exchange(false))
            if (auto ok = reload(); !ok) return ok;
        if (auto ok = poll_ingest(); !ok) return ok;
        if (auto poisoned = sp.log_failure()) {
            // Linux may have dropped the pages a failed fdatasync did not write: only a reopen
            // (a restart, by systemd) can tell what is durable.
            return fail("log: " + *poisoned + "; exiting so that a restart reopens the log");
        }
        const int64_t now = clock_.steady_ms();
        poll_disk_and_clock(now);
        auto step = sp.step(step_records_max, /*drain=*/false);
        if (!step) {
            spdlog::critical("engine: {}", step.error().message);
            return std::unexpected(step.error());
        }
        auto backfilled = sp.backfill_step(backfill_records_max);
        if (!backfilled) {
            spdlog::critical("backfill: {}", backfilled.error().message);
            return std::unexpected(backfilled.error());
        }
        if (now >= next_checkpoint_ms_ && sp.can_checkpoint()) {
            if (auto ok = sp.checkpoint(); !ok) spdlog::error("{}", ok.error().message);
            next_checkpoint_ms_ = now + config_.checkpoint.interval_ms;
        }
        refresh_health_if_due(now);
        notifier_.watchdog(now);
        if (*step == 0 && *backfilled == 0)
            std::this_thread::sleep_for(sp.backfilling() ? backfill_wait_sleep : idle_sleep);
    }
    return {};
}

Result<void> Service::drain_log(Result<void> result, bool synced) {
    bool drained = false;
    for (int i = 0; i < shutdown_drain_steps_max && !drained; ++i) {
        auto step = parts_->step(step_records_max, /*drain=*/synced);
        if (!step) {
            if (result) result = std::unexpected(step.error());
            break;
        }
        drained = *step == 0;
    }
    if (!drained && result)
        spdlog::warn(
            "stopping before the log was processed to its end ({} steps); the rest is "
            "replayed on the next start",
            shutdown_drain_steps_max);
    return result;
}

// No new messages, everything logged is processed, one last checkpoint.
Result<void> Service::shutdown(Result<void> result) {
    ServiceParts& sp = *parts_;
    notifier_.stopping();
    notifier_.status("stopping");
    stop_ingest();
    ticker_.reset();
    // Past a failed sync only what was durable before it is processed: the rest may not be on
    // disk, and its results must not reach the outbox.
    bool synced = false;
    if (result) {
        if (auto ok = sp.log().sync(); ok)
            synced = true;
        else
            result = ok;
    }
    result = drain_log(std::move(result), synced);
    if (sp.can_checkpoint()) {
        if (auto ok = sp.checkpoint(); !ok && result) result = ok;
    } else {
        spdlog::warn(
            "stopping with emissions the outbox could not take; they are regenerated "
            "from the log on the next start");
    }
    sp.stop_clients();
    spdlog::info("stopped");
    return result;
}

}  // namespace

Result<void> run_service(const config::Config& config, const RunOptions& options, Signals& signals,
                         const core::Clock& clock) {
    Service service(config, options, signals, clock);
    auto recovered = service.open_and_recover();
    if (!recovered) return std::unexpected(recovered.error());
    if (!*recovered) return {};
    if (auto started = service.start_ingest(); !started) return started;
    return service.shutdown(service.loop());
}

}  // namespace tidemark::firmware
