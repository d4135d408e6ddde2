// The unit file as systemd reads it: it parses cleanly and keeps its sandbox.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "tests/systemd/shell.h"

namespace {

using namespace tidemark::test;
namespace fs = std::filesystem;

// The gateway's unit, or the sink's (docs/SINK.md): both are held to the same checks.
fs::path unit_source(const std::string& name = "tidemark.service") {
    return env_path("TIDEMARK_SOURCE_DIR") / "systemd" / name;
}

// systemd-analyze verify fails when ExecStart names a file that is not executable, and
// /usr/bin/tidemark exists only once the package is installed. The copy runs the built binary
// when there is one, /bin/true otherwise: the check is about the unit, not the binary.
fs::path verifiable_copy(const TempDir& dir, const std::string& name) {
    std::string unit = read_text(unit_source(name));
    REQUIRE(!unit.empty());
    const fs::path built = TM_TIDEMARK_BINARY;
    const std::string binary = !built.empty() && fs::exists(built) ? built.string() : "/bin/true";
    const std::string from = "ExecStart=/usr/bin/tidemark ";
    const auto at = unit.find(from);
    REQUIRE(at != std::string::npos);
    unit.replace(at, from.size(), "ExecStart=" + binary + " ");
    // The copy keeps the unit's name: systemd derives settings from it.
    const fs::path copy = dir.path() / name;
    std::ofstream(copy) << unit;
    return copy;
}

}  // namespace

TEST_CASE("systemd-analyze verify accepts the units without a warning", "[unit]") {
    if (!have_program("systemd-analyze")) {
        skip_test("systemd-analyze is not installed (apt-get install systemd)");
    }
    const std::string name = GENERATE("tidemark.service", "tidemark-sink.service");
    TempDir dir;
    const fs::path copy = verifiable_copy(dir, name);
    const auto verified =
        run_command("cd '" + dir.path().string() + "' && systemd-analyze verify --man=no '" +
                    copy.string() + "'");
    INFO(verified.output);
    CHECK(verified.exit_code == 0);
    // Unknown keys and bad values are warnings with exit code 0; any line naming the unit
    // means systemd would ignore a setting, often a hardening one.
    CHECK(verified.output.find(name) == std::string::npos);
}

TEST_CASE("the sandboxes rate as OK in systemd-analyze security", "[unit]") {
    if (!have_program("systemd-analyze")) {
        skip_test("systemd-analyze is not installed (apt-get install systemd)");
    }
    const std::string name = GENERATE("tidemark.service", "tidemark-sink.service");
    TempDir dir;
    const fs::path copy = verifiable_copy(dir, name);
    // Exposure 0 (locked down) .. 10 (unprotected); below 2 is the "OK" band. The unit scores 1.6;
    // dropping a protection such as ProtectSystem or the capability bounding set pushes it over.
    const auto rated = run_command("cd '" + dir.path().string() +
                                   "' && systemd-analyze security --offline=yes --threshold=20 '" +
                                   copy.string() + "'");
    INFO(rated.output);
    REQUIRE(rated.exit_code == 0);
    const std::string marker = "Overall exposure level for " + name + ": ";
    const auto at = rated.output.find(marker);
    REQUIRE(at != std::string::npos);
    CHECK(std::stod(rated.output.substr(at + marker.size())) < 2.0);
}

TEST_CASE("the unit lets systemd see a stuck or unready engine", "[unit]") {
    std::set<std::string> lines;
    std::istringstream unit(read_text(unit_source()));
    for (std::string line; std::getline(unit, line);)
        lines.insert(line);
    auto has_line = [&](const std::string& line) { return lines.contains(line); };
    // Readiness and keep-alives come from the main process, or the unit would be started
    // before recovery ends and a stuck engine would never be restarted.
    CHECK(has_line("Type=notify"));
    CHECK(has_line("NotifyAccess=main"));
    CHECK(has_line("WatchdogSec=30s"));
    CHECK(has_line("Restart=on-failure"));
    CHECK(has_line("ExecReload=/bin/kill -HUP $MAINPID"));
    // data_dir of the example config and the service user's only writable place.
    CHECK(has_line("StateDirectory=tidemark"));
    CHECK(has_line("User=tidemark"));
    CHECK(has_line("ExecStart=/usr/bin/tidemark run --config /etc/tidemark/tidemark.json"));
    // A watchdog abort must not leave the brokers' passwords and TLS keys in a core dump.
    CHECK(has_line("LimitCORE=0"));
}

TEST_CASE("the sink's unit lets systemd see a stuck writer", "[unit]") {
    std::set<std::string> lines;
    std::istringstream unit(read_text(unit_source("tidemark-sink.service")));
    for (std::string line; std::getline(unit, line);)
        lines.insert(line);
    auto has_line = [&](const std::string& line) { return lines.contains(line); };
    CHECK(has_line("Type=notify"));
    CHECK(has_line("NotifyAccess=main"));
    // Longer than the sink's writer_stall_ms (45 s): the keep-alives stop before systemd acts.
    CHECK(has_line("WatchdogSec=60s"));
    CHECK(has_line("Restart=on-failure"));
    // The default spool directory (sink.spool.dir) is the only writable place.
    CHECK(has_line("StateDirectory=tidemark-sink"));
    CHECK(has_line("User=tidemark"));
    CHECK(has_line("ExecStart=/usr/bin/tidemark sink --config /etc/tidemark/sink.json"));
}
