// The health report: the figures the service publishes on health.topic (README, "Health"). The
// service gathers them into HealthFigures and health_record_json() renders the record; `tidemark
// inspect` renders the sections it shares with health (a pipeline's figures, the outbox, the
// side output) with the same functions, so that both say the same under the same names. The
// JSON is built in health_report.cpp only: no JSON library type crosses this header.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "adapters/lmdb/types.h"
#include "adapters/log/log_reader.h"
#include "adapters/log/log_writer.h"
#include "core/engine.h"
#include "firmware/build_info.h"
#include "firmware/clock.h"
#include "firmware/service/engine_host.h"
#include "firmware/service/processor.h"

namespace tidemark::mqtt {
class Ingest;
class Forwarder;
}  // namespace tidemark::mqtt

namespace tidemark::firmware {

/// One pipeline's figures; the pointers must outlive the health_record_json() call.
struct PipelineFigures {
    std::string_view name;
    const core::PipelineStats* stats = nullptr;  // null while no version of it runs live
    const DecodeCounters* decode = nullptr;      // null with stats
    std::string_view version;                    // the live version; empty: none yet
    const BackfillFigures* backfill = nullptr;   // its running backfill, if any
    const SwitchFigures* switched = nullptr;     // its last switch in this process, if any
};

/// The last SIGHUP's outcome (health's last_reload).
struct ReloadFigures {
    int64_t time_ms = 0;
    bool ok = false;
    std::vector<std::string> errors;  // "pointer: message"
};

/// The service's own ingest counters, beside the MQTT client's.
struct IngestCounters {
    uint64_t redeliveries_skipped = 0;
    uint64_t append_errors = 0;
    bool paused = false;
    uint64_t malformed_records = 0;  // oversized payloads kept as malformed records
};

struct MapFigures {
    uint64_t used_bytes = 0;
    uint64_t size_bytes = 0;
    uint64_t side_rows_dropped = 0;
};

/// Everything one health record says, read by the engine thread at one moment.
struct HealthFigures {
    std::string_view node;
    int64_t time_ms = 0;
    int64_t uptime_s = 0;
    BuildInfo build;
    ClockStatus clock;
    std::vector<PipelineFigures> pipelines;
    const mqtt::Ingest* ingest = nullptr;  // null while it is not started
    IngestCounters ingest_counters;
    log::LogStats log;
    log::ReaderStats reader;
    uint64_t engine_offset = 0;
    CheckpointStats checkpoint;
    std::optional<lmdb::OutboxStats> outbox;     // none when the store could not say
    const mqtt::Forwarder* forwarder = nullptr;  // null without upstream
    std::optional<lmdb::SideStats> side;         // none when the store could not say
    std::optional<MapFigures> map;               // none when the store could not say
    uint64_t rss_kib = 0;
    std::vector<std::string> alarms;
    std::optional<ReloadFigures> last_reload;  // none before the first reload
    // health.upstream: records queued in the outbox and records not queued (the outbox at its
    // bound, or unwritable); none when health.upstream is off.
    struct UpstreamHealthFigures {
        uint64_t queued = 0;
        uint64_t skipped = 0;
    };
    std::optional<UpstreamHealthFigures> health_upstream;
};

/// The health record as published: one line of JSON, keys sorted, invalid UTF-8 replaced.
std::string health_record_json(const HealthFigures& figures);

/// health's pipelines.P (JSON object text); inspect's pipelines.list[i] adds name and
/// ingest_ms. lag_ms holds 0s while the pipeline has seen no event.
std::string pipeline_report_json(const core::PipelineStats& stats, const DecodeCounters& decode);
/// health's and inspect's `outbox` (JSON object text); inspect adds seq_next and first_rows.
std::string outbox_report_json(const lmdb::OutboxStats& stats, int64_t now_wall_ms);
/// health's and inspect's `side` (JSON object text); inspect adds latest.
std::string side_report_json(const lmdb::SideStats& stats);

/// Damage found by the open (LogStats) or skipped by the engine's reader: health's `log`
/// reports the larger of the two counts, since the reader may cross what the open found.
bool log_damaged(const log::LogStats& log, const log::ReaderStats& reader);
/// Resident memory from /proc/self/status; 0 when it cannot be read.
uint64_t rss_kib();

/// The one-line status systemd shows: the first alarm, else whether upstream is reachable.
std::string status_line(const std::vector<std::string>& alarms, const mqtt::Forwarder* forwarder);

}  // namespace tidemark::firmware
