// `tidemark replay`: any config over the retained log, read-only, beside the running service.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace tidemark::firmware {

struct ReplayOptions {
    std::string config_path;
    std::optional<int64_t> from_ms;  // ingest time, inclusive
    std::optional<int64_t> to_ms;    // ingest time, exclusive
    std::string pipeline;            // empty: every pipeline of the config
    std::string out = "-";           // a file, or - for stdout
    std::string log_dir;             // empty: <data_dir>/log of the config
};
/// Writes each result as the JSON line the live run sends upstream. Returns the exit code.
int replay_command(const ReplayOptions& options);

/// "1764400000000", or an RFC 3339 time; nullopt when neither (replay's --from and --to).
std::optional<int64_t> parse_time_ms(const std::string& text);

}  // namespace tidemark::firmware
