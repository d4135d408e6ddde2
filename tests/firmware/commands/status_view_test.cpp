// tidemark status's formatting (issue 29) over health records saved from real runs: a gateway
// on examples/demo.json with late and too-late events (two records 10 s apart) and a sink whose
// PostgreSQL is down. What a person reads: aligned columns, round units, no JSON; what a script
// reads: the documented field names.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "firmware/commands/command_status_view.h"
#include "firmware/human_units.h"

using namespace tidemark::firmware;
using nlohmann::json;

namespace {

// Published by `tidemark run` on examples/demo.json (scripts/demo's devices), read back
// off the broker with mosquitto_sub.
const std::string gateway_record =
    R"json({"alarms":[],"build":{"crc32c":"sse4.2","json_kernel":"icelake"},"checkpoint":{"age_ms":1634,"count":37,"duration_ms":7,"log_offset":3606},"clock":{"sync_service":"","synchronised":false,"trusted":true},"ingest":{"append_errors":0,"bytes":2256,"connected":true,"connections_cut":0,"duplicates_flagged":0,"last_error":"","malformed_records":0,"messages":55,"paused":false,"reconnects":0,"redeliveries_skipped":0,"retained_skipped":0,"retries":0},"log":{"bytes":3636,"damaged_bytes":0,"damaged_regions":0,"durable_offset":3626,"end_offset":3636,"engine_offset":3626,"first_offset":0,"oldest_ingest_ms":1796181337417,"poisoned":false,"records_appended":117,"segments":1,"tail_truncations":0},"map":{"side_rows_dropped":0,"size_bytes":268435456,"used_bytes":81920},"node":"demo-gw","outbox":{"bytes":0,"compacted":0,"dropped":0,"duplicates_skipped":0,"oldest_age_ms":null,"oldest_seq":0,"rows":0},"pipelines":{"activity_sessions":{"clamped":0,"emitted":{"final":3,"retract":0,"update":0},"events_in":55,"fields_missing":0,"forgotten_evicted":0,"keys":3,"keys_refused":0,"lag_ms":{"p50":6,"p99":44032,"p999":44032},"late_updated":0,"malformed":0,"open_windows":3,"partitions_active":3,"partitions_forgotten":3,"partitions_idle":0,"partitions_remembered":1,"side_outputs":0,"state_bytes":1680,"too_late":0,"too_late_partial":0,"version":"f08069e1","watermark_lag_ms":55100,"watermark_ms":1796181355385,"windows_refused":0},"temp_10s":{"clamped":0,"emitted":{"final":7,"retract":0,"update":9},"events_in":55,"fields_missing":0,"forgotten_evicted":0,"keys":2,"keys_refused":0,"lag_ms":{"p50":6,"p99":44032,"p999":44032},"late_updated":10,"malformed":0,"open_windows":4,"partitions_active":3,"partitions_forgotten":2,"partitions_idle":0,"partitions_remembered":0,"side_outputs":10,"state_bytes":1960,"too_late":10,"too_late_partial":0,"version":"6b033ab2","watermark_lag_ms":15803,"watermark_ms":1796181394682,"windows_refused":0},"temp_30s_every_10s":{"clamped":0,"emitted":{"final":14,"retract":18,"update":18},"events_in":55,"fields_missing":0,"forgotten_evicted":0,"keys":3,"keys_refused":0,"lag_ms":{"p50":6,"p99":44032,"p999":44032},"late_updated":20,"malformed":0,"open_windows":10,"partitions_active":3,"partitions_forgotten":1,"partitions_idle":0,"partitions_remembered":0,"side_outputs":0,"state_bytes":2328,"too_late":0,"too_late_partial":10,"version":"6a62ea43","watermark_lag_ms":15803,"watermark_ms":1796181394682,"windows_refused":0}},"rss_kib":18552,"side":{"bytes":0,"dropped":0,"rows":0},"time_ms":1796181411584,"upstream":{"acks":82,"failovers":0,"first_row_after_reconnect_ms":1,"inflight":0,"last_error":"","last_outage_ms":null,"link_up":true,"node":"tcp://127.0.0.1:37795","offline_since_ms":0,"reconnects":0,"rejected":0,"sends":82},"uptime_s":74})json";

// Published by `tidemark run` on examples/demo.json (scripts/demo's devices), read back
// off the broker with mosquitto_sub.
const std::string gateway_record_later =
    R"json({"alarms":[],"build":{"crc32c":"sse4.2","json_kernel":"icelake"},"checkpoint":{"age_ms":1672,"count":42,"duration_ms":1,"log_offset":4217},"clock":{"sync_service":"","synchronised":false,"trusted":true},"ingest":{"append_errors":0,"bytes":2667,"connected":true,"connections_cut":0,"duplicates_flagged":0,"last_error":"","malformed_records":0,"messages":65,"paused":false,"reconnects":0,"redeliveries_skipped":0,"retained_skipped":0,"retries":0},"log":{"bytes":4237,"damaged_bytes":0,"damaged_regions":0,"durable_offset":4237,"end_offset":4237,"engine_offset":4237,"first_offset":0,"oldest_ingest_ms":1796181337417,"poisoned":false,"records_appended":136,"segments":1,"tail_truncations":0},"map":{"side_rows_dropped":0,"size_bytes":268435456,"used_bytes":81920},"node":"demo-gw","outbox":{"bytes":0,"compacted":0,"dropped":0,"duplicates_skipped":0,"oldest_age_ms":null,"oldest_seq":0,"rows":0},"pipelines":{"activity_sessions":{"clamped":0,"emitted":{"final":6,"retract":0,"update":0},"events_in":65,"fields_missing":0,"forgotten_evicted":0,"keys":3,"keys_refused":0,"lag_ms":{"p50":6,"p99":44032,"p999":44032},"late_updated":0,"malformed":0,"open_windows":3,"partitions_active":1,"partitions_forgotten":3,"partitions_idle":2,"partitions_remembered":1,"side_outputs":0,"state_bytes":1680,"too_late":0,"too_late_partial":0,"version":"f08069e1","watermark_lag_ms":56012,"watermark_ms":1796181364790,"windows_refused":0},"temp_10s":{"clamped":0,"emitted":{"final":9,"retract":0,"update":9},"events_in":65,"fields_missing":0,"forgotten_evicted":0,"keys":1,"keys_refused":0,"lag_ms":{"p50":6,"p99":44032,"p999":44032},"late_updated":10,"malformed":0,"open_windows":5,"partitions_active":1,"partitions_forgotten":4,"partitions_idle":0,"partitions_remembered":0,"side_outputs":10,"state_bytes":1496,"too_late":10,"too_late_partial":0,"version":"6b033ab2","watermark_lag_ms":5023,"watermark_ms":1796181415779,"windows_refused":0},"temp_30s_every_10s":{"clamped":0,"emitted":{"final":18,"retract":18,"update":18},"events_in":65,"fields_missing":0,"forgotten_evicted":0,"keys":2,"keys_refused":0,"lag_ms":{"p50":6,"p99":44032,"p999":44032},"late_updated":20,"malformed":0,"open_windows":8,"partitions_active":1,"partitions_forgotten":2,"partitions_idle":1,"partitions_remembered":0,"side_outputs":0,"state_bytes":1680,"too_late":0,"too_late_partial":10,"version":"6a62ea43","watermark_lag_ms":5023,"watermark_ms":1796181415779,"windows_refused":0}},"rss_kib":18620,"side":{"bytes":0,"dropped":0,"rows":0},"time_ms":1796181421674,"upstream":{"acks":91,"failovers":0,"first_row_after_reconnect_ms":1,"inflight":0,"last_error":"","last_outage_ms":null,"link_up":true,"node":"tcp://127.0.0.1:37795","offline_since_ms":0,"reconnects":0,"rejected":0,"sends":91},"uptime_s":84})json";

// `tidemark sink` with PostgreSQL refused on port 1: a real postgres_down alarm, tab included.
const std::string sink_record =
    R"json({"time_ms":1796181412735,"uptime_s":16,"client_id":"demo-sink","alarms":["postgres_down: cannot connect to PostgreSQL: connection to server at \"127.0.0.1\", port 1 failed: Connection refused \tIs the server running on that host and accepting TCP/IP connections?"],"rows_written":0,"rows_older":0,"rejected":0,"side_rows":0,"versions":{"changed":0,"older":0,"removed":0,"views_updated":0},"commit_lag_ms":{"p50":null,"p99":null,"count":0,"from":"receive"},"watermark_lag_ms":{"p50":null,"p99":null,"count":0},"commits":{"count":0,"records":0,"isolated":0,"last_records":0,"last_duration_ms":0,"last_ms":null},"broker":{"uri":"tcp://127.0.0.1:37795","link_up":true,"paused":false,"pauses":0,"messages":21,"duplicates_flagged":0,"reconnects":0,"node":"tcp://127.0.0.1:37795","failovers":0,"last_error":null},"postgres":{"up":false,"connects":0,"failures":7,"schema_version":0,"server_version":0,"last_error":"cannot connect to PostgreSQL: connection to server at \"127.0.0.1\", port 1 failed: Connection refused \tIs the server running on that host and accepting TCP/IP connections?","view_problems":[]},"spool":{"backlog_bytes":7708,"max_bytes":268435456,"disk_bytes":7708,"segments":1,"end_offset":7708,"committed_offset":0,"appended":21,"oversized":0,"redeliveries_skipped":0,"held":0,"last_error":null},"rss_kib":16628,"rss_anon_kib":3036})json";

