// The sink's config file: {"sink": {source, postgres, health, spool, batch, log_level}}, read
// through checker.h like the appliance's, with the broker pieces of connections.cpp.
#include "adapters/config/sink_config.h"

#include <filesystem>

#include "adapters/config/checker.h"

namespace tidemark::config {

using namespace detail;

namespace {

constexpr size_t topics_max = 64;  // mqtt::Ingest's bound on filters
constexpr uint64_t spool_bytes_min = 16ULL << 20;
constexpr uint64_t spool_bytes_limit = 1ULL << 40;
constexpr uint64_t batch_rows_limit = 100'000;
constexpr int64_t batch_delay_ms_limit = 10'000;

// "$share/GROUP/FILTER" (MQTT 5 shared subscriptions; mosquitto takes them from 3.1.1 clients
// too): the group is one level without wildcards.
std::optional<std::string> subscription_problem(std::string_view filter) {
    if (filter.starts_with("$share/")) {
        const std::string_view rest = filter.substr(7);
        const size_t slash = rest.find('/');
        const std::string_view group = rest.substr(0, slash);
        if (slash == std::string_view::npos || group.empty() ||
            group.find_first_of("+#") != std::string_view::npos)
            return "a shared subscription is \"$share/GROUP/FILTER\", GROUP a name without "
                   "wildcards";
        return topic_filter_problem(rest.substr(slash + 1));
    }
    return topic_filter_problem(filter);
}

// Whether MQTT filter `filter` matches `topic` ("$share/G/" removed first).
bool matches(std::string_view filter, std::string_view topic) {
    if (filter.starts_with("$share/")) {
        const size_t slash = filter.find('/', 7);
        filter = slash == std::string_view::npos ? std::string_view() : filter.substr(slash + 1);
    }
    while (true) {
        const size_t f_end = filter.find('/'), t_end = topic.find('/');
        const std::string_view f = filter.substr(0, f_end), t = topic.substr(0, t_end);
        if (f == "#") return true;
        if (f != "+" && f != t) return false;
        if (f_end == std::string_view::npos || t_end == std::string_view::npos)
            return f_end == t_end || filter.substr(f_end + 1) == "#";
        filter.remove_prefix(f_end + 1);
        topic.remove_prefix(t_end + 1);
    }
}

// "password=..." in key-value form, or "user:secret@" in a postgresql:// URI.
bool conninfo_has_password(std::string_view conninfo) {
    for (size_t at = conninfo.find("password"); at != std::string_view::npos;
         at = conninfo.find("password", at + 1)) {
        if (at > 0 && conninfo[at - 1] != ' ' && conninfo[at - 1] != '?' && conninfo[at - 1] != '&')
            continue;
        const size_t next = conninfo.find_first_not_of(' ', at + 8);
        if (next != std::string_view::npos && conninfo[next] == '=') return true;
    }
    if (const size_t scheme = conninfo.find("://"); scheme != std::string_view::npos) {
        const std::string_view authority =
            conninfo.substr(scheme + 3, conninfo.find('/', scheme + 3) - scheme - 3);
        const size_t at = authority.rfind('@');
        if (at != std::string_view::npos &&
            authority.substr(0, at).find(':') != std::string_view::npos)
            return true;
    }
    return false;
}

bool is_identifier(std::string_view s) {
    if (s.empty() || s.size() > 63 || (s[0] >= '0' && s[0] <= '9')) return false;
    for (const char c : s)
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
    return true;
}

void read_sink_source(Checker& c, const Section& sink, SinkSourceConfig& source) {
    Section s = c.section(*sink, sink.pointer, "source",
                          R"({"uri": "tcp://127.0.0.1:1883", "client_id": "tidemark-sink-1"})",
                          {"uri", "client_id", "topics", "username", "password_file", "tls",
                           "max_payload", "protocol"},
                          R"(the upstream broker, e.g. {"uri": "tcp://127.0.0.1:1883"})");
    if (!s) return;
    read_uri(c, s,
             "the upstream broker, e.g. \"tcp://127.0.0.1:1883\", or a cluster's nodes, "
             "[\"tcp://a:1883\", \"tcp://b:1883\"]",
             source.uri, source.uris, source.endpoints);
    if (!source.endpoints.empty()) source.endpoint = source.endpoints.front();
    read_client_id(c, s, source.client_id);
    read_credentials(c, s, source.username, source.password);
    source.tls = read_tls(c, s, source.uris);
    c.read_choice(*s, s.pointer, "protocol", source.protocol,
                  {{"5", SinkProtocol::v5}, {"3.1.1", SinkProtocol::v3_1_1}});
    c.read_size(*s, s.pointer, "max_payload", source.max_payload_bytes, 1024, 256ULL << 20);
    const Json* topics = Checker::member(*s, "topics");
    if (!topics) return;
    const std::string p = child(s.pointer, "topics");
    if (!topics->is_array() || topics->empty() || topics->size() > topics_max) {
        c.error(p, "expected a list of 1 to " + std::to_string(topics_max) +
                       " topic filters such as [\"tidemark/#\"], found " +
                       (topics->is_array() ? std::to_string(topics->size()) + " of them"
                                           : type_phrase(*topics)));
        return;
    }
    source.topics.clear();
    for (size_t i = 0; i < topics->size(); ++i) {
        const Json& t = (*topics)[i];
        if (!t.is_string()) {
            c.error(child(p, i), "expected a topic filter, found " + type_phrase(t));
            continue;
        }
        const std::string filter = t.get<std::string>();
        if (auto problem = subscription_problem(filter))
            c.error(child(p, i), in_quotes(filter) + ": " + *problem);
        else
            source.topics.push_back(filter);
    }
}

void read_sink_postgres(Checker& c, const Section& sink, SinkPostgresConfig& pg) {
    Section s = c.section(
        *sink, sink.pointer, "postgres",
        R"({"conninfo": "host=127.0.0.1 port=5432 dbname=telemetry user=tidemark"})",
        {"conninfo", "password_file", "schema"},
        R"(the database, e.g. {"conninfo": "host=127.0.0.1 dbname=telemetry user=tidemark"})");
    if (!s) return;
    if (c.read_string(*s, s.pointer, "conninfo", pg.conninfo,
                      "libpq's connection string, e.g. \"host=127.0.0.1 dbname=telemetry "
                      "user=tidemark\"") &&
        pg.conninfo.empty())
        c.error(s.pointer + "/conninfo", "a connection string cannot be empty");
    if (conninfo_has_password(pg.conninfo))
        c.error(s.pointer + "/conninfo",
                "passwords are not accepted in the config: write it to a file only the sink's "
                "user can read and name that file in \"password_file\"");
    read_password_file(c, s, pg.password);
    if (c.read_string(*s, s.pointer, "schema", pg.schema) && !is_identifier(pg.schema))
        c.error(s.pointer + "/schema",
                in_quotes(pg.schema) +
                    " is not a schema name: use 1 to 63 lower-case letters, digits and '_', "
                    "not starting with a digit");
}

void read_sink_health(Checker& c, const Section& sink, SinkHealthConfig& health) {
    Section s = c.section(*sink, sink.pointer, "health",
                          R"({"topic": "tidemark-sink/{client_id}/health", "interval": "10s"})",
                          {"topic", "interval"});
    if (!s) return;
    read_topic_template(c, s, "topic", health.topic, {"client_id"});
    c.read_duration(*s, s.pointer, "interval", health.interval_ms, true);
}

void read_sink_spool(Checker& c, const Section& sink, SinkSpoolConfig& spool) {
    Section s = c.section(*sink, sink.pointer, "spool",
                          R"({"dir": "/var/lib/tidemark-sink/spool", "max_bytes": "256MiB"})",
                          {"dir", "max_bytes", "fsync", "fsync_interval"});
    if (!s) return;
    if (c.read_string(*s, s.pointer, "dir", spool.dir)) {
        if (spool.dir.empty())
            c.error(s.pointer + "/dir", "the spool directory cannot be empty");
        else
            spool.dir = c.resolve_path(spool.dir);
    }
    c.read_size(*s, s.pointer, "max_bytes", spool.max_bytes, spool_bytes_min, spool_bytes_limit);
    c.read_choice(*s, s.pointer, "fsync", spool.fsync,
                  {{"always", FsyncPolicy::always},
                   {"interval", FsyncPolicy::interval},
                   {"never", FsyncPolicy::never}});
    c.read_duration(*s, s.pointer, "fsync_interval", spool.fsync_interval_ms, true);
}

void read_sink_batch(Checker& c, const Section& sink, SinkBatchConfig& batch) {
    Section s = c.section(*sink, sink.pointer, "batch",
                          R"({"max_rows": 1000, "max_delay": "50ms"})", {"max_rows", "max_delay"});
    if (!s) return;
    c.read_uint(*s, s.pointer, "max_rows", batch.max_rows, 1, batch_rows_limit);
    if (c.read_duration(*s, s.pointer, "max_delay", batch.max_delay_ms, false) &&
        batch.max_delay_ms > batch_delay_ms_limit)
        c.error(s.pointer + "/max_delay",
                "at most 10s: every message waits up to this long before its commit");
}

}  // namespace

std::string SinkConfig::health_topic() const {
    std::string out = health.topic;
    const std::string placeholder = "{client_id}";
    for (size_t at = out.find(placeholder); at != std::string::npos;
         at = out.find(placeholder, at + source.client_id.size()))
        out.replace(at, placeholder.size(), source.client_id);
    return out;
}

SinkConfigResult parse_sink_config(std::string_view text, const std::string& base_dir) {
    Checker c(base_dir);
    auto parsed = parse_document(text, c.errors);
    if (!parsed) return std::unexpected(std::move(c.errors));
    const Json& root = *parsed;
    if (!root.is_object()) {
        c.error("",
                "a sink config must be a JSON object {\"sink\": {...}}, not " + type_phrase(root));
        return std::unexpected(std::move(c.errors));
    }
    c.check_keys(root, "", {"sink"}, "in a sink config");
    SinkConfig config;
    Section sink = c.section(root, "", "sink", R"({"source": {...}, "postgres": {...}})",
                             {"source", "postgres", "health", "spool", "batch", "log_level"},
                             "the sink's settings: source, postgres, health, spool, batch");
    if (sink) {
        read_sink_source(c, sink, config.source);
        read_sink_postgres(c, sink, config.postgres);
        read_sink_health(c, sink, config.health);
        read_sink_spool(c, sink, config.spool);
        read_sink_batch(c, sink, config.batch);
        c.read_choice(*sink, sink.pointer, "log_level", config.log_level,
                      {{"trace", std::string("trace")},
                       {"debug", std::string("debug")},
                       {"info", std::string("info")},
                       {"warn", std::string("warn")},
                       {"error", std::string("error")}});
        const std::string health = config.health_topic();
        for (const auto& filter : config.source.topics)
            if (matches(filter, health))
                c.error("/sink/health/topic",
                        in_quotes(health) + " matches the subscription " + in_quotes(filter) +
                            ": the sink would read its own health and reject it; publish it "
                            "outside the topics it reads");
    }
    if (!c.errors.empty()) return std::unexpected(std::move(c.errors));
    return config;
}

SinkConfigResult load_sink_config_file(const std::string& path) {
    std::vector<ConfigError> errors;
    auto text = read_config_text(path, errors);
    if (!text) return std::unexpected(std::move(errors));
    return parse_sink_config(*text, std::filesystem::absolute(path).parent_path().string());
}

bool is_sink_config_file(const std::string& path) {
    std::vector<ConfigError> errors;
    auto text = read_config_text(path, errors);
    if (!text) return false;
    const auto root = Json::parse(*text, nullptr, /*allow_exceptions=*/false);
    return root.is_object() && root.contains("sink");
}

}  // namespace tidemark::config
