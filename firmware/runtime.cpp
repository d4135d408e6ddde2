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
#include "adapters/mqtt/forwarder.h"
#include "adapters/mqtt/health.h"
#include "adapters/mqtt/ingest.h"
#include "adapters/mqtt/redelivery_filter.h"
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

}  // namespace

Result<void> run_service(const config::Config& config, const RunOptions& options,
                         Signals& signals) {
    Notifier notifier;
    notifier.status("recovering");
    std::error_code ec;
    std::filesystem::create_directories(config.data_dir, ec);
    if (ec) return fail("cannot create data_dir " + config.data_dir + ": " + ec.message());
    auto lock = DirLock::take(config.data_dir);
    if (!lock) return std::unexpected(lock.error());

    auto parts = ServiceParts::open(config);
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
    const int64_t recover_start_ms = steady_ms();
    int64_t waited_ms = 0;
    auto recovered = sp.recover([&] {
        if (waited_ms == 0) spdlog::warn("recovery waits for room in the outbox (upstream down?)");
        std::this_thread::sleep_for(std::chrono::milliseconds(250));
        waited_ms += 250;
        notifier.extend_timeout(std::chrono::minutes(1));
        notifier.watchdog(steady_ms());
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
                 sp.checkpoint_offset(), *recovered, steady_ms() - recover_start_ms);
    notifier.status("recovered " + std::to_string(*recovered) + " records");
    // Not fatal: the loop checkpoints again, and a failed one changes nothing stored.
    if (auto ok = sp.checkpoint(); !ok) spdlog::error("{}", ok.error().message);

    // The clock as the log last recorded it; a change is appended as a marker tick, so that
    // the engine (and every replay) sees it at the same record.
    bool clock_trusted_logged = sp.engine_clock_trusted();

    // Ingest: the durable append happens inside the Paho callback, before the PUBACK.
    std::mutex append_mutex;  // ingest callbacks and the ticker both append
    std::atomic<int64_t> last_append_ms{steady_ms()};
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
        auto ok = sp.log().append(log::RecordType::tick, wall_ms(), ingest_resumed_tick, {});
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
        const int64_t now = wall_ms();
        if (m.duplicate && filter.is_redelivery(m.packet_id, m.topic, m.payload)) {
            sp.count_redelivery_skipped();
            return mqtt::HandleResult::accepted;
        }
        Result<uint64_t> appended;
        if (m.payload.size() > payload_max) {
            // Kept for inspection with its reason; counted by every pipeline it matches.
            std::string topic = "oversized: " + std::to_string(m.payload.size()) +
                                " bytes > max_payload " + std::to_string(payload_max) + "\t" +
                                std::string(m.topic.substr(0, 60000));
            appended = sp.log().append(log::RecordType::malformed, now, topic,
                                       m.payload.substr(0, log::malformed_payload_bytes_max));
        } else {
            appended = sp.log().append(log::RecordType::message, now, m.topic, m.payload);
        }
        if (appended) filter.remember(m.packet_id, m.topic, m.payload);
        if (!appended) {
            sp.append_failed(appended.error().message);
            return mqtt::HandleResult::retry_later;
        }
        last_append_ms.store(steady_ms(), std::memory_order_relaxed);
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
        int64_t next_sync_ms = steady_ms() + config.storage.fsync_interval_ms;
        while (
            !ticker_cv.wait_for(lk, std::chrono::milliseconds(100), [&] { return ticker_stop; })) {
            if (ingest_live.load() &&
                steady_ms() - last_append_ms.load(std::memory_order_relaxed) >= tick_interval_ms) {
                std::lock_guard<std::mutex> guard(append_mutex);
                auto ok = sp.log().append(log::RecordType::tick, wall_ms(), {}, {});
                if (ok)
                    last_append_ms.store(steady_ms(), std::memory_order_relaxed);
                else
                    sp.append_failed(ok.error().message);
            }
            // fsync=interval: the sync runs here, outside the append lock (LogWriter::sync
            // fdatasyncs a dup of the fd), so ingest never waits for the disk.
            if (config.storage.fsync == config::FsyncPolicy::interval &&
                steady_ms() >= next_sync_ms) {
                next_sync_ms = steady_ms() + config.storage.fsync_interval_ms;
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
        ingest_retry_ms =
            steady_ms() + std::min<int64_t>(30'000, 500LL << std::min(ingest_failures, 6));
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

    int64_t next_checkpoint_ms = steady_ms() + config.checkpoint.interval_ms;
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
        if (!ingest_started && !sp.ingest_paused() && steady_ms() >= ingest_retry_ms)
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
        const int64_t now = steady_ms();
        if (now >= next_trim_ms && sp.disk_full()) {
            // Retention first frees what replay alone needs; then back-pressure (ingest holds
            // the message, the outbox waits) until the disk has room again.
            next_trim_ms = now + 10'000;
            sp.trim_for_disk_full();
        }
        if (now >= next_clock_ms) {
            next_clock_ms = now + 1000;
            const bool trusted = sp.refresh_clock();
            if (trusted != clock_trusted_logged) {
                std::lock_guard<std::mutex> guard(append_mutex);
                const std::string_view marker =
                    trusted ? clock_synchronised_tick : clock_unsynchronised_tick;
                if (auto ok = sp.log().append(log::RecordType::tick, wall_ms(), marker, {}); ok) {
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
            next_health_ms = now + std::min<int64_t>(config.health.interval_ms, 1000);
            std::string status = sp.status_line();
            if (status != last_status) {
                notifier.status(status);
                last_status = status;
            }
        }
        notifier.watchdog(now);
        if (*step == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
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
    for (int i = 0; i < 10000; ++i) {
        auto step = sp.step(step_records_max, /*drain=*/synced);
        if (!step) {
            if (result) result = std::unexpected(step.error());
            break;
        }
        if (*step == 0) break;
    }
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
