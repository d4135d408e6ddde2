// tidemark: the edge time-series appliance. `tidemark --help` lists the commands.
#include <csignal>
#include <cstdio>
#include <iostream>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include "adapters/config/config.h"
#include "firmware/clock.h"
#include "firmware/commands.h"
#include "firmware/crash_arm.h"
#include "firmware/runtime.h"

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

}  // namespace

int main(int argc, char** argv) {
    using namespace tidemark;
    firmware::arm_crash_points_from_env();  // test builds only: TIDEMARK_CRASH_AT
    CLI::App app{"tidemark: event-time windows over MQTT telemetry, on the gateway"};
    app.require_subcommand(1);

    std::string config_path, log_level;
    auto* run = app.add_subcommand("run", "run the service");
    run->add_option("--config,-c", config_path, "config file (JSON)")->required();
    run->add_option("--log-level", log_level, "trace, debug, info, warn or error");

    std::string check_path;
    auto* check = app.add_subcommand("check-config", "validate a config file and exit");
    check->add_option("file", check_path, "config file (JSON)")->required();

    firmware::ReplayOptions replay_options;
    std::string from_text, to_text;
    auto* replay = app.add_subcommand(
        "replay", "run a config over the retained log (read-only) and write its results");
    replay->add_option("--config,-c", replay_options.config_path, "config file")->required();
    replay->add_option("--from", from_text, "first ingest time (ms since epoch or RFC 3339)");
    replay->add_option("--to", to_text, "end ingest time, exclusive");
    replay->add_option("--pipeline", replay_options.pipeline, "only this pipeline");
    replay->add_option("--out,-o", replay_options.out, "output file, or - for stdout");
    replay->add_option("--log-dir", replay_options.log_dir,
                       "log directory (default: data_dir/log)");

    firmware::InspectOptions inspect_options;
    auto* inspect = app.add_subcommand("inspect", "show the log, state and outbox");
    inspect->add_option("--config,-c", inspect_options.config_path, "config file");
    inspect->add_option("--data-dir", inspect_options.data_dir, "data directory");
    inspect->add_flag("--json", inspect_options.json, "machine-readable output");
    inspect->add_option("--drop-pipeline", inspect_options.drop_pipeline,
                        "drop the stored state of this pipeline (stop the service first)");

    firmware::AdviseOptions advise_options;
    auto* advise = app.add_subcommand(
        "advise", "lag quantiles from the log, and what each watermark delay would cost");
    advise->add_option("--config,-c", advise_options.config_path, "config file")->required();
    advise->add_option("--pipeline", advise_options.pipeline, "pipeline name")->required();
    advise->add_option("--target", advise_options.target_percent,
                       "share of events that must be on time, in percent (default 99.9)");
    advise->add_option("--log-dir", advise_options.log_dir,
                       "log directory (default: data_dir/log)");

    CLI11_PARSE(app, argc, argv);

    if (*check) {
        auto loaded = config::load_config_file(check_path);
        if (!loaded) {
            std::cerr << config::format_errors(loaded.error());
            return 1;
        }
        std::cout << check_path << ": ok (" << loaded->pipelines.size() << " pipelines)\n";
        return 0;
    }
    if (*replay) {
        if (!from_text.empty() && !(replay_options.from_ms = firmware::parse_time_ms(from_text))) {
            std::cerr << "tidemark replay: --from '" << from_text
                      << "' is neither milliseconds since the epoch nor an RFC 3339 time\n";
            return 2;
        }
        if (!to_text.empty() && !(replay_options.to_ms = firmware::parse_time_ms(to_text))) {
            std::cerr << "tidemark replay: --to '" << to_text
                      << "' is neither milliseconds since the epoch nor an RFC 3339 time\n";
            return 2;
        }
        return firmware::replay_command(replay_options);
    }
    // The one clock of the process: everything below reads time through it.
    const firmware::SystemClock clock;
    if (*inspect) return firmware::inspect_command(inspect_options, clock);
    if (*advise) return firmware::advise_command(advise_options);

    // run
    auto loaded = config::load_config_file(config_path);
    if (!loaded) {
        std::cerr << config::format_errors(loaded.error());
        return 2;
    }
    setup_logging(log_level.empty() ? loaded->log_level : log_level);
    firmware::Signals signals;
    install_signals(signals);
    firmware::RunOptions options;
    options.config_path = config_path;
    spdlog::info("tidemark {} starting: node {}, {} pipelines, data_dir {}", TIDEMARK_VERSION,
                 loaded->node_id, loaded->pipelines.size(), loaded->data_dir);
    auto result = firmware::run_service(*loaded, options, signals, clock);
    if (!result) {
        spdlog::critical("{}", result.error().message);
        return result.error().code != 0 ? result.error().code : 1;
    }
    return 0;
}
