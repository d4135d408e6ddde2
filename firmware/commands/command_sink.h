// `tidemark sink`: the consumer that keeps a PostgreSQL table right from the results of a fleet
// (DESIGN.md section 10), and its config check.
#pragma once

#include <string>

#include "core/clock.h"
#include "firmware/service/runtime.h"

namespace tidemark::firmware {

/// `tidemark sink check-config FILE` (and `tidemark check-config FILE` on a sink config):
/// every error with its JSON pointer and exit 1, or a summary and 0.
int sink_check_config(const std::string& path);

/// `tidemark sink --config FILE`: 2 for a config that does not load, 1 when the sink stopped on
/// an error, 0 after a clean stop. `setup_logging` gets the level (the command line's, or the
/// config's log_level); signal handlers must already set `signals`.
int sink_command(const std::string& config_path, const std::string& log_level,
                 void (*setup_logging)(const std::string&), Signals& signals,
                 const core::Clock& clock);

}  // namespace tidemark::firmware