// The broker as the reader returns it: health, status, and topics that are neither.
std::map<std::string, std::string> broker_topics(const std::string& gateway) {
    return {{"tidemark/demo-gw/health", gateway},
            {"tidemark/demo-gw/status", "online"},
            {"tidemark/demo-gw/temp_10s/version", R"({"pipeline":"temp_10s"})"},
            {"tidemark/broken/health", "not json at all"},
            {"tidemark-sink/demo-sink/health", sink_record},
            {"tidemark-sink/demo-sink/status", "offline"}};
}

const int64_t now_ms = 1796181413000;  // 1.4 s after gateway_record

const GatewayStatus& gateway(const StatusReport& r, const std::string& node) {
    for (const GatewayStatus& g : r.gateways)
        if (g.node == node) return g;
    FAIL("no gateway " << node);
    throw;
}

const PipelineStatus& pipeline(const GatewayStatus& g, const std::string& name) {
    for (const PipelineStatus& p : g.pipelines)
        if (p.name == name) return p;
    FAIL("no pipeline " << name);
    throw;
}

std::vector<std::string> lines_of(const std::string& text) {
    std::vector<std::string> out;
    size_t start = 0;
    for (size_t nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1)
        out.push_back(text.substr(start, nl - start));
    return out;
}

}  // namespace

