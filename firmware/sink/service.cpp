#include "firmware/sink/service.h"

#include <spdlog/spdlog.h>

#include <mutex>
#include <thread>

#include "adapters/mqtt/health.h"
#include "adapters/mqtt/ingest.h"
#include "firmware/notify.h"
#include "firmware/service/health_report.h"
#include "firmware/sink/sink_health.h"
#include "firmware/sink/sink_options.h"

namespace tidemark::firmware::sink {

namespace {

constexpr auto first_connect_timeout = std::chrono::seconds(10);
constexpr auto ingest_stop_timeout = std::chrono::seconds(5);

// The current Ingest (replaced on every pause), and the counters of the ones before it, so that
// health's counts do not drop back at a resume.
class IngestSlot {
  public:
    void set(std::unique_ptr<mqtt::Ingest> ingest) {
        std::lock_guard lock(mutex_);
        ingest_ = std::move(ingest);
    }
    // Taken out to be stopped outside the lock: stop() may take seconds, health must not wait.
    std::unique_ptr<mqtt::Ingest> take() {
        std::lock_guard lock(mutex_);
        if (ingest_) add(ingest_->stats());
        return std::move(ingest_);
    }
    bool running() const {
        std::lock_guard lock(mutex_);
        return ingest_ != nullptr;
    }
    mqtt::IngestStats stats() const {
        std::lock_guard lock(mutex_);
        mqtt::IngestStats out = before_;
        if (ingest_) {
            const mqtt::IngestStats now = ingest_->stats();
            out.messages += now.messages;
            out.bytes += now.bytes;
            out.duplicates += now.duplicates;
            out.reconnects += now.reconnects;
            out.connect_failures += now.connect_failures;
            out.handler_retries += now.handler_retries;
            out.retained_skipped += now.retained_skipped;
            out.failovers += now.failovers;
            out.connected = now.connected;
            out.node = now.node;  // the node this ingest is on
            if (!now.last_error.empty()) out.last_error = now.last_error;
        }
        return out;
    }
    void note_error(std::string error) {
        std::lock_guard lock(mutex_);
        before_.last_error = std::move(error);
    }

