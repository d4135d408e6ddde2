// The read-only commands beside `run`: replay, inspect, advise. Each returns the exit code.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/clock.h"

namespace tidemark::firmware {

struct ReplayOptions {
    std::string config_path;
    std::optional<int64_t> from_ms;  // ingest time, inclusive
    std::optional<int64_t> to_ms;    // ingest time, exclusive
    std::string pipeline;            // empty: every pipeline of the config
    std::string out = "-";           // a file, or - for stdout
    std::string log_dir;             // empty: <data_dir>/log of the config
};
int replay_command(const ReplayOptions& options);

struct InspectOptions {
    std::string config_path;  // either this
    std::string data_dir;     // or this
    bool json = false;
    // Writes instead of reading: drops this pipeline's stored state (the service must be
    // stopped). Its outbox rows stay and are sent.
    std::string drop_pipeline;
};
/// Ages (the checkpoint's, the oldest outbox row's) are measured by `clock`.
int inspect_command(const InspectOptions& options, const core::Clock& clock);

struct AdviseOptions {
    std::string config_path;
    std::string pipeline;
    double target_percent = 99.9;
    std::string log_dir;  // empty: <data_dir>/log of the config
};
int advise_command(const AdviseOptions& options);

/// "1764400000000", or an RFC 3339 time; nullopt when neither.
std::optional<int64_t> parse_time_ms(const std::string& text);

}  // namespace tidemark::firmware
