#include "firmware/commands/command_sink.h"

#include <spdlog/spdlog.h>

#include <iostream>

#include "adapters/config/sink_config.h"
#include "firmware/sink/service.h"

namespace tidemark::firmware {

int sink_check_config(const std::string& path) {
    auto loaded = config::load_sink_config_file(path);
    if (!loaded) {
        std::cerr << config::format_errors(loaded.error());
        return 1;
    }
    const config::SinkConfig& c = *loaded;
    std::cout << path << ": ok (sink " << c.source.client_id << ": " << c.source.topics.size()
              << " topic filter(s) on " << c.source.uri << ", PostgreSQL schema "
              << c.postgres.schema << ", spool " << c.spool.dir << ", health on "
              << c.health_topic() << ")\n";
    return 0;
}

int sink_command(const std::string& config_path, const std::string& log_level,
                 void (*setup_logging)(const std::string&), Signals& signals,
                 const core::Clock& clock) {
    auto loaded = config::load_sink_config_file(config_path);
    if (!loaded) {
        std::cerr << config::format_errors(loaded.error());
        return 2;
    }
    setup_logging(log_level.empty() ? loaded->log_level : log_level);
    spdlog::info("tidemark sink {} starting: {} topic filter(s) from {}", loaded->source.client_id,
                 loaded->source.topics.size(), loaded->source.uri);
    auto ran = sink::run_sink(*loaded, signals, clock);
    if (!ran) {
        spdlog::critical("{}", ran.error().message);
        return 1;
    }
    return 0;
}

}  // namespace tidemark::firmware
