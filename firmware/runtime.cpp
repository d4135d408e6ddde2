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
#include "firmware/notify.h"
#include "firmware/processor.h"
#include "firmware/service_parts.h"

namespace tidemark::firmware {

namespace {

using Clock = std::chrono::steady_clock;

int64_t steady_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch())
        .count();
}

// Bounds of one engine step: records read before the outbox batch is committed.
constexpr size_t step_records_max = 4096;
// Ingest appends a tick when nothing else was appended for this long.
constexpr int64_t tick_interval_ms = 1000;

// One process per data_dir: a second one would append to the same log and corrupt it.
class DirLock {
  public:
    static Result<DirLock> take(const std::string& dir) {
        const std::string path = dir + "/lock";
        const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (fd < 0)
            return fail("cannot open " + path + ": " + std::strerror(errno) +
                        " (is data_dir writable by this user?)");
        if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
            ::close(fd);
            return fail("another tidemark process is using " + dir +
                        ": stop it first, or give this one another data_dir");
        }
        return DirLock(fd);
    }
    DirLock(DirLock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
    ~DirLock() {
        if (fd_ >= 0) ::close(fd_);
    }

  private:
    explicit DirLock(int fd) : fd_(fd) {}
    int fd_;
};

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

    // Recovery: the checkpoint, then the log from its offset (regenerated emissions that are
    // already in the outbox are skipped by id).
    // Replaying a long log can outlast the unit's start timeout; say so to systemd.
    notifier.extend_timeout(std::chrono::minutes(10));
    const int64_t recover_start_ms = steady_ms();
    auto recovered = sp.recover();
    if (!recovered) return std::unexpected(recovered.error());
    spdlog::info("recovered: checkpoint at log offset {}, {} records replayed in {} ms",
                 sp.checkpoint_offset(), *recovered, steady_ms() - recover_start_ms);
    notifier.status("recovered " + std::to_string(*recovered) + " records");
    if (auto ok = sp.checkpoint(); !ok) return ok;

    // Ingest: the durable append happens inside the Paho callback, before the PUBACK.
    std::mutex append_mutex;  // ingest callbacks and the ticker both append
    std::atomic<int64_t> last_append_ms{steady_ms()};
    mqtt::RedeliveryFilter& filter = sp.redelivery_filter();
    const uint64_t payload_max = config.source.max_payload_bytes;
    auto handler = [&](const mqtt::IncomingMessage& m) -> mqtt::HandleResult {
        std::lock_guard<std::mutex> guard(append_mutex);
        const int64_t now = wall_ms();
        Result<uint64_t> appended;
        if (m.payload.size() > payload_max) {
            // Kept for inspection with its reason; counted by every pipeline it matches.
            std::string topic = "oversized: " + std::to_string(m.payload.size()) +
                                " bytes > max_payload " + std::to_string(payload_max) + "\t" +
                                std::string(m.topic.substr(0, 60000));
            appended = sp.log().append(log::RecordType::malformed, now, topic,
                                       m.payload.substr(0, log::malformed_payload_bytes_max));
        } else {
            if (m.duplicate && filter.seen(m.topic, m.payload)) {
                sp.count_redelivery_skipped();
                return mqtt::HandleResult::accepted;
            }
            appended = sp.log().append(log::RecordType::message, now, m.topic, m.payload);
            if (appended) filter.remember(m.topic, m.payload);
        }
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
        return mqtt::Ingest::create(source_broker_options(config), filters, handler);
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
            if (steady_ms() - last_append_ms.load(std::memory_order_relaxed) >= tick_interval_ms) {
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

    auto forwarder = sp.start_forwarder();
    if (!forwarder) spdlog::error("upstream: {}", forwarder.error().message);
    sp.refresh_health(nullptr);  // the first retained snapshot is a real one, never "{}"
    auto health = sp.start_health();
    if (!health) spdlog::error("health: {}", health.error().message);

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
    try_start_ingest();
    notifier.ready();
    notifier.status(ingest_started ? "running, connected to " + config.source.uri
                                   : "running, gateway broker unreachable: retrying");

    int64_t next_checkpoint_ms = steady_ms() + config.checkpoint.interval_ms;
    int64_t next_health_ms = 0;
    std::string last_status;
    while (!signals.stop.load()) {
        if (signals.reload.exchange(false)) sp.reload(options.config_path, notifier);
        if (sp.ingest_paused() && ingest_started) {
            (*ingest)->stop(std::chrono::seconds(3));
            ingest = make_ingest();
            if (!ingest) return std::unexpected(ingest.error());
            ingest_started = false;
            spdlog::warn("ingest paused: the outbox cannot take more results");
        }
        if (!ingest_started && !sp.ingest_paused() && steady_ms() >= ingest_retry_ms)
            try_start_ingest();
        auto step = sp.step(step_records_max, /*drain=*/false);
        if (!step) {
            spdlog::critical("engine: {}", step.error().message);
            signals.stop = true;
            break;
        }
        const int64_t now = steady_ms();
        if (now >= next_checkpoint_ms && sp.can_checkpoint()) {
            if (auto ok = sp.checkpoint(); !ok) spdlog::error("checkpoint: {}", ok.error().message);
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
    (*ingest)->stop(std::chrono::seconds(3));
    {
        std::lock_guard<std::mutex> lk(ticker_mutex);
        ticker_stop = true;
    }
    ticker_cv.notify_all();
    ticker.join();
    Result<void> result;
    if (auto synced = sp.log().sync(); !synced) result = synced;
    for (int i = 0; i < 10000; ++i) {
        auto step = sp.step(step_records_max, /*drain=*/true);
        if (!step) {
            result = std::unexpected(step.error());
            break;
        }
        if (*step == 0) break;
    }
    if (sp.can_checkpoint()) {
        if (auto ok = sp.checkpoint(); !ok) result = ok;
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