  private:
    void add(const mqtt::IngestStats& s) {
        before_.messages += s.messages;
        before_.bytes += s.bytes;
        before_.duplicates += s.duplicates;
        before_.reconnects += s.reconnects;
        before_.connect_failures += s.connect_failures;
        before_.handler_retries += s.handler_retries;
        before_.retained_skipped += s.retained_skipped;
        before_.failovers += s.failovers;
        if (!s.last_error.empty()) before_.last_error = s.last_error;
    }
    mutable std::mutex mutex_;
    std::unique_ptr<mqtt::Ingest> ingest_;
    mqtt::IngestStats before_;
};

Result<std::unique_ptr<mqtt::Ingest>> start_ingest(const config::SinkConfig& config, Spool& spool) {
    mqtt::IngestOptions options;
    // Version records are retained: the broker resends them at each subscription, and the
    // versions table takes a repeat as a no-op (the same switch_ms changes nothing).
    options.accept_retained = true;
    // Beside the spool (not in it: its directory holds segments only).
    options.subscriptions_file = config.spool.dir + ".subscriptions";
    options.protocol = config.source.protocol == config::SinkProtocol::v3_1_1
                           ? mqtt::MqttVersion::v3_1_1
                           : mqtt::MqttVersion::v5;
    auto ingest = mqtt::Ingest::create(
        source_options(config), config.source.topics,
        [&spool](const mqtt::IncomingMessage& m) { return spool.handle(m); }, options);
    if (!ingest) return std::unexpected(ingest.error());
    if (auto started = (*ingest)->start(first_connect_timeout); !started)
        return std::unexpected(started.error());
    return std::move(*ingest);
}

}  // namespace

Result<void> run_sink(const config::SinkConfig& config, Signals& signals,
                      const core::Clock& clock) {
    Notifier notifier;
    const int64_t started_steady_ms = clock.steady_ms();
    notifier.status("opening the spool " + config.spool.dir);
    auto spool = Spool::open(spool_options(config), clock);
    if (!spool) return std::unexpected(spool.error());
    spdlog::info("sink: spool {} (id {}) holds offsets {} to {}", config.spool.dir, (*spool)->id(),
                 (*spool)->first_offset(), (*spool)->end_offset());

    SinkWriter writer(writer_options(config), **spool, clock);
    if (auto ok = writer.start(); !ok) return ok;

    IngestSlot ingest;
    bool paused = false;
    std::atomic<bool> paused_flag{false};
    std::atomic<uint64_t> pauses{0};
    auto figures = [&](bool take_lag) {
        SinkFigures f;
        f.time_ms = clock.wall_ms();
        f.uptime_s = (clock.steady_ms() - started_steady_ms) / 1000;
        f.client_id = config.source.client_id;
        f.broker_uri = config.source.uri;
        f.writer = writer.stats(take_lag);
        f.spool = (*spool)->stats();
        f.spool_max_bytes = config.spool.max_bytes;
        f.ingest = ingest.stats();
        f.ingest_paused = paused_flag.load();
        f.pauses = pauses.load();
        f.rss_kib = rss_kib();
        f.rss_anon_kib = rss_anon_kib();
        return f;
    };
    auto health = mqtt::HealthPublisher::create(health_options(config, clock),
                                                [&] { return sink_health_json(figures(true)); });
    if (!health) return std::unexpected(health.error());
    if (auto ok = (*health)->start(); !ok) return ok;

    notifier.status("connecting to " + config.source.uri);
    int ingest_failures = 0;
    int64_t next_ingest_try_ms = clock.steady_ms();
    auto try_ingest = [&] {
        auto started = start_ingest(config, **spool);
        if (started) {
            ingest.set(std::move(*started));
            ingest_failures = 0;
            return true;
        }
        spdlog::warn("sink: {}", started.error().message);
        ingest.note_error(started.error().message);
        next_ingest_try_ms = clock.steady_ms() + mqtt::reconnect_delay(ingest_failures++).count();
        return false;
    };
    try_ingest();
    notifier.ready();
    spdlog::info("sink {} running: {} -> PostgreSQL schema {}", config.source.client_id,
                 config.source.uri, config.postgres.schema);

    Result<void> outcome;
    while (!signals.stop.load()) {
        const int64_t now = clock.steady_ms();
        if (now - writer.heartbeat_steady_ms() < writer_stall_ms) notifier.watchdog(now);
        if (auto synced = (*spool)->sync_if_due(now); !synced) {
            outcome = fail("the spool cannot be made durable: " + synced.error().message);
            break;
        }
        if (auto fatal = writer.fatal_error(); !fatal.empty()) {
            outcome = fail(fatal);
            break;
        }
        if (!paused && ingest.running() && (*spool)->pause_wanted()) {
            spdlog::warn(
                "sink: the spool holds {} bytes not yet in PostgreSQL (bound {}): "
                "pausing ingest, the broker keeps the messages",
                (*spool)->backlog_bytes(), config.spool.max_bytes);
            paused = true;
            paused_flag = true;
            pauses.fetch_add(1);
            if (auto stopped = ingest.take()) stopped->stop(ingest_stop_timeout);
        } else if (paused && (*spool)->resume_wanted()) {
            spdlog::info("sink: the spool is down to {} bytes: resuming ingest",
                         (*spool)->backlog_bytes());
            paused = false;
            paused_flag = false;
            next_ingest_try_ms = now;
        }
        if (!paused && !ingest.running() && now >= next_ingest_try_ms) {
            if (try_ingest()) notifier.status("running, connected to " + config.source.uri);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(loop_interval_ms));
    }

    notifier.stopping();
    notifier.status("stopping");
    if (auto stopped = ingest.take()) stopped->stop(ingest_stop_timeout);
    if (auto synced = (*spool)->sync(); !synced && outcome)
        outcome = fail("the spool cannot be made durable: " + synced.error().message);
    writer.stop();
    (*health)->stop(std::chrono::seconds(2));
    spdlog::info("sink {} stopped", config.source.client_id);
    return outcome;
}

}  // namespace tidemark::firmware::sink
