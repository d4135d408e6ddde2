#include "firmware/service/runtime.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "adapters/log/log_writer.h"
#include "adapters/mqtt/ingest.h"
#include "firmware/adapter_options.h"
#include "firmware/dir_lock.h"
#include "firmware/notify.h"
#include "firmware/service/alarms.h"
#include "firmware/service/engine_host.h"
#include "firmware/service/log_appender.h"
#include "firmware/service/runtime_service.h"
#include "firmware/service/service_parts.h"
#include "firmware/service/ticker.h"

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
// Steps taken to drain the log on stop: 10,000 steps of step_records_max records, about 41
// million records, far more than fsync_interval leaves unprocessed, so that a stop is bounded
// even if something kept appending. What is left is replayed on the next start, nothing lost
// (the warning in drain_log says when it was hit).
constexpr int shutdown_drain_steps_max = 10'000;

}  // namespace

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
    EngineHost& host = sp.host();

    // The forwarder is the only thing that frees room in the outbox: it runs before recovery,
    // so that a restart with a full outbox drains it instead of waiting for itself. It sends
    // only rows already committed, which recovery never rewrites.
    if (auto forwarder = sp.start_forwarder(); !forwarder)
        spdlog::error("upstream: {}", forwarder.error().message);
    sp.refresh_health(nullptr, nullptr);  // the first retained snapshot is a real one, never "{}"
    if (auto health = sp.start_health(); !health)
        spdlog::error("health: {}", health.error().message);

    // Recovery: the checkpoint, then the log from its offset (regenerated emissions that are
    // already in the outbox are skipped by id).
    notifier_.extend_timeout(recovery_timeout_extension);
    const int64_t recover_start_ms = clock_.steady_ms();
    int64_t waited_ms = 0;
    auto recovered = host.recover([&] {
        if (waited_ms == 0) spdlog::warn("recovery waits for room in the outbox (upstream down?)");
        std::this_thread::sleep_for(std::chrono::milliseconds(recovery_wait_ms));
        waited_ms += recovery_wait_ms;
        notifier_.extend_timeout(recovery_wait_extension);
        notifier_.watchdog(clock_.steady_ms());
        sp.refresh_health(nullptr, nullptr);
        return !signals_.stop.load();
    });
    if (!recovered && signals_.stop.load()) {
        // Stopped while waiting for room: a clean stop, the next start recovers again.
        spdlog::info("stopped during recovery: {}", recovered.error().message);
        sp.stop_clients();
        return false;
    }
    if (!recovered) return std::unexpected(recovered.error());
    // Ingest's handler, with its redelivery filter seeded from the log that recovery replayed.
    auto appender = LogAppender::open(config_, host.log(), sp.alarms(), clock_);
    if (!appender) return std::unexpected(appender.error());
    appender_ = std::move(*appender);
    spdlog::info("recovered: checkpoint at log offset {}, {} records replayed in {} ms",
                 host.checkpoint_stats().log_offset, *recovered,
                 clock_.steady_ms() - recover_start_ms);
    notifier_.status("recovered " + std::to_string(*recovered) + " records");
    // Not fatal: the loop checkpoints again, and a failed one changes nothing stored.
    if (auto ok = host.checkpoint(); !ok) spdlog::error("{}", ok.error().message);
    clock_trusted_logged_ = host.processor().engine().clock_trusted();
    return true;
}

void Service::poll_disk_and_clock(int64_t now) {
    ServiceParts& sp = *parts_;
    if (now >= next_trim_ms_ && sp.alarms().disk_full()) {
        // Retention first frees what replay alone needs; then back-pressure (ingest stopped,
        // the outbox waits) until the disk has room again.
        next_trim_ms_ = now + disk_full_trim_interval_ms;
        sp.host().trim_for_disk_full();
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
    parts_->refresh_health(ingest_started_ ? ingest_.get() : nullptr, appender_.get());
    next_health_ms_ =
        now + std::min<int64_t>(config_.health.interval_ms, health_refresh_interval_ms_max);
    std::string status = parts_->status_line();
    if (status != last_status_) {
        notifier_.status(status);
        last_status_ = std::move(status);
    }
}

Result<void> Service::loop() {
    EngineHost& host = parts_->host();
    next_checkpoint_ms_ = clock_.steady_ms() + config_.checkpoint.interval_ms;
    while (!signals_.stop.load()) {
        if (signals_.reload.exchange(false))
            if (auto ok = reload(); !ok) return ok;
        if (auto ok = poll_ingest(); !ok) return ok;
        if (host.log().poisoned()) {
            // Linux may have dropped the pages a failed fdatasync did not write: only a reopen
            // (a restart, by systemd) can tell what is durable.
            return fail("log: " + host.log().poison_error() +
                        "; exiting so that a restart reopens the log");
        }
        const int64_t now = clock_.steady_ms();
        poll_disk_and_clock(now);
        auto step = host.step(step_records_max, /*drain=*/false);
        if (!step) {
            spdlog::critical("engine: {}", step.error().message);
            return std::unexpected(step.error());
        }
        auto backfilled = host.backfill_step(backfill_records_max);
        if (!backfilled) {
            spdlog::critical("backfill: {}", backfilled.error().message);
            return std::unexpected(backfilled.error());
        }
        if (now >= next_checkpoint_ms_ && host.can_checkpoint()) {
            if (auto ok = host.checkpoint(); !ok) spdlog::error("{}", ok.error().message);
            next_checkpoint_ms_ = now + config_.checkpoint.interval_ms;
        }
        refresh_health_if_due(now);
        notifier_.watchdog(now);
        if (*step == 0 && *backfilled == 0)
            std::this_thread::sleep_for(host.backfilling() ? backfill_wait_sleep : idle_sleep);
    }
    return {};
}

Result<void> Service::drain_log(Result<void> result, bool synced) {
    bool drained = false;
    for (int i = 0; i < shutdown_drain_steps_max && !drained; ++i) {
        auto step = parts_->host().step(step_records_max, /*drain=*/synced);
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
    EngineHost& host = sp.host();
    notifier_.stopping();
    notifier_.status("stopping");
    stop_ingest();
    ticker_.reset();
    // Past a failed sync only what was durable before it is processed: the rest may not be on
    // disk, and its results must not reach the outbox.
    bool synced = false;
    if (result) {
        if (auto ok = host.log().sync(); ok)
            synced = true;
        else
            result = ok;
    }
    result = drain_log(std::move(result), synced);
    if (host.can_checkpoint()) {
        if (auto ok = host.checkpoint(); !ok && result) result = ok;
    } else {
        spdlog::warn(
            "stopping with emissions the outbox could not take; they are regenerated "
            "from the log on the next start");
    }
    sp.stop_clients();
    spdlog::info("stopped");
    return result;
}

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
