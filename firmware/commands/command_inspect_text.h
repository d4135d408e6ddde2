// tidemark inspect's text form (command_inspect_text.cpp), rendered from the JSON report that
// command_inspect.cpp gathers, as --json prints it: the text says what the JSON says, and no
// JSON type crosses a firmware header (DESIGN.md section 2). Private to the command.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string_view>

namespace tidemark::firmware {

/// Records are counted by a full scan only below this; above, the scan would take minutes on a
/// gateway, so only the first record and the newest segment are read.
inline constexpr uint64_t inspect_log_count_bytes_max = uint64_t{1} << 30;

/// The report (its JSON text), section by section: log, state, versions, pipelines, outbox,
/// side output.
void print_inspect_text(std::string_view report_json, std::ostream& out);

}  // namespace tidemark::firmware
