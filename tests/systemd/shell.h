// Runs a shell command for the systemd and packaging tests and captures what it prints.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>

namespace tidemark::test {

struct CommandOutput {
    int exit_code = -1;
    std::string output;  // stdout and stderr together
};

// Output beyond this is cut: these commands print a few screens at most.
inline constexpr size_t command_output_bytes_max = 4 * 1024 * 1024;

inline CommandOutput run_command(const std::string& command) {
    CommandOutput result;
    FILE* pipe = popen((command + " 2>&1").c_str(), "r");
    if (pipe == nullptr) throw std::runtime_error("popen failed for: " + command);
    std::array<char, 4096> buffer{};
    size_t read_bytes = 0;
    while ((read_bytes = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) {
        if (result.output.size() < command_output_bytes_max) {
            result.output.append(buffer.data(), read_bytes);
        }
    }
    const int status = pclose(pipe);
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return result;
}

inline bool have_program(const std::string& name) {
    return run_command("command -v " + name + " >/dev/null").exit_code == 0;
}

inline std::string read_text(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

inline std::filesystem::path env_path(const char* name) {
    const char* value = std::getenv(name);
    if (value == nullptr || value[0] == '\0') {
        throw std::runtime_error(std::string(name) + " is not set: run the test through ctest");
    }
    return value;
}

// ctest reports exit code 77 as skipped (SKIP_RETURN_CODE): a missing tool is not a failure.
[[noreturn]] inline void skip_test(const std::string& reason) {
    std::cout << "SKIP: " << reason << std::endl;
    std::exit(77);
}

// A fresh directory removed at the end of the scope.
class TempDir {
  public:
    TempDir() {
        std::string pattern = (std::filesystem::temp_directory_path() / "tm-sd-XXXXXX").string();
        if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
        path_ = pattern;
    }
    ~TempDir() {
        std::error_code ignored;
        std::filesystem::remove_all(path_, ignored);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    const std::filesystem::path& path() const { return path_; }

  private:
    std::filesystem::path path_;
};

}  // namespace tidemark::test
