// The ticker thread: the engine's clock while nothing arrives, and the log's interval fsync.
#pragma once

#include <condition_variable>
#include <mutex>
#include <thread>

#include "adapters/config/config.h"
#include "core/clock.h"

namespace tidemark::log {
class LogWriter;
}  // namespace tidemark::log

namespace tidemark::firmware {

class Alarms;
class LogAppender;

/// Operation: every 100 ms, an idle tick through the appender when nothing was appended for a
/// second and ingest is live (LogAppender::tick_if_idle); with fsync=interval, the log's
/// fdatasync every fsync_interval, outside the append lock (LogWriter::sync fdatasyncs a dup of
/// the fd), so ingest never waits for the disk. A failed sync raises the append alarm.
/// Concurrency: its own thread; stops (and joins) on destruction.
class Ticker {
  public:
    /// Everything passed must outlive the ticker.
    Ticker(const config::Config& config, log::LogWriter& log, Alarms& alarms, LogAppender& appender,
           const core::Clock& clock);
    ~Ticker();
    Ticker(const Ticker&) = delete;
    Ticker& operator=(const Ticker&) = delete;

  private:
    void run();

    const config::Config& config_;
    log::LogWriter& log_;
    Alarms& alarms_;
    LogAppender& appender_;
    const core::Clock& clock_;
    std::mutex mutex_;
    std::condition_variable wake_;
    bool stop_ = false;  // under mutex_
    std::thread thread_;
};

}  // namespace tidemark::firmware