TEST_CASE("status reads a gateway's and a sink's real health records and their status") {
    const StatusReport r =
        status_report(broker_topics(gateway_record), nullptr, "tcp://127.0.0.1:1883", now_ms);
    REQUIRE(r.gateways.size() == 2);
    CHECK(r.gateways[0].node == "broken");  // by node name
    CHECK_FALSE(r.gateways[0].error.empty());
    const GatewayStatus& g = gateway(r, "demo-gw");
    CHECK(g.error.empty());
    CHECK(g.status == "online");
    CHECK(g.ingest_connected);
    CHECK(g.upstream_configured);
    CHECK(g.link_up);
    CHECK(g.outbox_rows == 0);
    CHECK_FALSE(g.outbox_oldest_age_ms);
    CHECK(g.alarms.empty());
    REQUIRE(g.pipelines.size() == 3);
    CHECK(g.pipelines[0].name == "activity_sessions");
    const PipelineStatus& p = pipeline(g, "temp_10s");
    CHECK(p.events_in == 55);
    CHECK(p.too_late == 10);
    CHECK(p.late_updated == 10);
    CHECK(p.watermark_lag_ms == 15803);
    CHECK(p.state_bytes == 1960);
    CHECK(p.version == "6b033ab2");
    CHECK_FALSE(p.events_per_s);  // one record says nothing about a rate
    CHECK(g.rate_source == RateSource::none);

    REQUIRE(r.sinks.size() == 1);
    CHECK(r.sinks[0].client_id == "demo-sink");
    CHECK(r.sinks[0].status == "offline");
    CHECK(r.sinks[0].broker_link_up);
    CHECK_FALSE(r.sinks[0].postgres_up);
    CHECK(r.sinks[0].spool_backlog_bytes == 7708);
    REQUIRE(r.sinks[0].alarms.size() == 1);
}

