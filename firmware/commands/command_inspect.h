// `tidemark inspect`: the log, the checkpointed state, the outbox and the side output of a data
// directory, read-only beside the running service; and its one write, --drop-pipeline
// (command_inspect_drop.cpp), with the service stopped.
#pragma once

#include <optional>
#include <string>

#include "adapters/config/config.h"
#include "core/clock.h"

namespace tidemark::firmware {

struct InspectOptions {
    std::string config_path;  // either this
    std::string data_dir;     // or this
    bool json = false;
    // Writes instead of reading: drops this pipeline's stored state (the service must be
    // stopped). Its outbox rows stay and are sent.
    std::string drop_pipeline;
};
/// Ages (the checkpoint's, the oldest outbox row's) are measured by `clock`. Returns the exit
/// code.
int inspect_command(const InspectOptions& options, const core::Clock& clock);

/// inspect --drop-pipeline: the pipeline's stored state, its backfill's and its entry in the
/// version registry go in one transaction that keeps the checkpoint as it was; the pipeline
/// starts afresh from the checkpoint. Takes the data directory's lock (the service must be
/// stopped). Returns the exit code.
int drop_pipeline(const std::string& data_dir, const std::optional<config::Config>& config,
                  const std::string& name);

}  // namespace tidemark::firmware
