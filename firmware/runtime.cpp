#include "firmware/runtime.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <spdlog/spdlog.h>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "adapters/codec/record.h"
#include "adapters/codec/topic.h"
#include "adapters/lmdb/store.h"
#include "adapters/log/log_reader.h"
#include "adapters/log/log_writer.h"
#include "adapters/mqtt/client_options.h"
#include "adapters/mqtt/forwarder.h"
#include "adapters/mqtt/health.h"
#include "adapters/mqtt/ingest.h"
#include "adapters/mqtt/redelivery_filter.h"
#include "firmware/adapter_options.h"
#include "firmware/clock.h"
#include "firmware/dir_lock.h"
#include "firmware/notify.h"
#include "firmware/processor.h"
#include "firmware/service_parts.h"

namespace tidemark::firmware {

namespace {

// Bounds of one engine step: records read before the outbox batch is committed.
constexpr size_t step_records_max = 4096;
// Ingest appends a tick when nothing else was appended for this long.
constexpr int64_t tick_interval_ms = 1000;
// How often the ticker wakes to look at the two intervals above and fsync_interval.
constexpr auto ticker_wake = std::chrono::milliseconds(100);
// While the disk is full, log segments before the checkpoint are trimmed at most this often:
// each attempt lists the log directory, and what a full disk frees comes back only as the
// forwarder drains or retention ages segments out, not within a loop turn.
constexpr int64_t disk_full_trim_interval_ms = 10'000;
// read_clock_status() reads a few files and one system call: about once a second (clock.h).
constexpr int64_t clock_poll_interval_ms = 1000;
// Health is rebuilt at least this often (and every health.interval when that is shorter), so
// that the systemd status line follows alarms within a second.
constexpr int64_t health_refresh_interval_ms_max = 1000;
// The loop sleeps this long when a step found nothing to read.
constexpr auto idle_sleep = std::chrono::milliseconds(20);
// Recovery waiting for room in the outbox looks again this often.
constexpr int64_t recovery_wait_ms = 250;
// The first ingest retry after a failed connect waits 1 s (twice this), doubling to 30 s.
constexpr auto ingest_retry_delay_min = std::chrono::milliseconds(500);
// Steps taken to drain the log on stop: 10,000 steps of step_records_max records, about 41
// million records, far more than fsync_interval leaves unprocessed, so that a stop is bounded
// even if something kept appending. What is left is replayed on the next start, nothing lost.
constexpr int shutdown_drain_steps_max = 10'000;

}  // namespace

// Long (about 290 lines) because the ingest handler, the ticker and the loop share the append
// lock, the redelivery filter's connection and the resumed-marker state as locals.
// TODO(issue 15): split into an ingest appender (handler + markers), the ticker, the loop and
// the shutdown drain, each with that shared state as members.
Result<void> run_service(const config::Config& config, const RunOptions& options, Signals& signals,
                         const core::Clock& clock) {
    Notifier notifier;
    notifier.status("recovering");
    std::error_code ec;
    std::filesystem::create_directories(config.data_dir, ec);
    if (ec) return fail("cannot create data_dir " + config.data_dir + ": " + ec.message());
    auto lock = DirLock::take(config.data_dir);
    if (!lock) return std::unexpected(lock.error());

    auto parts = ServiceParts::open(config, clock);
    if (!parts) return std::unexpected(parts.error());
    ServiceParts& sp = **parts;

    // The forwarder is the only thing that frees room in the outbox: it runs before recovery,
    // so that a restart with a full outbox drains it instead of waiting for itself. It sends
    // only rows already committed, which recovery never rewrites.
    auto forwarder = sp.start_forwarder();
    if (!forwarder) spdlog::error("upstream: {}", forwarder.error().message);
    sp.refresh_health(nullptr);  // the first retained snapshot is a real one, never "{}"
    auto health = sp.start_health();
    if (!health) spdlog::error("health: {}", health.error().message);

    // Recovery: the checkpoint, then the log from its offset (regenerated emissions that are
    // already in the outbox are skipped by id).
    // Replaying a long log can outlast the unit's start timeout; say so to systemd.
    notifier.extend_timeout(std::chrono::minutes(10));
    const int64_t recover_start_ms = clock.steady_ms();
    int64_t waited_ms = 0;
    auto recovered = sp.recover([&] {
        if (waited_ms == 0) spdlog::warn("recovery waits for room in the outbox (upstream down?)");
        std::this_thread::sleep_for(std::chrono::milliseconds(recovery_wait_ms));
        waited_ms += recovery_wait_ms;
        notifier.extend_timeout(std::chrono::minutes(1));
        notifier.watchdog(clock.steady_ms());
        sp.refresh_health(nullptr);
        return !signals.stop.load();
    });
    if (!recovered && signals.stop.load()) {
        // Stopped while waiting for room: a clean stop, the next start recovers again.
        spdlog::info("stopped during recovery: {}", recovered.error().message);
        sp.stop_clients();
        return {};
    }
    if (!recovered) return std::unexpected(recovered.error());
    spdlog::info("recovered: checkpoint at log offset {}, {} records replayed in {} ms",
                 sp.checkpoint_offset(), *recovered, clock.steady_ms() - recover_start_ms);
    notifier.status("recovered " + std::to_string(*recovered) + " records");
    // Not fatal: the loop checkpoints again, and a failed one changes nothing stored.
    if (auto ok = sp.checkpoint(); !ok) spdlog::error("{}", ok.error().message);

    // The clock as the log last recorded it; a change is appended as a marker tick, so that
    // the engine (and every replay) sees it at the same record.
    bool clock_trusted_logged = sp.engine_clock_trusted();

    // Ingest: the durable append happens inside the Paho callback, before the PUBACK.
    std::mutex append_mutex;  // ingest callbacks and the ticker both append
    std::atomic<int64_t> last_append_ms{clock.steady_ms()};
    // Ticks say that the devices are silent; only while ingest could hear them (connected and
    // not paused). Our own silence must not make a backlog the broker keeps late.
    std::atomic<bool> ingest_live{false};
    mqtt::RedeliveryFilter& filter = sp.redelivery_filter();
    uint64_t connection_seen = 0;  // under append_mutex, like the filter
    // The connection whose start is marked in the log (under append_mutex). Before any message
    // or tick of a connection, a marker says that ingest listens again: the time since the last
    // record was our silence (stopped, paused, disconnected), not the devices'.
    uint64_t resumed_for = 0;
    auto mark_resumed = [&](uint64_t connection) -> bool {
        if (connection == resumed_for) return true;
        auto ok = sp.log().append(log::RecordType::tick, clock.wall_ms(), ingest_resumed_tick, {});
        if (!ok) {
            sp.append_failed(ok.error().message);
            return false;
        }
        resumed_for = connection;
        return true;
    };
    const uint64_t payload_max = config.source.max_payload_bytes;
    auto handler = [&](const mqtt::IncomingMessage& m) -> mqtt::HandleResult {
        std::lock_guard<std::mutex> guard(append_mutex);
        if (!mark_resumed(m.connection)) return mqtt::HandleResult::retry_later;
        if (m.connection != connection_seen) {
            // What the previous connections left unacknowledged may now come back, with DUP.
            filter.connection_started();
            connection_seen = m.connection;
        }
        const int64_t now = clock.wall_ms();
        if (m.duplicate && filter.is_redelivery(m.packet_id, m.topic, m.payload)) {
            sp.count_redelivery_skipped();
            return mqtt::HandleResult::accepted;
        }
        Result<uint64_t> appended;
        if (m.payload.size() > payload_max) {
            // Kept for inspection with its reason; counted by every pipeline it matches.
            // MQTT topics are at most 65535 bytes, like the log's topic field, which the
            // reason shares: the topic is cut to leave the reason room.
            const std::string reason = "oversized: " + std::to_string(m.payload.size()) +
                                       " bytes > max_payload " + std::to_string(payload_max);
            appended = sp.log().append_malformed(
                now, reason, m.topic.substr(0, log::topic_bytes_max - reason.size() - 1),
                m.payload);
        } else {
            appended = sp.log().append(log::RecordType::message, now, m.topic, m.payload);
        }
        if (appended) filter.remember(m.packet_id, m.topic, m.payload);
        if (!appended) {
            sp.append_failed(appended.error().message);
            return mqtt::HandleResult::retry_later;
        }
        last_append_ms.store(clock.steady_ms(), std::memory_order_relaxed);
        sp.append_succeeded();
        return mqtt::HandleResult::accepted;
    };
    std::vector<std::string> filters;
    for (const auto& p : config.pipelines)
        if (std::find(filters.begin(), filters.end(), p.topic_filter) == filters.end())
            filters.push_back(p.topic_filter);
    // Paho C runs every client of the process on one receive thread: holding a message in the
    // callback would stall the forwarder that drains the outbox. So a full outbox pauses ingest
    // by disconnecting it (the broker keeps the persistent session's messages) rather than by
    // holding a message; only a log append that fails (disk full) holds one, briefly.
    auto make_ingest = [&] {
        mqtt::IngestOptions io;
        io.accept_retained = config.source.accept_retained;
        return mqtt::Ingest::create(source_broker_options(config), filters, handler, io);
    };
    auto ingest = make_ingest();
    if (!ingest) return std::unexpected(ingest.error());

    // The ticker: idle ticks (the engine's clock while nothing arrives) and interval fsync.
    std::mutex ticker_mutex;
    std::condition_variable ticker_cv;
    bool ticker_stop = false;
    std::thread ticker([&] {
        std::unique_lock<std::mutex> lk(ticker_mutex);
        int64_t next_sync_ms = clock.steady_ms() + config.storage.fsync_interval_ms;
        while (!ticker_cv.wait_for(lk, ticker_wake, [&] { return ticker_stop; })) {
            if (ingest_live.load() &&
                clock.steady_ms() - last_append_ms.load(std::memory_order_relaxed) >=
                    tick_interval_ms) {
                std::lock_guard<std::mutex> guard(append_mutex);
                auto ok = sp.log().append(log::RecordType::tick, clock.wall_ms(), {}, {});
                if (ok)
                    last_append_ms.store(clock.steady_ms(), std::memory_order_relaxed);
                else
                    sp.append_failed(ok.error().message);
            }
            // fsync=interval: the sync runs here, outside the append lock (LogWriter::sync
            // fdatasyncs a dup of the fd), so ingest never waits for the disk.
            if (config.storage.fsync == config::FsyncPolicy::interval &&
                clock.steady_ms() >= next_sync_ms) {
                next_sync_ms = clock.steady_ms() + config.storage.fsync_interval_ms;
                if (auto synced = sp.log().sync(); !synced)
                    sp.append_failed(synced.error().message);
            }
        }
    });

    int64_t ingest_retry_ms = 0;
    int ingest_failures = 0;
    bool ingest_started = false;
    auto try_start_ingest = [&] {
        auto started = (*ingest)->start(std::chrono::seconds(5));
        if (started) {
            ingest_started = true;
            spdlog::info("ingest: connected to {}", config.source.uri);
            return;
        }
        ++ingest_failures;
        ingest_retry_ms = clock.steady_ms() +
                          mqtt::reconnect_delay(ingest_failures, ingest_retry_delay_min).count();
        spdlog::warn("ingest: {} (retrying)", started.error().message);
    };
    auto stop_ingest = [&] {
        ingest_live = false;
        (*ingest)->stop(std::chrono::seconds(3));
    };
    try_start_ingest();
    notifier.ready();
    notifier.status(ingest_started ? "running, connected to " + config.source.uri
                                   : "running, gateway broker unreachable: retrying");

    int64_t next_checkpoint_ms = clock.steady_ms() + config.checkpoint.interval_ms;
    int64_t next_health_ms = 0;
    int64_t next_clock_ms = 0;
    int64_t next_trim_ms = 0;
    std::string last_status;
    Result<void> failure;
    while (!signals.stop.load()) {
        if (signals.reload.exchange(false)) sp.reload(options.config_path, notifier);
        if (sp.ingest_paused() && ingest_started) {
            stop_ingest();
            ingest = make_ingest();
            if (!ingest) return std::unexpected(ingest.error());
            ingest_started = false;
            spdlog::warn("ingest paused: the outbox cannot take more results");
        }
        if (!ingest_started && !sp.ingest_paused() && clock.steady_ms() >= ingest_retry_ms)
            try_start_ingest();
        if (ingest_started && !sp.ingest_paused() && (*ingest)->connected()) {
            std::lock_guard<std::mutex> guard(append_mutex);
            ingest_live = mark_resumed((*ingest)->connection());
        } else {
            ingest_live = false;
        }
        if (auto poisoned = sp.log_failure()) {
            // Linux may have dropped the pages a failed fdatasync did not write: only a reopen
            // (a restart, by systemd) can tell what is durable.
            failure = fail("log: " + *poisoned + "; exiting so that a restart reopens the log");
            break;
        }
        const int64_t now = clock.steady_ms();
        if (now >= next_trim_ms && sp.disk_full()) {
            // Retention first frees what replay alone needs; then back-pressure (ingest holds
            // the message, the outbox waits) until the disk has room again.
            next_trim_ms = now + disk_full_trim_interval_ms;
            sp.trim_for_disk_full();
        }
        if (now >= next_clock_ms) {
            next_clock_ms = now + clock_poll_interval_ms;
            const bool trusted = sp.refresh_clock();
            if (trusted != clock_trusted_logged) {
                std::lock_guard<std::mutex> guard(append_mutex);
                const std::string_view marker =
                    trusted ? clock_synchronised_tick : clock_unsynchronised_tick;
                if (auto ok = sp.log().append(log::RecordType::tick, clock.wall_ms(), marker, {});
                    ok) {
                    clock_trusted_logged = trusted;
                    spdlog::warn("clock {}", trusted ? "synchronised: trusted from now on"
                                                     : "not synchronised: clamping and idle "
                                                       "advance held until it is");
                }
            }
        }
        auto step = sp.step(step_records_max, /*drain=*/false);
        if (!step) {
            spdlog::critical("engine: {}", step.error().message);
            failure = std::unexpected(step.error());
            break;
        }
        if (now >= next_checkpoint_ms && sp.can_checkpoint()) {
            if (auto ok = sp.checkpoint(); !ok) spdlog::error("{}", ok.error().message);
            next_checkpoint_ms = now + config.checkpoint.interval_ms;
        }
        if (now >= next_health_ms) {
            sp.refresh_health(ingest_started ? &**ingest : nullptr);
            next_health_ms =
                now + std::min<int64_t>(config.health.interval_ms, health_refresh_interval_ms_max);
            std::string status = sp.status_line();
            if (status != last_status) {
                notifier.status(status);
                last_status = status;
            }
        }
        notifier.watchdog(now);
        if (*step == 0) std::this_thread::sleep_for(idle_sleep);
    }

    // Shutdown: no new messages, everything logged is processed, one last checkpoint.
    notifier.stopping();
    notifier.status("stopping");
    stop_ingest();
    {
        std::lock_guard<std::mutex> lk(ticker_mutex);
        ticker_stop = true;
    }
    ticker_cv.notify_all();
    ticker.join();
    Result<void> result = failure;
    // Past a failed sync only what was durable before it is processed: the rest may not be on
    // disk, and its results must not reach the outbox.
    bool synced = false;
    if (result) {
        if (auto ok = sp.log().sync(); ok)
            synced = true;
        else
            result = ok;
    }
    bool drained = false;
    for (int i = 0; i < shutdown_drain_steps_max && !drained; ++i) {
        auto step = sp.step(step_records_max, /*drain=*/synced);
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

}  // namespace tidemark::firmware
