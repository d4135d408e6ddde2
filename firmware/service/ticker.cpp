#include "firmware/service/ticker.h"

#include <spdlog/spdlog.h>

#include <chrono>

#include "adapters/log/log_writer.h"
#include "firmware/service/alarms.h"
#include "firmware/service/log_appender.h"

namespace tidemark::firmware {

namespace {

// Ingest appends a tick when nothing else was appended for this long.
constexpr int64_t tick_interval_ms = 1000;
// How often the ticker wakes to look at the tick interval and fsync_interval.
constexpr auto ticker_wake = std::chrono::milliseconds(100);

}  // namespace

Ticker::Ticker(log::LogWriter& log, Alarms& alarms, LogAppender& appender, const core::Clock& clock)
    : log_(log), alarms_(alarms), appender_(appender), clock_(clock) {
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
    while (!wake_.wait_for(lk, ticker_wake, [&] { return stop_; })) {
        appender_.tick_if_idle(tick_interval_ms);
        // The interval's sync (fsync=interval), or a compressed log's seal, runs here, outside
        // the append lock (LogWriter::sync fdatasyncs a file description of its own), so ingest
        // never waits for the disk. When it is due is the writer's to say: one interval policy.
        // A poisoned writer was reported by whoever hit it, and every append says so again:
        // asking every 100 ms would count one failure ten times a second in append_errors.
        if (log_.poisoned()) continue;
        auto synced = log_.maybe_sync(clock_.steady_ms());
        if (!synced) {
            alarms_.append_failed(synced.error().message);
        } else if (*synced) {
            say_seal_change();
        }
    }
}

// Said once when it changes, not at every sync: a full disk defers every seal until room is made.
void Ticker::say_seal_change() {
    std::string error = log_.seal_error();
    if (error == seal_error_said_) return;
    if (!error.empty()) {
        spdlog::warn(
            "log: compressed blocks cannot be written ({}); the records are kept durable in the "
            "segment's stage, uncompressed, until a seal succeeds (alarm log_seal_deferred)",
            error);
    } else {
        spdlog::info("log: compressed blocks written again; the deferred records are sealed");
    }
    seal_error_said_ = std::move(error);
}

}  // namespace tidemark::firmware
