#include "firmware/commands/command_status.h"

#include <unistd.h>

#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "adapters/codec/topic.h"
#include "adapters/config/config.h"
#include "adapters/config/sink_config.h"
#include "adapters/mqtt/health.h"
#include "adapters/mqtt/retained_reader.h"
#include "core/duration.h"
#include "firmware/adapter_options.h"
#include "firmware/commands/command_status_view.h"

namespace tidemark::firmware {
namespace {

constexpr int64_t default_watch_interval_ms = 2'000;
constexpr int64_t stop_poll_ms = 100;

// What to read and how to say that nothing was there.
struct Source {
    mqtt::RetainedReadOptions read;
    std::string looked_at;  // for "no retained health on ..."
    int64_t interval_ms = default_watch_interval_ms;
};

std::string client_id_suffix() {
    // Two status commands at once (or one beside a stuck one) must not throw each other off.
    return "-status-" + std::to_string(::getpid());
}

Result<std::string> read_password(const std::string& path) {
    std::ifstream in(path);
    if (!in) return fail("--password-file '" + path + "' cannot be read");
    std::stringstream text;
    text << in.rdbuf();
    std::string password = text.str();
    while (!password.empty() && (password.back() == '\n' || password.back() == '\r'))
        password.pop_back();
    return password;
}

Result<Source> from_config(const StatusOptions& o) {
    if (config::is_sink_config_file(o.config_path))
        return fail(o.config_path +
                    " is a sink's config: use --broker URI (the sink's health is "
                    "read there under tidemark-sink/+/health)");
    auto loaded = config::load_config_file(o.config_path);
    if (!loaded) return fail(config::format_errors(loaded.error()));
    Source s;
    s.read.broker = source_broker_options(*loaded);
    s.read.broker.client_id += client_id_suffix();
    const std::string topic =
        codec::expand_topic_template(loaded->health.topic, loaded->node_id, "", "");
    s.read.filters = {topic, mqtt::status_topic_for(topic)};
    s.looked_at = topic + " (health.topic of " + o.config_path + ")";
    s.interval_ms = loaded->health.interval_ms;
    return s;
}

Result<Source> from_broker(const StatusOptions& o) {
    std::vector<config::Endpoint> endpoints;
    std::stringstream list(o.broker);
    for (std::string uri; std::getline(list, uri, ',');) {
        const size_t first = uri.find_first_not_of(" \t");
        if (first == std::string::npos) continue;
        uri = uri.substr(first, uri.find_last_not_of(" \t") - first + 1);
        auto endpoint = config::parse_broker_uri(uri);
        if (!endpoint) return fail("--broker '" + uri + "': " + endpoint.error());
        endpoints.push_back(*endpoint);
    }
    if (endpoints.empty()) return fail("--broker: no address given (tcp://host:port)");
    std::string password;
    if (!o.password_file.empty()) {
        auto p = read_password(o.password_file);
        if (!p) return std::unexpected(p.error());
        password = *p;
    }
    std::optional<config::TlsConfig> tls;
    if (!o.ca_file.empty()) tls = config::TlsConfig{o.ca_file, "", ""};
    Source s;
    s.read.broker = broker_options(endpoints, "tidemark" + client_id_suffix(), o.username, password,
                                   tls, "--broker");
    if (o.node.empty()) {
        const std::string gateway(gateway_health_filter), sink(sink_health_filter);
        s.read.filters = {gateway, mqtt::status_topic_for(gateway), sink,
                          mqtt::status_topic_for(sink)};
        s.looked_at = gateway + " or " + sink;
        return s;
    }
    if (o.node.find_first_of("+#/") != std::string::npos)
        return fail("--node '" + o.node + "': a node id has no '/', '+' or '#'");
    const std::string gateway = "tidemark/" + o.node + "/health";
    const std::string sink = "tidemark-sink/" + o.node + "/health";
    s.read.filters = {gateway, mqtt::status_topic_for(gateway), sink, mqtt::status_topic_for(sink)};
    s.looked_at = gateway + " or " + sink + " (node '" + o.node + "')";
    return s;
}

Result<Source> source_of(const StatusOptions& o, const core::Clock& clock) {
    if (o.config_path.empty() == o.broker.empty())
        return fail("give either --config FILE or --broker URI");
    if (!o.config_path.empty() && !o.node.empty())
        return fail("--node goes with --broker (--config reads that gateway's own health)");
    auto source = o.config_path.empty() ? from_broker(o) : from_config(o);
    if (!source) return source;
    auto timeout_ms = core::parse_duration_ms(o.timeout);
    if (!timeout_ms || *timeout_ms <= 0)
        return fail("--timeout '" + o.timeout + "': a duration such as 3s");
    source->read.timeout_ms = *timeout_ms;
    source->read.quiet_ms = std::min<int64_t>(source->read.quiet_ms, *timeout_ms);
    // Health and status of every node and sink, beside the bound on nodes shown.
    source->read.topics_max = 4 * status_nodes_max;
    source->read.clock = &clock;
    if (!o.interval.empty()) {
        auto interval_ms = core::parse_duration_ms(o.interval);
        if (!interval_ms || *interval_ms < 100)
            return fail("--interval '" + o.interval + "': a duration of at least 100ms");
        source->interval_ms = *interval_ms;
    }
    return source;
}

// One read: the report, or what went wrong (no broker, nothing retained).
Result<StatusReport> read_report(const Source& source, const StatusReport* previous,
                                 const core::Clock& clock) {
    auto read = mqtt::read_retained(source.read);
    if (!read) return fail("cannot read the broker: " + read.error().message);
    StatusReport report = status_report(read->topics, previous, read->address, clock.wall_ms());
    if (read->truncated)
        report.notes.push_back("the broker held more than this command keeps (" +
                               std::to_string(source.read.topics_max) + " topics, " +
                               core::format_size(source.read.bytes_max) + "): not all shown");
    if (read->oversized > 0)
        report.notes.push_back(std::to_string(read->oversized) + " records over " +
                               core::format_size(source.read.payload_bytes_max) + " skipped");
    if (report.gateways.empty() && report.sinks.empty())
        return fail("no retained health on " + read->address + " under " + source.looked_at +
                    ": is the node running, has it connected to this broker once, and is its "
                    "health.topic the one looked at?");
    return report;
}

void show(const StatusReport& report, bool json) {
    std::cout << (json ? status_json(report) + "\n" : status_text(report)) << std::flush;
}

int watch(const StatusOptions& o, const Source& source, const Signals& signals,
          const core::Clock& clock) {
    const bool terminal = ::isatty(STDOUT_FILENO) == 1;
    std::optional<StatusReport> previous;
    while (!signals.stop.load()) {
        auto report = read_report(source, previous ? &*previous : nullptr, clock);
        if (terminal && !o.json) std::cout << "\x1b[H\x1b[2J";  // home, clear: a redraw
        if (report) {
            show(*report, o.json);
            previous = std::move(*report);
        } else if (o.json) {
            std::cerr << "tidemark status: " << report.error().message << "\n";
        } else {
            std::cout << "tidemark status: " << report.error().message << " (retrying every "
                      << core::format_duration(source.interval_ms) << ")\n"
                      << std::flush;
        }
        if (!terminal && !o.json) std::cout << "\n";
        const int64_t next_ms = clock.steady_ms() + source.interval_ms;
        while (!signals.stop.load() && clock.steady_ms() < next_ms)
            std::this_thread::sleep_for(std::chrono::milliseconds(stop_poll_ms));
    }
    return 0;
}

}  // namespace

int status_command(const StatusOptions& options, const Signals& signals, const core::Clock& clock) {
    auto source = source_of(options, clock);
    if (!source) {
        std::cerr << "tidemark status: " << source.error().message << "\n";
        return 2;
    }
    if (options.watch) return watch(options, *source, signals, clock);
    auto report = read_report(*source, nullptr, clock);
    if (!report) {
        std::cerr << "tidemark status: " << report.error().message << "\n";
        return 1;
    }
    show(*report, options.json);
    return 0;
}

}  // namespace tidemark::firmware