TEST_CASE("status prints aligned tables in round units, without JSON") {
    const StatusReport r =
        status_report(broker_topics(gateway_record), nullptr, "tcp://127.0.0.1:1883", now_ms);
    const std::string text = status_text(r);
    INFO(text);
    CHECK(text.find('{') == std::string::npos);
    CHECK(text.find("\":") == std::string::npos);  // no JSON key (the alarm quotes libpq)
    CHECK(text.find('\t') == std::string::npos);   // the alarm's tab is gone
    CHECK(text.find("2 gateways, 1 sink") != std::string::npos);
    CHECK(text.find("postgres_down: cannot connect to PostgreSQL") != std::string::npos);
    CHECK(text.find("from two records; this is one") != std::string::npos);

    // Each column of the pipelines' table: a right-aligned value ends where its header ends.
    const std::vector<std::string> lines = lines_of(text);
    const auto header = std::ranges::find_if(
        lines, [](const std::string& l) { return l.find("WATERMARK LAG") != std::string::npos; });
    REQUIRE(header != lines.end());
    const auto row = std::ranges::find_if(
        lines, [](const std::string& l) { return l.starts_with("  temp_10s "); });
    REQUIRE(row != lines.end());
    CHECK(row->size() == header->size());
    for (const std::string column : {"WATERMARK LAG", "EVENTS", "TOO LATE", "STATE"}) {
        const size_t end = header->find(column + (column == "EVENTS" ? "  " : "")) + column.size();
        CHECK((*row)[end - 1] != ' ');
        CHECK((end == row->size() || (*row)[end] == ' '));
    }
    CHECK(row->find(" 15s ") != std::string::npos);       // watermark lag 15803 ms
    CHECK(row->find(" 10 (18%) ") != std::string::npos);  // too late: count and share
    CHECK(row->ends_with(" 1.91 KiB"));                   // 1960 state bytes

    const auto node =
        std::ranges::find_if(lines, [](const std::string& l) { return l.starts_with("demo-gw "); });
    REQUIRE(node != lines.end());
    CHECK(node->find(" online ") != std::string::npos);
    CHECK(node->find(" 1.4s ") != std::string::npos);  // the record's age
    CHECK(node->find(" connected ") != std::string::npos);
    CHECK(node->find(" up ") != std::string::npos);
    CHECK(node->find(" 0 rows ") != std::string::npos);
}

