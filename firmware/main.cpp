// tidemark: the edge time-series appliance. `tidemark --help` lists the commands.
#include <csignal>
#include <cstdio>
#include <iostream>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include "adapters/config/config.h"
#include "adapters/config/sink_config.h"
#include "firmware/adapter_options.h"
#include "firmware/build_info.h"
#include "firmware/clock.h"
#include "firmware/commands/command_advise.h"
#include "firmware/commands/command_inspect.h"
#include "firmware/commands/command_replay.h"
#include "firmware/commands/command_sink.h"
#include "firmware/commands/command_status.h"
#include "firmware/crash_arm.h"
#include "firmware/service/runtime.h"
#include "firmware/service/version_plan.h"

namespace {

tidemark::firmware::Signals* g_signals = nullptr;

extern "C" void on_signal(int sig) {
    if (!g_signals) return;
    if (sig == SIGHUP)
        g_signals->reload.store(true);
    else
        g_signals->stop.store(true);
}

void install_signals(tidemark::firmware::Signals& signals) {
    g_signals = &signals;
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGHUP, &sa, nullptr);
    std::signal(SIGPIPE, SIG_IGN);
}

void setup_logging(const std::string& level) {
    // Logs go to stderr: under systemd that is the journal, which adds its own timestamps.
    auto logger = spdlog::stderr_color_mt("tidemark");
    spdlog::set_default_logger(logger);
    spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
    spdlog::set_level(spdlog::level::from_str(level));
}

// What the command line asked for, filled by CLI11.
struct CommandLine {
    std::string config_path, log_level;
    std::string check_path;
    tidemark::firmware::ReplayOptions replay;
    std::string from_text, to_text;
    tidemark::firmware::InspectOptions inspect;
    tidemark::firmware::AdviseOptions advise;
    tidemark::firmware::StatusOptions status;
    std::string sink_config_path, sink_check_path;
    CLI::App* run_command = nullptr;
    CLI::App* check_command = nullptr;
    CLI::App* replay_command = nullptr;
    CLI::App* inspect_command = nullptr;
    CLI::App* advise_command = nullptr;
    CLI::App* status_command = nullptr;
    CLI::App* sink_command = nullptr;
    CLI::App* sink_check_command = nullptr;
};

void define_commands(CLI::App& app, CommandLine& c) {
    auto* run = c.run_command = app.add_subcommand("run", "run the service");
    run->add_option("--config,-c", c.config_path, "config file (JSON)")->required();
    run->add_option("--log-level", c.log_level, "trace, debug, info, warn or error");

    c.check_command = app.add_subcommand("check-config", "validate a config file and exit");
    c.check_command->add_option("file", c.check_path, "config file (JSON)")->required();

    auto* replay = c.replay_command = app.add_subcommand(
        "replay", "run a config over the retained log (read-only) and write its results");
    replay->add_option("--config,-c", c.replay.config_path, "config file")->required();
    replay->add_option("--from", c.from_text, "first ingest time (ms since epoch or RFC 3339)");
    replay->add_option("--to", c.to_text, "end ingest time, exclusive");
    replay->add_option("--pipeline", c.replay.pipeline, "only this pipeline");
    replay->add_option("--out,-o", c.replay.out, "output file, or - for stdout");
    replay->add_option("--log-dir", c.replay.log_dir, "log directory (default: data_dir/log)");

    auto* inspect = c.inspect_command =
        app.add_subcommand("inspect", "show the log, state and outbox");
    inspect->add_option("--config,-c", c.inspect.config_path, "config file");
    inspect->add_option("--data-dir", c.inspect.data_dir, "data directory");
    inspect->add_flag("--json", c.inspect.json, "machine-readable output");
    inspect->add_option("--drop-pipeline", c.inspect.drop_pipeline,
                        "drop the stored state of this pipeline (stop the service first)");

    auto* advise = c.advise_command = app.add_subcommand(
        "advise", "lag quantiles from the log, and what each watermark delay would cost");
    advise->add_option("--config,-c", c.advise.config_path, "config file")->required();
    advise->add_option("--pipeline", c.advise.pipeline, "pipeline name")->required();
    advise->add_option("--target", c.advise.target_percent,
                       "share of events that must be on time, in percent (default 99.9)");
    advise->add_option("--log-dir", c.advise.log_dir, "log directory (default: data_dir/log)");

    auto* status = c.status_command = app.add_subcommand(
        "status", "the retained health of a gateway, or of every gateway and sink on a broker");
    status->add_option("--config,-c", c.status.config_path,
                       "the gateway's config: its source broker and health.topic");
    status->add_option("--broker", c.status.broker,
                       "a broker (tcp://host:port, ssl://...; a cluster's uris comma-separated): "
                       "every tidemark/+/health and tidemark-sink/+/health on it");
    status->add_option("--node", c.status.node, "with --broker: only this node or sink");
    status->add_option("--username", c.status.username, "with --broker: the user name");
    status->add_option("--password-file", c.status.password_file,
                       "with --broker: a file holding the password");
    status->add_option("--ca-file", c.status.ca_file,
                       "with --broker ssl://: the CA bundle (default: the system's)");
    status->add_flag("--json", c.status.json, "one JSON document (docs/OPERATIONS.md)");
    status->add_flag("--watch", c.status.watch, "redraw until SIGINT or SIGTERM");
    status->add_option("--timeout", c.status.timeout, "bound of one read (default 3s)");
    status->add_option("--interval", c.status.interval,
                       "--watch: redraw interval (default health.interval, or 2s)");

    auto* sink = c.sink_command = app.add_subcommand(
        "sink", "keep PostgreSQL right from the results on the upstream broker (its own unit)");
    sink->add_option("--config,-c", c.sink_config_path, "sink config file (JSON)");
    sink->add_option("--log-level", c.log_level, "trace, debug, info, warn or error");
    sink->require_subcommand(0, 1);
    c.sink_check_command = sink->add_subcommand("check-config", "validate a sink config and exit");
    c.sink_check_command->add_option("file", c.sink_check_path, "sink config file")->required();
}

