// The service's run (runtime.cpp, runtime_ingest.cpp): what its steps share. Internal to
// firmware/service/: only those two files include it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "adapters/config/config.h"
#include "adapters/mqtt/ingest.h"
#include "core/clock.h"
#include "core/result.h"
#include "firmware/dir_lock.h"
#include "firmware/notify.h"
#include "firmware/service/log_appender.h"
#include "firmware/service/runtime.h"
#include "firmware/service/service_parts.h"
#include "firmware/service/ticker.h"

namespace tidemark::firmware {

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

}  // namespace tidemark::firmware
