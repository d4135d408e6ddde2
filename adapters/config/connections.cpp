// The connection sections: source, upstream and health, with the broker URI parsed once into
// an Endpoint, TLS files, credentials and topic templates.
#include <algorithm>
#include <charconv>

#include "adapters/config/checker.h"
#include "core/duration.h"

namespace tidemark::config {

using namespace detail;

std::expected<Endpoint, std::string> parse_broker_uri(std::string_view uri) {
    // What every client here speaks (client_options.h's validate): MQTT over TCP or TLS. Paho
    // would take mqtt:// and ws:// too, but the forwarder's libmosquitto does not, and a
    // config that check-config passes must run.
    Endpoint endpoint;
    std::string_view rest;
    if (uri.starts_with("tcp://")) {
        rest = uri.substr(6);
    } else if (uri.starts_with("ssl://")) {
        rest = uri.substr(6);
        endpoint.tls = true;
    } else {
        return std::unexpected(in_quotes(uri) +
                               " is not a broker URI: use tcp:// or ssl:// followed by host:port, "
                               "as in \"tcp://127.0.0.1:1883\"");
    }
    // A path after the authority is ignored, as it always was; no client here uses one.
    std::string_view authority = rest.substr(0, rest.find('/'));
    std::string_view host = authority;
    if (authority.starts_with('[')) {  // IPv6 literal
        size_t close = authority.find(']');
        host = authority.substr(0, close == std::string_view::npos ? authority.size() : close + 1);
    } else {
        host = authority.substr(0, authority.rfind(':'));
    }
    if (host.empty() || host == "[]") {
        return std::unexpected(in_quotes(uri) +
                               " has no host: use a form such as \"tcp://127.0.0.1:1883\"");
    }
    if (host.size() == authority.size()) {
        return std::unexpected(in_quotes(uri) + " has no port: use host:port, as in " +
                               "\"tcp://127.0.0.1:1883\" (8883 is the usual one for ssl://)");
    }
    std::string_view port = authority.substr(host.size());
    if (!port.starts_with(':')) return std::unexpected(in_quotes(uri) + " is not host:port");
    port.remove_prefix(1);
    unsigned value = 0;
    auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (ec != std::errc() || end != port.data() + port.size() || value == 0 || value > 65535) {
        return std::unexpected(in_quotes(uri) + " has an invalid port: use 1 to 65535");
    }
    if (host.starts_with('[')) host = host.substr(1, host.size() - 2);
    endpoint.host = std::string(host);
    endpoint.port = static_cast<uint16_t>(value);
    return endpoint;
}

namespace detail {
namespace {

constexpr size_t password_bytes_max = 4096;

}  // namespace

// From here to read_outbox: shared with the sink's config (sink_config.cpp), through checker.h.

// Reads "uri" (required): one URI, or a list of them (the nodes of a cluster, DESIGN.md
// section 11), each parsed; `uri` is the text as written (a list's joined with ", ").
void read_uri(Checker& c, const Section& s, std::string_view required_hint, std::string& uri,
              std::vector<std::string>& uris, std::vector<Endpoint>& endpoints) {
    const std::string p = child(s.pointer, "uri");
    const Json* j = Checker::member(*s, "uri");
    uris.clear();
    endpoints.clear();
    if (j != nullptr && j->is_array()) {
        if (j->empty() || j->size() > broker_uris_max) {
            c.error(p, "expected 1 to " + std::to_string(broker_uris_max) +
                           " broker URIs (the nodes of one cluster), found " +
                           std::to_string(j->size()));
            return;
        }
        for (size_t i = 0; i < j->size(); ++i) {
            const Json& item = (*j)[i];
            if (!item.is_string()) {
                c.error(child(p, i),
                        "expected a broker URI such as \"tcp://127.0.0.1:1883\", "
                        "found " +
                            type_phrase(item));
                continue;
            }
            uris.push_back(item.get<std::string>());
        }
    } else {
        std::string one;
        if (!c.read_string(*s, s.pointer, "uri", one, required_hint)) return;
        uris.push_back(std::move(one));
    }
    uri = join(uris, ", ");
    for (size_t i = 0; i < uris.size(); ++i) {
        const std::string at = j != nullptr && j->is_array() ? child(p, i) : p;
        auto parsed = parse_broker_uri(uris[i]);
        if (!parsed) {
            c.error(at, parsed.error());
            continue;
        }
        if (std::find(endpoints.begin(), endpoints.end(), *parsed) != endpoints.end()) {
            c.error(at, in_quotes(uris[i]) + " is in the list twice: name each node once");
            continue;
        }
        endpoints.push_back(std::move(*parsed));
    }
    for (const Endpoint& e : endpoints) {
        if (e.tls == endpoints.front().tls) continue;
        c.error(p,
                "mixes ssl:// and tcp:// addresses: the nodes of one cluster are reached the "
                "same way (one tls section serves them all)");
        break;
    }
}

// {node_id}, {pipeline} and (where allowed) {key}; no wildcards, since it names a topic.
void check_topic_template(Checker& c, const std::string& pointer, const std::string& tmpl,
                          std::initializer_list<std::string_view> placeholders) {
    std::vector<std::string> names;
    // Appended, not `"{" + std::string(name)`: GCC 12 -O3's false -Wrestrict (see in_quotes).
    for (auto name : placeholders)
        names.push_back(std::string("{").append(name).append("}"));
    if (tmpl.empty()) {
        c.error(pointer, "a topic cannot be empty");
        return;
    }
    for (size_t i = 0; i < tmpl.size(); ++i) {
        char ch = tmpl[i];
        if (ch == '+' || ch == '#' || ch == '\0') {
            c.error(pointer, in_quotes(tmpl) + " contains '" + std::string(1, ch ? ch : '0') +
                                 "': a topic to publish to cannot contain wildcards or NUL");
            return;
        }
        if (ch == '}') {
            c.error(pointer, in_quotes(tmpl) + " has a '}' without '{': placeholders are " +
                                 join(names, ", "));
            return;
        }
        if (ch != '{') continue;
        size_t close = tmpl.find('}', i);
        std::string name = close == std::string::npos ? "" : tmpl.substr(i, close - i + 1);
        if (std::find(names.begin(), names.end(), name) == names.end()) {
            c.error(pointer, in_quotes(tmpl) + " uses an unknown placeholder" +
                                 (name.empty() ? std::string() : " " + name) +
                                 ": the placeholders are " + join(names, ", "));
            return;
        }
        i = close;
    }
}

// Reads an optional topic template at `key`.
void read_topic_template(Checker& c, const Section& s, std::string_view key, std::string& out,
                         std::initializer_list<std::string_view> placeholders) {
    if (c.read_string(*s, s.pointer, key, out)) {
        check_topic_template(c, child(s.pointer, key), out, placeholders);
    }
}

// `uris` are the texts as written: a tls section with a URI that is not ssl:// is refused even
// when the URI has other faults. Every address shares the one tls section (one CA, one client
// certificate): a cluster's nodes are one service.
std::optional<TlsConfig> read_tls(Checker& c, const Section& parent,
                                  const std::vector<std::string>& uris) {
    Section s = c.section(*parent, parent.pointer, "tls", R"({"ca_file": "/etc/tidemark/ca.pem"})",
                          {"ca_file", "cert_file", "key_file"});
    if (!s) return std::nullopt;
    TlsConfig tls;
    for (auto [key, target] : {std::pair<std::string_view, std::string*>{"ca_file", &tls.ca_file},
                               {"cert_file", &tls.cert_file},
                               {"key_file", &tls.key_file}}) {
        if (c.read_string(*s, s.pointer, key, *target)) {
            *target = c.resolve_path(*target);
            c.readable_file(child(s.pointer, key), *target, "TLS file");
        }
    }
    if (tls.cert_file.empty() != tls.key_file.empty()) {
        c.error(s.pointer,
                "cert_file and key_file go together: set both for a client certificate, or "
                "neither");
    }
    for (const std::string& uri : uris) {
        if (!uri.empty() && !uri.starts_with("ssl://")) {
            c.error(s.pointer, "tls is set but " + in_quotes(uri) +
                                   " is not an encrypted transport: use ssl://" +
                                   (uris.size() > 1 ? " for every address" : ""));
        }
    }
    return tls;
}

bool read_password_file(Checker& c, const Section& s, std::string& password) {
    std::string file;
    if (!c.read_string(*s, s.pointer, "password_file", file)) return false;
    std::string p = child(s.pointer, "password_file");
    file = c.resolve_path(file);
    std::string contents;
    if (c.readable_file(p, file, "password file", &contents, password_bytes_max)) {
        while (!contents.empty() && (contents.back() == '\n' || contents.back() == '\r')) {
            contents.pop_back();
        }
        if (contents.empty()) c.error(p, "the password file " + in_quotes(file) + " is empty");
        password = std::move(contents);
    }
    return true;
}

// username + password_file; an inline "password" is refused so secrets stay out of configs.
void read_credentials(Checker& c, const Section& s, std::string& username, std::string& password) {
    c.read_string(*s, s.pointer, "username", username);
    if (Checker::member(*s, "password")) {
        c.error(child(s.pointer, "password"),
                "passwords are not accepted in the config: write it to a file only the tidemark "
                "user can read and name that file in \"password_file\"");
    }
    if (!read_password_file(c, s, password)) return;
    std::string p = child(s.pointer, "password_file");
    if (username.empty()) {
        c.error(p,
                "password_file is set but username is not: MQTT 3.1.1 sends a password only with "
                "a username");
    }
}

bool is_loopback(const std::string& host) {
    return host == "localhost" || host == "::1" || host.starts_with("127.");
}

// A password over tcp:// crosses the network in clear (MQTT CONNECT carries it as is). Only to
// this host's own broker, or when the operator says so in the config.
void check_plaintext_password(Checker& c, const Section& s, const std::vector<Endpoint>& endpoints,
                              const std::string& password) {
    bool allowed = false;
    c.read_bool(*s, s.pointer, "allow_plaintext_password", allowed);
    if (password.empty() || allowed) return;
    for (const Endpoint& endpoint : endpoints) {
        if (endpoint.tls || endpoint.host.empty() || is_loopback(endpoint.host)) continue;
        c.error(s.pointer + "/password_file",
                "the password would go to " + endpoint.host +
                    " in clear text over tcp://: use an "
                    "ssl:// uri (with a tls section), or set \"allow_plaintext_password\": true "
                    "in " +
                    s.pointer.substr(1) + " if the network to that broker is trusted");
        return;
    }
}

void read_client_id(Checker& c, const Section& s, std::string& client_id) {
    c.read_string(*s, s.pointer, "client_id", client_id);
    if (client_id.empty()) c.error(s.pointer + "/client_id", "a client id cannot be empty");
}

namespace {

// A payload the log cannot hold would be refused at every append, for ever: refused here, with
// the arithmetic, rather than accepted up to MQTT's 256 MiB.
void read_max_payload(Checker& c, const Section& s, uint64_t& max_payload_bytes) {
    constexpr uint64_t limit = SourceConfig::max_payload_bytes_limit;
    uint64_t value = 0;
    if (!c.read_size(*s, s.pointer, "max_payload", value, 16, 256ULL << 20)) return;
    if (value > limit) {
        c.error(s.pointer + "/max_payload",
                core::format_size(value) +
                    " is more than the log can hold: a log record is at "
                    "most 16MiB (16777216 bytes), topic (up to 64KiB) and frame head included, so "
                    "max_payload is at most 16MiB - 64KiB = " +
                    std::to_string(limit) + " bytes (" + core::format_size(limit) +
                    "): lower source.max_payload");
        return;
    }
    max_payload_bytes = value;
}

void read_outbox(Checker& c, const Section& upstream, OutboxConfig& outbox) {
    Section s = c.section(*upstream, upstream.pointer, "outbox",
                          R"({"max_bytes": "256MiB", "when_full": "drop_oldest"})",
                          {"max_bytes", "when_full"});
    if (!s) return;
    c.read_size(*s, s.pointer, "max_bytes", outbox.max_bytes, 1ULL << 20, 1ULL << 40);
    c.read_choice(
        *s, s.pointer, "when_full", outbox.when_full,
        {{"drop_oldest", WhenFull::drop_oldest}, {"pause_ingest", WhenFull::pause_ingest}});
}

}  // namespace

void read_source(Checker& c, const Json& root, const std::string& node_id, SourceConfig& source) {
    Section s =
        c.section(root, "", "source", R"({"uri": "tcp://127.0.0.1:1883"})",
                  {"uri", "client_id", "username", "password_file", "allow_plaintext_password",
                   "tls", "max_payload", "retained", "clock"},
                  R"(the gateway broker to read from, e.g. {"uri": "tcp://127.0.0.1:1883"})");
    if (!s) return;
    read_uri(c, s, "the gateway broker, e.g. \"tcp://127.0.0.1:1883\"", source.uri, source.uris,
             source.endpoints);
    if (!source.endpoints.empty()) source.endpoint = source.endpoints.front();
    source.client_id = "tidemark-" + node_id;
    read_client_id(c, s, source.client_id);
    read_credentials(c, s, source.username, source.password);
    check_plaintext_password(c, s, source.endpoints, source.password);
    source.tls = read_tls(c, s, source.uris);
    read_max_payload(c, s, source.max_payload_bytes);
    c.read_choice(*s, s.pointer, "retained", source.accept_retained,
                  {{"skip", false}, {"ingest", true}});
    c.read_choice(*s, s.pointer, "clock", source.clock_trust,
                  {{"auto", ClockTrust::automatic},
                   {"synchronised", ClockTrust::synchronised},
                   {"always", ClockTrust::always}});
}

void read_upstream(Checker& c, const Json& root, const std::string& node_id,
                   std::optional<UpstreamConfig>& out) {
    Section s = c.section(root, "", "upstream", R"({"uri": "ssl://cloud.example:8883"})",
                          {"uri", "client_id", "username", "password_file",
                           "allow_plaintext_password", "tls", "topic", "side_topic", "qos",
                           "max_inflight", "outbox", "compact_superseded", "reconnect_max"});
    if (!s) return;
    UpstreamConfig up;
    read_uri(c, s,
             "the broker results go to, e.g. \"ssl://cloud.example:8883\", or a cluster's "
             "nodes, [\"ssl://a.example:8883\", \"ssl://b.example:8883\"]",
             up.uri, up.uris, up.endpoints);
    if (!up.endpoints.empty()) up.endpoint = up.endpoints.front();
    up.client_id = node_id;
    read_client_id(c, s, up.client_id);
    read_credentials(c, s, up.username, up.password);
    check_plaintext_password(c, s, up.endpoints, up.password);
    up.tls = read_tls(c, s, up.uris);
    read_topic_template(c, s, "topic", up.topic, {"node_id", "pipeline", "key"});
    read_topic_template(c, s, "side_topic", up.side_topic, {"node_id", "pipeline", "key"});
    uint64_t value = 0;
    if (c.read_uint(*s, s.pointer, "qos", value, 0, 1)) up.qos = static_cast<int>(value);
    if (c.read_uint(*s, s.pointer, "max_inflight", value, 1, 65535)) {
        up.max_inflight = static_cast<uint32_t>(value);
    }
    c.read_bool(*s, s.pointer, "compact_superseded", up.compact_superseded);
    if (c.read_duration(*s, s.pointer, "reconnect_max", up.reconnect_max_ms, true) &&
        (up.reconnect_max_ms < UpstreamConfig::reconnect_min_ms ||
         up.reconnect_max_ms > UpstreamConfig::reconnect_max_ms_limit)) {
        c.error(s.pointer + "/reconnect_max",
                "must be between 250ms and 1h: the longest wait between two connect attempts, "
                "and so the longest a recovered link stays unused");
    }
    read_outbox(c, s, up.outbox);
    out = std::move(up);
}

void read_health(Checker& c, const Json& root, HealthConfig& health) {
    Section s = c.section(root, "", "health",
                          R"({"topic": "tidemark/{node_id}/health", "interval": "10s"})",
                          {"topic", "interval", "prometheus_textfile", "upstream"});
    if (!s) return;
    read_topic_template(c, s, "topic", health.topic, {"node_id"});
    c.read_duration(*s, s.pointer, "interval", health.interval_ms, true);
    c.read_bool(*s, s.pointer, "upstream", health.upstream);
    if (s->contains("prometheus_textfile") &&
        c.read_string(*s, s.pointer, "prometheus_textfile", health.prometheus_textfile)) {
        const std::string& path = health.prometheus_textfile;
        // node_exporter's textfile collector reads only *.prom files of its directory.
        if (!path.starts_with('/') || !path.ends_with(".prom") || path.size() <= 6 ||
            path.ends_with("/.prom"))
            c.error(s.pointer + "/prometheus_textfile",
                    in_quotes(path) +
                        " must be an absolute path to a file ending in .prom (node_exporter's "
                        "textfile collector reads only those), e.g. "
                        "/var/lib/prometheus/node-exporter/tidemark.prom");
    }
}

}  // namespace detail
}  // namespace tidemark::config
