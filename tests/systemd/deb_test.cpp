// The .deb as an operator gets it: built with cpack from the build directory, unpacked into a
// staging root, with the files, modes, conffiles and dependencies that apt and dpkg rely on.
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "tests/systemd/shell.h"

namespace {

using namespace tidemark::test;
namespace fs = std::filesystem;

unsigned mode_of(const fs::path& path) {
    struct stat status {};
    REQUIRE(lstat(path.c_str(), &status) == 0);
    return status.st_mode & 07777;
}

// The control field `name` (one line) from `dpkg-deb -f`.
std::string control_field(const fs::path& deb, const std::string& name) {
    const auto field = run_command("dpkg-deb -f '" + deb.string() + "' " + name);
    REQUIRE(field.exit_code == 0);
    return field.output;
}

}  // namespace

TEST_CASE("the .deb installs the service layout with the right modes", "[deb]") {
    const std::string binary = TM_TIDEMARK_BINARY;
    if (binary.empty()) {
        skip_test("the tidemark target does not exist yet (firmware/): nothing to package");
    }
    for (const char* tool : {"cpack", "dpkg-deb"}) {
        if (!have_program(tool)) skip_test(std::string(tool) + " is not installed");
    }
    REQUIRE(fs::exists(binary));  // the test depends on the target: build it with the test
    const fs::path build_dir = env_path("TIDEMARK_BUILD_DIR");
    REQUIRE(fs::exists(build_dir / "CPackConfig.cmake"));

    TempDir work;
    const auto packed =
        run_command("cpack -G DEB --config '" + (build_dir / "CPackConfig.cmake").string() +
                    "' -B '" + work.path().string() + "'");
    INFO(packed.output);
    REQUIRE(packed.exit_code == 0);
    std::vector<fs::path> debs;
    for (const auto& entry : fs::directory_iterator(work.path())) {
        if (entry.path().extension() == ".deb") debs.push_back(entry.path());
    }
    REQUIRE(debs.size() == 1);
    const fs::path deb = debs.front();
    CHECK(deb.filename().string().starts_with("tidemark_"));

    SECTION("control: name, runtime dependencies, maintainer scripts, conffiles") {
        CHECK(control_field(deb, "Package") == "tidemark\n");
        const std::string depends = control_field(deb, "Depends");
        INFO(depends);
        // The Debian runtime packages of what the binary links, and systemd for the scripts.
        // Not Paho's C++ wrapper: ingest uses Paho C and health libmosquitto (issue 25).
        for (const char* package : {"libc6", "libstdc++6", "liblmdb0", "libpaho-mqtt1.3",
                                    "libmosquitto1", "libpq5", "libsystemd0", "systemd"}) {
            CHECK(depends.find(package) != std::string::npos);
        }
        const fs::path control = work.path() / "control";
        REQUIRE(run_command("dpkg-deb -e '" + deb.string() + "' '" + control.string() + "'")
                    .exit_code == 0);
        // dpkg keeps the operator's edits to the config across upgrades only if it is listed.
        CHECK(read_text(control / "conffiles") == "/etc/tidemark/tidemark.json\n");
        for (const char* script : {"postinst", "prerm", "postrm"}) {
            INFO(script);
            REQUIRE(fs::exists(control / script));
            CHECK(mode_of(control / script) == 0755);
            CHECK(run_command("sh -n '" + (control / script).string() + "'").exit_code == 0);
        }
    }

    SECTION("files: where systemd, dpkg and the operator look for them") {
        const auto listing = run_command("dpkg-deb -c '" + deb.string() + "'");
        INFO(listing.output);
        REQUIRE(listing.exit_code == 0);
        const fs::path root = work.path() / "root";
        REQUIRE(
            run_command("dpkg-deb -x '" + deb.string() + "' '" + root.string() + "'").exit_code ==
            0);
        struct Expected {
            const char* path;
            unsigned mode;
        };
        for (const Expected& file : {
                 Expected{"usr/bin/tidemark", 0755},
                 Expected{"etc/tidemark/tidemark.json", 0644},
                 Expected{"usr/lib/systemd/system/tidemark.service", 0644},
                 Expected{"usr/lib/systemd/system/tidemark-sink.service", 0644},
                 Expected{"usr/share/doc/tidemark/SINK.md", 0644},
                 Expected{"usr/lib/sysusers.d/tidemark.conf", 0644},
                 Expected{"usr/lib/tmpfiles.d/tidemark.conf", 0644},
                 Expected{"usr/share/doc/tidemark/OPERATIONS.md", 0644},
             }) {
            INFO(file.path);
            REQUIRE(fs::is_regular_file(root / file.path));
            CHECK(mode_of(root / file.path) == file.mode);
            CHECK(listing.output.find(std::string("./") + file.path) != std::string::npos);
        }
        // The packaged unit is the source unit, and the binary is the built one.
        const fs::path source_dir = env_path("TIDEMARK_SOURCE_DIR");
        CHECK(read_text(root / "usr/lib/systemd/system/tidemark.service") ==
              read_text(source_dir / "systemd/tidemark.service"));
        // The built binary, stripped (CPACK_STRIP_FILES): no larger, and the same program.
        CHECK(fs::file_size(root / "usr/bin/tidemark") <= fs::file_size(binary));
        const auto packaged =
            run_command("'" + (root / "usr/bin/tidemark").string() + "' --version");
        const auto built = run_command("'" + binary + "' --version");
        CHECK(packaged.exit_code == 0);
        CHECK(packaged.output == built.output);
        // Owned by root in the archive: the service user must not be able to replace its binary
        // or its unit.
        std::istringstream lines(listing.output);
        for (std::string line; std::getline(lines, line);) {
            if (line.empty() || line.find("./") == std::string::npos) continue;
            INFO(line);
            CHECK(line.find(" root/root ") != std::string::npos);
        }
    }
}
