// The ticker thread: the engine's clock while nothing arrives, and the log's interval fsync.
#pragma once

#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "core/clock.h"

namespace tidemark::log {
class LogWriter;
}  // namespace tidemark::log

namespace tidemark::firmware {

class Alarms;
class LogAppender;

/// Operation: every 100 ms, an idle tick through the appender when nothing was appended for a
/// second and ingest is live (LogAppender::tick_if_idle); LogWriter::maybe_sync, which says when
/// the interval's fdatasync (fsync=interval) or a compressed log's seal is due, outside the
/// append lock (LogWriter::sync fdatasyncs a file description of its own), so ingest never waits
/// for the disk. A failed sync raises the append alarm; a compressed log's deferred seal (a full
/// disk: LogWriter::seal_error) is said in the journal when it starts and when it ends.
/// Concurrency: its own thread; stops (and joins) on destruction.
class Ticker {
  public:
    /// Everything passed must outlive the ticker.
    Ticker(log::LogWriter& log, Alarms& alarms, LogAppender& appender, const core::Clock& clock);
    ~Ticker();
    Ticker(const Ticker&) = delete;
    Ticker& operator=(const Ticker&) = delete;

  private:
    void run();
    void say_seal_change();

    log::LogWriter& log_;
    Alarms& alarms_;
    LogAppender& appender_;
    const core::Clock& clock_;
    std::mutex mutex_;
    std::condition_variable wake_;
    bool stop_ = false;            // under mutex_
    std::string seal_error_said_;  // the ticker thread's own
    std::thread thread_;
};

}  // namespace tidemark::firmware