int check_config(const std::string& path) {
    if (tidemark::config::is_sink_config_file(path))
        return tidemark::firmware::sink_check_config(path);
    auto loaded = tidemark::config::load_config_file(path);
    if (!loaded) {
        std::cerr << tidemark::config::format_errors(loaded.error());
        return 1;
    }
    std::cout << path << ": ok (" << loaded->pipelines.size() << " pipelines)\n";
    // Against its data directory, when there is one: which versions would backfill, and how
    // much (DESIGN.md section 8). Read-only, beside a running service.
    const tidemark::lmdb::StoreOptions so =
        tidemark::firmware::command_store_options(loaded->data_dir, &*loaded, /*read_only=*/true);
    if (auto store = tidemark::lmdb::Store::open(so)) {
        auto plan = tidemark::firmware::read_version_plan(
            *loaded, **store, tidemark::firmware::log_dir(loaded->data_dir));
        if (plan)
            std::cout << tidemark::firmware::version_plan_text(*plan);
        else
            std::cout << "(versions in " << loaded->data_dir
                      << " not read: " << plan.error().message << ")\n";
    }
    return 0;
}

int replay(CommandLine& c) {
    using tidemark::firmware::parse_time_ms;
    if (!c.from_text.empty() && !(c.replay.from_ms = parse_time_ms(c.from_text))) {
        std::cerr << "tidemark replay: --from '" << c.from_text
                  << "' is neither milliseconds since the epoch nor an RFC 3339 time\n";
        return 2;
    }
    if (!c.to_text.empty() && !(c.replay.to_ms = parse_time_ms(c.to_text))) {
        std::cerr << "tidemark replay: --to '" << c.to_text
                  << "' is neither milliseconds since the epoch nor an RFC 3339 time\n";
        return 2;
    }
    return tidemark::firmware::replay_command(c.replay);
}

int sink(const CommandLine& c, const tidemark::core::Clock& clock) {
    if (*c.sink_check_command) return tidemark::firmware::sink_check_config(c.sink_check_path);
    if (c.sink_config_path.empty()) {
        std::cerr << "tidemark sink: --config FILE is required (or: tidemark sink check-config "
                     "FILE)\n";
        return 2;
    }
    tidemark::firmware::Signals signals;
    install_signals(signals);
    return tidemark::firmware::sink_command(c.sink_config_path, c.log_level, &setup_logging,
                                            signals, clock);
}

int run(const CommandLine& c, const tidemark::core::Clock& clock) {
    using namespace tidemark;
    auto loaded = config::load_config_file(c.config_path);
    if (!loaded) {
        std::cerr << config::format_errors(loaded.error());
        return 2;
    }
    setup_logging(c.log_level.empty() ? loaded->log_level : c.log_level);
    firmware::Signals signals;
    install_signals(signals);
    firmware::RunOptions options;
    options.config_path = c.config_path;
    spdlog::info("tidemark {} starting: node {}, {} pipelines, data_dir {}", TIDEMARK_VERSION,
                 loaded->node_id, loaded->pipelines.size(), loaded->data_dir);
    auto result = firmware::run_service(*loaded, options, signals, clock);
    if (!result) {
        spdlog::critical("{}", result.error().message);
        return result.error().code != 0 ? result.error().code : 1;
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    using namespace tidemark;
    firmware::arm_crash_points_from_env();  // test builds only: TIDEMARK_CRASH_AT
    CLI::App app{"tidemark: event-time windows over MQTT telemetry, on the gateway"};
    app.require_subcommand(1);
    app.set_version_flag(
        "--version", [] { return firmware::version_text(TIDEMARK_VERSION); },
        "print the version, the CRC-32C path and the JSON kernel, and exit");
    CommandLine c;
    define_commands(app, c);
    CLI11_PARSE(app, argc, argv);

    if (*c.check_command) return check_config(c.check_path);
    if (*c.replay_command) return replay(c);
    // The one clock of the process: everything below reads time through it.
    const firmware::SystemClock clock;
    if (*c.inspect_command) return firmware::inspect_command(c.inspect, clock);
    if (*c.advise_command) return firmware::advise_command(c.advise);
    if (*c.sink_command) return sink(c, clock);
    if (*c.status_command) {
        firmware::Signals signals;
        install_signals(signals);
        return firmware::status_command(c.status, signals, clock);
    }
    return run(c, clock);
}
