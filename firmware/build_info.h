// What this binary runs on: the CRC-32C path the log's checksums take and the JSON parser's
// kernel, both chosen at run time for the CPU. `tidemark --version` prints them and health
// publishes them under `build` (README, "Health"), so that a slow gateway shows whether it took
// the hardware paths.
#pragma once

#include <string>
#include <string_view>

namespace tidemark::firmware {

struct BuildInfo {
    std::string_view crc32c;       // "sse4.2", "armv8" or "software" (adapters/log/crc32c.h)
    std::string_view json_kernel;  // simdjson's active kernel, chosen at run time
};

/// Read once per call from the adapters; cheap (each choice is made once per process).
BuildInfo build_info();

/// `tidemark --version`: the version line, then one line per runtime choice (no newline at the
/// end).
std::string version_text(std::string_view version);

}  // namespace tidemark::firmware
