#include "firmware/commands/command_status_view.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "adapters/mqtt/health.h"

namespace tidemark::firmware {

using nlohmann::json;

namespace {

constexpr std::string_view health_suffix = "/health";

// A field of a record that may be absent, null or of another type (an older or newer
// tidemark): its default then, never an exception.
template <typename T>
T get_or(const json& j, const char* key, T fallback) {
    if (!j.is_object()) return fallback;
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) return fallback;
    if constexpr (std::is_same_v<T, bool>) {
        return it->is_boolean() ? it->get<bool>() : fallback;
    } else if constexpr (std::is_arithmetic_v<T>) {
        return it->is_number() ? it->get<T>() : fallback;
    } else {
        return it->is_string() ? it->get<T>() : fallback;
    }
}

const json& member(const json& j, const char* key) {
    static const json null;
    if (!j.is_object()) return null;
    const auto it = j.find(key);
    return it == j.end() ? null : *it;
}

template <typename T>
std::optional<T> optional_number(const json& j, const char* key) {
    const json& v = member(j, key);
    if (!v.is_number()) return std::nullopt;
    return v.get<T>();
}

std::vector<std::string> strings(const json& j) {
    std::vector<std::string> out;
    if (!j.is_array()) return out;
    for (const json& s : j)
        if (s.is_string()) out.push_back(s.get<std::string>());
    return out;
}

// "tidemark/gw-01/health" -> "gw-01": the level before the last, for a record without a name.
std::string name_from_topic(const std::string& topic) {
    const std::string_view t(topic);
    const std::string_view head = t.substr(0, t.size() - health_suffix.size());
    const size_t slash = head.rfind('/');
    return std::string(slash == std::string_view::npos ? head : head.substr(slash + 1));
}

std::optional<std::string> status_of(const std::map<std::string, std::string>& topics,
                                     const std::string& health_topic) {
    const auto it = topics.find(mqtt::status_topic_for(health_topic));
    if (it == topics.end()) return std::nullopt;
    return it->second;
}

GatewayStatus gateway_status(const std::string& topic, const json& h) {
    GatewayStatus g;
    g.health_topic = topic;
    g.node = get_or<std::string>(h, "node", name_from_topic(topic));
    g.time_ms = get_or<int64_t>(h, "time_ms", 0);
    g.uptime_s = get_or<int64_t>(h, "uptime_s", 0);
    g.ingest_connected = get_or<bool>(member(h, "ingest"), "connected", false);
    const json& up = member(h, "upstream");
    g.upstream_configured = get_or<bool>(up, "configured", up.contains("link_up"));
    g.link_up = get_or<bool>(up, "link_up", false);
    g.upstream_node = get_or<std::string>(up, "node", "");
    const json& outbox = member(h, "outbox");
    g.outbox_rows = get_or<uint64_t>(outbox, "rows", 0);
    g.outbox_oldest_age_ms = optional_number<int64_t>(outbox, "oldest_age_ms");
    g.alarms = strings(member(h, "alarms"));
    const json& pipelines = member(h, "pipelines");
    if (pipelines.is_object()) {
        for (const auto& [name, p] : pipelines.items()) {  // sorted by name
            PipelineStatus s;
            s.name = name;
            s.version = get_or<std::string>(p, "version", "");
            s.backfilling = get_or<std::string>(member(p, "backfill"), "state", "") == "running";
            s.watermark_lag_ms = optional_number<int64_t>(p, "watermark_lag_ms");
            s.events_in = get_or<uint64_t>(p, "events_in", 0);
            s.late_updated = get_or<uint64_t>(p, "late_updated", 0);
            s.too_late = get_or<uint64_t>(p, "too_late", 0);
            s.keys = get_or<uint64_t>(p, "keys", 0);
            s.open_windows = get_or<uint64_t>(p, "open_windows", 0);
            s.state_bytes = get_or<uint64_t>(p, "state_bytes", 0);
            // A record that carries its own rate (none does yet) is taken at its word.
            s.events_per_s = optional_number<double>(p, "events_per_s");
            if (s.events_per_s) g.rate_source = RateSource::record;
            g.pipelines.push_back(std::move(s));
        }
    }
    return g;
}

SinkStatus sink_status(const std::string& topic, const json& h) {
    SinkStatus s;
    s.health_topic = topic;
    s.client_id = get_or<std::string>(h, "client_id", name_from_topic(topic));
    s.time_ms = get_or<int64_t>(h, "time_ms", 0);
    s.uptime_s = get_or<int64_t>(h, "uptime_s", 0);
    s.broker_link_up = get_or<bool>(member(h, "broker"), "link_up", false);
    s.postgres_up = get_or<bool>(member(h, "postgres"), "up", false);
    s.rows_written = get_or<uint64_t>(h, "rows_written", 0);
    s.rejected = get_or<uint64_t>(h, "rejected", 0);
    s.spool_backlog_bytes = get_or<uint64_t>(member(h, "spool"), "backlog_bytes", 0);
    s.alarms = strings(member(h, "alarms"));
    return s;
}

// events/s from the previous record of the same node: counters kept with the state only grow,
// so a pipeline whose count went down (its state dropped) has no rate this time.
void rates_from(const GatewayStatus& before, GatewayStatus& now) {
    if (now.rate_source == RateSource::record) return;
    if (before.time_ms == now.time_ms) {  // no new record yet: what the last two said
        now.rate_source = before.rate_source;
        now.rate_span_ms = before.rate_span_ms;
        for (PipelineStatus& p : now.pipelines)
            for (const PipelineStatus& b : before.pipelines)
                if (b.name == p.name) p.events_per_s = b.events_per_s;
        return;
    }
    if (before.time_ms > now.time_ms) return;  // the gateway's clock stepped back
    now.rate_source = RateSource::records;
    now.rate_span_ms = now.time_ms - before.time_ms;
    const double span_s = static_cast<double>(now.rate_span_ms) / 1000;
    for (PipelineStatus& p : now.pipelines)
        for (const PipelineStatus& b : before.pipelines)
            if (b.name == p.name && p.events_in >= b.events_in)
                p.events_per_s = static_cast<double>(p.events_in - b.events_in) / span_s;
}

json optional_json(const std::optional<std::string>& v) {
    return v ? json(*v) : json(nullptr);
}

const char* rate_source_name(RateSource s) {
    switch (s) {
        case RateSource::none:
            return nullptr;
        case RateSource::records:
            return "records";
        case RateSource::record:
            return "record";
    }
    return nullptr;
}

}  // namespace