TEST_CASE("status gives events/s from two records and keeps it until the next one") {
    const auto topics = broker_topics(gateway_record);
    const StatusReport first = status_report(topics, nullptr, "b", now_ms);
    const StatusReport second =
        status_report(broker_topics(gateway_record_later), &first, "b", now_ms + 10'000);
    const GatewayStatus& g = gateway(second, "demo-gw");
    CHECK(g.rate_source == RateSource::records);
    CHECK(g.rate_span_ms == 10'090);
    REQUIRE(pipeline(g, "temp_10s").events_per_s);
    CHECK(*pipeline(g, "temp_10s").events_per_s == Approx(10 / 10.09));
    CHECK(status_text(second).find("between two records 10s apart") != std::string::npos);

    // A redraw before the gateway's next record: the same rate, not none and not zero.
    const StatusReport third =
        status_report(broker_topics(gateway_record_later), &second, "b", now_ms + 12'000);
    REQUIRE(pipeline(gateway(third, "demo-gw"), "temp_10s").events_per_s);
    CHECK(*pipeline(gateway(third, "demo-gw"), "temp_10s").events_per_s == Approx(10 / 10.09));
}

TEST_CASE("status --json is one document with the documented field names") {
    const StatusReport first =
        status_report(broker_topics(gateway_record), nullptr, "tcp://127.0.0.1:1883", now_ms);
    const StatusReport r = status_report(broker_topics(gateway_record_later), &first,
                                         "tcp://127.0.0.1:1883", now_ms + 10'000);
    const std::string text = status_json(r);
    CHECK(text.find('\n') == std::string::npos);
    const json doc = json::parse(text);
    CHECK(doc["broker"] == "tcp://127.0.0.1:1883");
    CHECK(doc["time_ms"] == now_ms + 10'000);
    REQUIRE(doc["nodes"].size() == 2);
    const json& n = doc["nodes"][1];
    CHECK(n["node"] == "demo-gw");
    CHECK(n["status"] == "online");
    CHECK(n["health_topic"] == "tidemark/demo-gw/health");
    CHECK(n["uptime_s"].is_number());
    CHECK(n["age_ms"].is_number());
    CHECK(n["ingest_connected"] == true);
    CHECK(n["upstream"]["link_up"] == true);
    CHECK(n["upstream"]["configured"] == true);
    CHECK(n["outbox"]["rows"] == 0);
    CHECK(n["outbox"]["oldest_age_ms"].is_null());
    CHECK(n["alarms"].is_array());
    CHECK(n["rate"]["source"] == "records");
    CHECK(n["rate"]["span_ms"] == 10'090);
    const json& p = n["pipelines"][1];
    CHECK(p["name"] == "temp_10s");
    CHECK(p["events_in"] == 65);
    CHECK(p["too_late"] == 10);
    CHECK(p["too_late_share"].get<double>() == Approx(10.0 / 65));
    for (const char* key : {"version", "backfilling", "watermark_lag_ms", "events_per_s",
                            "late_updated", "keys", "open_windows", "state_bytes"})
        CHECK(p.contains(key));
    CHECK(doc["nodes"][0]["error"].is_string());
    const json& s = doc["sinks"][0];
    CHECK(s["client_id"] == "demo-sink");
    CHECK(s["status"] == "offline");
    CHECK(s["postgres_up"] == false);
    CHECK(s["broker_link_up"] == true);
    CHECK(s["spool_backlog_bytes"] == 7708);
    for (const char* key :
         {"health_topic", "time_ms", "age_ms", "uptime_s", "rows_written", "rejected", "alarms"})
        CHECK(s.contains(key));
    CHECK(doc["notes"].empty());
}

TEST_CASE("status shows at most status_nodes_max nodes and says so") {
    std::map<std::string, std::string> topics;
    for (size_t i = 0; i <= status_nodes_max; ++i)
        topics["tidemark/gw-" + std::to_string(i) + "/health"] =
            R"({"node":"gw-)" + std::to_string(i) + R"(","pipelines":{}})";
    const StatusReport r = status_report(topics, nullptr, "b", now_ms);
    CHECK(r.gateways.size() == status_nodes_max);
    REQUIRE(r.notes.size() == 1);
    CHECK(r.notes[0].find("1 more not shown") != std::string::npos);
}

TEST_CASE("human units are round") {
    CHECK(human_duration(0) == "0s");
    CHECK(human_duration(850) == "850ms");
    CHECK(human_duration(2'140) == "2.1s");
    CHECK(human_duration(45'999) == "45s");
    CHECK(human_duration(192'000) == "3m 12s");
    CHECK(human_duration(3'600'000) == "1h");
    CHECK(human_duration(7'500'000) == "2h 5m");
    CHECK(human_duration(3 * 86'400'000LL + 4 * 3'600'000LL) == "3d 4h");
    CHECK(human_duration(-1'500) == "-1.5s");
    CHECK(human_bytes(0) == "0 B");
    CHECK(human_bytes(1023) == "1023 B");
    CHECK(human_bytes(1960) == "1.91 KiB");
    CHECK(human_bytes(256ULL << 20) == "256 MiB");
    CHECK(human_bytes(3ULL << 29) == "1.5 GiB");
}
