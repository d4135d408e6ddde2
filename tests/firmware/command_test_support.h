// Fixtures of the command tests: a log written directly, a config file, stdout captured.
#pragma once

#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <string_view>

#include <catch2/catch.hpp>

#include "adapters/log/log_writer.h"

namespace tidemark::test {

/// A LogWriter on DIR with fsync off: the tests read the files back in the same process.
inline std::unique_ptr<log::LogWriter> open_log(const std::string& dir) {
    log::LogOptions options;
    options.dir = dir;
    options.fsync = log::FsyncPolicy::never;
    auto writer = log::LogWriter::open(options);
    REQUIRE(writer);
    return std::move(*writer);
}

inline void append(log::LogWriter& writer, log::RecordType type, int64_t ingest_ms,
                   std::string_view topic = {}, std::string_view payload = {}) {
    auto offset = writer.append(type, ingest_ms, topic, payload);
    REQUIRE(offset);
}

inline void write_file(const std::string& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << text;
    REQUIRE(out.good());
}

inline std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

/// Redirects std::cout into a string for its lifetime.
class CaptureStdout {
  public:
    CaptureStdout() : old_(std::cout.rdbuf(buffer_.rdbuf())) {}
    ~CaptureStdout() { std::cout.rdbuf(old_); }
    CaptureStdout(const CaptureStdout&) = delete;
    CaptureStdout& operator=(const CaptureStdout&) = delete;
    std::string text() const { return buffer_.str(); }

  private:
    std::ostringstream buffer_;
    std::streambuf* old_;
};

/// A config for DATA_DIR with the given pipelines (a JSON array's text).
inline std::string config_text(const std::string& data_dir, const std::string& pipelines) {
    return R"({"node_id": "gw-test", "data_dir": ")" + data_dir +
           R"(", "source": {"uri": "tcp://127.0.0.1:1883"}, "pipelines": )" + pipelines + "}";
}

}  // namespace tidemark::test