StatusReport status_report(const std::map<std::string, std::string>& topics,
                           const StatusReport* previous, std::string broker, int64_t now_ms) {
    StatusReport r;
    r.broker = std::move(broker);
    r.now_ms = now_ms;
    size_t skipped = 0;
    for (const auto& [topic, payload] : topics) {
        if (!topic.ends_with(health_suffix)) continue;
        if (r.gateways.size() + r.sinks.size() >= status_nodes_max) {
            ++skipped;
            continue;
        }
        const json h = json::parse(payload, nullptr, /*allow_exceptions=*/false);
        const bool is_sink = h.is_object() && h.contains("client_id") && !h.contains("pipelines");
        if (is_sink) {
            SinkStatus s = sink_status(topic, h);
            s.status = status_of(topics, topic);
            r.sinks.push_back(std::move(s));
            continue;
        }
        GatewayStatus g = h.is_object() ? gateway_status(topic, h) : GatewayStatus{};
        if (!h.is_object()) {
            g.health_topic = topic;
            g.node = name_from_topic(topic);
            g.error = "the record on " + topic + " is not a JSON object (" +
                      std::to_string(payload.size()) + " bytes)";
        }
        g.status = status_of(topics, topic);
        if (previous)
            for (const GatewayStatus& before : previous->gateways)
                if (before.health_topic == g.health_topic && before.error.empty() &&
                    g.error.empty())
                    rates_from(before, g);
        r.gateways.push_back(std::move(g));
    }
    if (skipped > 0)
        r.notes.push_back("showing the first " + std::to_string(status_nodes_max) +
                          " nodes by topic; " + std::to_string(skipped) +
                          " more not shown (use --node)");
    std::ranges::stable_sort(r.gateways, {}, &GatewayStatus::node);
    std::ranges::stable_sort(r.sinks, {}, &SinkStatus::client_id);
    return r;
}

std::string status_json(const StatusReport& r) {
    json gateways = json::array();
    for (const GatewayStatus& g : r.gateways) {
        json pipelines = json::array();
        for (const PipelineStatus& p : g.pipelines) {
            const double share =
                p.events_in ? static_cast<double>(p.too_late) / static_cast<double>(p.events_in)
                            : 0.0;
            pipelines.push_back(
                {{"name", p.name},
                 {"version", p.version.empty() ? json(nullptr) : json(p.version)},
                 {"backfilling", p.backfilling},
                 {"watermark_lag_ms", p.watermark_lag_ms ? json(*p.watermark_lag_ms) : json()},
                 {"events_in", p.events_in},
                 {"events_per_s", p.events_per_s ? json(*p.events_per_s) : json()},
                 {"late_updated", p.late_updated},
                 {"too_late", p.too_late},
                 {"too_late_share", share},
                 {"keys", p.keys},
                 {"open_windows", p.open_windows},
                 {"state_bytes", p.state_bytes}});
        }
        const char* source = rate_source_name(g.rate_source);
        json n = {
            {"node", g.node},
            {"health_topic", g.health_topic},
            {"status", optional_json(g.status)},
            {"time_ms", g.time_ms},
            {"age_ms", r.now_ms - g.time_ms},
            {"uptime_s", g.uptime_s},
            {"ingest_connected", g.ingest_connected},
            {"upstream",
             {{"configured", g.upstream_configured},
              {"link_up", g.link_up},
              {"node", g.upstream_node}}},
            {"outbox",
             {{"rows", g.outbox_rows},
              {"oldest_age_ms", g.outbox_oldest_age_ms ? json(*g.outbox_oldest_age_ms) : json()}}},
            {"alarms", g.alarms},
            {"rate",
             {{"source", source ? json(source) : json()},
              {"span_ms", g.rate_source == RateSource::records ? json(g.rate_span_ms) : json()}}},
            {"pipelines", std::move(pipelines)}};
        if (!g.error.empty()) n["error"] = g.error;
        gateways.push_back(std::move(n));
    }
    json sinks = json::array();
    for (const SinkStatus& s : r.sinks) {
        sinks.push_back({{"client_id", s.client_id},
                         {"health_topic", s.health_topic},
                         {"status", optional_json(s.status)},
                         {"time_ms", s.time_ms},
                         {"age_ms", r.now_ms - s.time_ms},
                         {"uptime_s", s.uptime_s},
                         {"broker_link_up", s.broker_link_up},
                         {"postgres_up", s.postgres_up},
                         {"rows_written", s.rows_written},
                         {"rejected", s.rejected},
                         {"spool_backlog_bytes", s.spool_backlog_bytes},
                         {"alarms", s.alarms}});
    }
    const json doc = {{"broker", r.broker},
                      {"time_ms", r.now_ms},
                      {"nodes", std::move(gateways)},
                      {"sinks", std::move(sinks)},
                      {"notes", r.notes}};
    return doc.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace tidemark::firmware
