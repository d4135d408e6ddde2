// The sink's health record: retained JSON on sink.health.topic every interval (DESIGN.md
// section 10), rendered from the figures of its parts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "adapters/mqtt/ingest.h"
#include "firmware/sink/spool.h"
#include "firmware/sink/writer.h"

namespace tidemark::firmware::sink {

/// Everything one snapshot shows, gathered by the service without waiting on ingest's locks.
struct SinkFigures {
    int64_t time_ms = 0;
    int64_t uptime_s = 0;
    std::string client_id;
    std::string broker_uri;
    WriterStats writer;
    SpoolStats spool;
    uint64_t spool_max_bytes = 0;
    mqtt::IngestStats ingest;    ///< of the current Ingest plus the ones paused before it
    bool ingest_paused = false;  ///< by back-pressure (the spool past its bound)
    uint64_t pauses = 0;
    uint64_t rss_kib = 0;
    uint64_t rss_anon_kib = 0;
};

/// The alarms, while they last: postgres_down, broker_down, spool_full, spool_append_failed,
/// spool_mismatch, spool_poisoned.
std::vector<std::string> sink_alarms(const SinkFigures& f);

/// The health JSON: at least rows_written, rows_older, rejected, commit_lag_ms {p50, p99}
/// (receive to commit), watermark_lag_ms {p50, p99}, broker.link_up, postgres.up, alarms.
std::string sink_health_json(const SinkFigures& f);

/// RssAnon of this process in KiB (/proc/self/status), 0 when unknown.
uint64_t rss_anon_kib();

}  // namespace tidemark::firmware::sink
