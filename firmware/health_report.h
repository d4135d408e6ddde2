// The health report: the figures the service publishes on health.topic (README, "Health"),
// built section by section, so that `tidemark inspect` renders the sections it shares with
// health (a pipeline's figures, the outbox, the side output) from the same functions, under the
// same names.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

#include "adapters/lmdb/types.h"
#include "adapters/log/log_reader.h"
#include "adapters/log/log_writer.h"
#include "core/engine.h"
#include "firmware/alarms.h"
#include "firmware/engine_host.h"
#include "firmware/processor.h"

namespace tidemark::mqtt {
class Ingest;
class Forwarder;
}  // namespace tidemark::mqtt

namespace tidemark::firmware {

/// health's pipelines.P; inspect's pipelines.list[i] adds name and ingest_ms. lag_ms holds 0s
/// while the pipeline has seen no event.
nlohmann::json pipeline_report(const core::PipelineStats& stats, const DecodeCounters& decode);
/// health's and inspect's `outbox`; inspect adds seq_next and first_rows.
nlohmann::json outbox_report(const lmdb::OutboxStats& stats, int64_t now_wall_ms);
/// health's and inspect's `side`; inspect adds latest.
nlohmann::json side_report(const lmdb::SideStats& stats);

/// health's `log`. Damage found by the open (LogStats) or skipped by the engine's reader: the
/// larger of the two counts, since the reader may cross what the open found.
nlohmann::json log_report(const log::LogStats& log, const log::ReaderStats& reader,
                          uint64_t engine_offset);
bool log_damaged(const log::LogStats& log, const log::ReaderStats& reader);
/// health's `checkpoint`: age_ms is -1 before the first one.
nlohmann::json checkpoint_report(const CheckpointStats& stats, int64_t now_wall_ms);
/// health's `ingest`, but for the service's own counters (redeliveries_skipped, append_errors,
/// paused, malformed_records), which the caller adds. `ingest` is null while it is not started.
nlohmann::json ingest_report(const mqtt::Ingest* ingest);
/// health's `upstream`: {"configured": false} without a forwarder.
nlohmann::json upstream_report(const mqtt::Forwarder* forwarder);
/// health's `clock`.
nlohmann::json clock_report(const ClockStatus& clock);
/// Resident memory from /proc/self/status; 0 when it cannot be read.
uint64_t rss_kib();

/// The one-line status systemd shows: the first alarm, else whether upstream is reachable.
std::string status_line(const std::vector<std::string>& alarms, const mqtt::Forwarder* forwarder);

}  // namespace tidemark::firmware
