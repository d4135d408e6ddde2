// `tidemark status`'s view of a broker's retained health: the records (JSON text, as read off
// the broker) to typed figures, and those to a table for a person or one JSON document for
// scripts (field names in docs/OPERATIONS.md, "tidemark status"). Pure: no I/O, no clock (now
// is passed in); the JSON is parsed and written in status_view.cpp only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tidemark::firmware {

/// The default topics: a gateway's health.topic and a sink's, with their status topics beside
/// them (README, "Health"; docs/SINK.md).
inline constexpr const char* gateway_health_filter = "tidemark/+/health";
inline constexpr const char* sink_health_filter = "tidemark-sink/+/health";

/// The most nodes (gateways and sinks) one status shows: bounds what a broker with a fleet on
/// it makes us keep; reaching it is said in the report.
inline constexpr std::size_t status_nodes_max = 10'000;

struct PipelineStatus {
    std::string name;
    std::string version;  ///< empty: none runs live yet
    bool backfilling = false;
    std::optional<int64_t> watermark_lag_ms;  ///< null before the first event
    uint64_t events_in = 0, late_updated = 0, too_late = 0;
    uint64_t keys = 0, open_windows = 0, state_bytes = 0;
    std::optional<double> events_per_s;  ///< see GatewayStatus::rate_source
};

/// Where a node's events/s come from: none yet, two of its records (`records`, over
/// rate_span_ms), or a rate the record carries itself (`record`).
enum class RateSource { none, records, record };

struct GatewayStatus {
    std::string node;  ///< the record's `node`, else the topic's level before "health"
    std::string health_topic;
    std::optional<std::string> status;  ///< the retained `online`/`offline`, if any
    std::string error;                  ///< the record could not be read: the figures are empty
    int64_t time_ms = 0;                ///< when it was published (the gateway's clock)
    int64_t uptime_s = 0;
    bool ingest_connected = false;
    bool upstream_configured = false;
    bool link_up = false;
    std::string upstream_node;
    uint64_t outbox_rows = 0;
    std::optional<int64_t> outbox_oldest_age_ms;
    std::vector<std::string> alarms;
    std::vector<PipelineStatus> pipelines;  ///< by name
    RateSource rate_source = RateSource::none;
    int64_t rate_span_ms = 0;
};

struct SinkStatus {
    std::string client_id;
    std::string health_topic;
    std::optional<std::string> status;
    std::string error;
    int64_t time_ms = 0;
    int64_t uptime_s = 0;
    bool broker_link_up = false;
    bool postgres_up = false;
    uint64_t rows_written = 0, rejected = 0, spool_backlog_bytes = 0;
    std::vector<std::string> alarms;
};

struct StatusReport {
    std::string broker;                   ///< the address read
    int64_t now_ms = 0;                   ///< the reader's wall clock, for the records' ages
    std::vector<GatewayStatus> gateways;  ///< by node
    std::vector<SinkStatus> sinks;        ///< by client id
    /// What the reader could not show: status_nodes_max reached, oversized records.
    std::vector<std::string> notes;
};

/// The report from what the broker held (topic -> payload). Topics ending in "/health" are
/// records: a sink's when it has `client_id` and no `pipelines`, else a gateway's; their
/// status topics (mqtt::status_topic_for's rule: the last level "status") pair with them.
/// `previous` (the last report of a --watch, or null) gives events/s from two records: a
/// node whose record has not changed since keeps its rate.
StatusReport status_report(const std::map<std::string, std::string>& topics,
                           const StatusReport* previous, std::string broker, int64_t now_ms);

/// For a person: one line a node (status, uptime, record age, ingest, upstream link, outbox,
/// alarms) and a table of its pipelines; one line a sink. Aligned columns, no JSON.
std::string status_text(const StatusReport& report);

/// One JSON document (one line), field names as docs/OPERATIONS.md lists them.
std::string status_json(const StatusReport& report);

}  // namespace tidemark::firmware
