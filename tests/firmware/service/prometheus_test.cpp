// health.prometheus_textfile (issue 29): the health figures in Prometheus's text format, as
// Debian's promtool accepts them and a real prometheus-node-exporter's textfile collector serves
// them; rewritten every health interval, atomically; bad paths refused by the config.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>

#include "adapters/config/config.h"
#include "firmware/service/prometheus_text.h"
#include "firmware/service/service_parts.h"
#include "tests/firmware/command_test_support.h"
#include "tests/support/broker.h"
#include "tests/support/manual_clock.h"

extern char** environ;

using namespace tidemark;
namespace fs = std::filesystem;

namespace {

const char* pipelines_json = R"([{"name": "p", "topic": "t/+", "key": "topic:1",
    "timestamp": {"pointer": "/ts", "format": "epoch_ms"}, "fields": {"v": "/v"},
    "window": {"type": "tumbling", "size": "10s"},
    "watermark": {"delay": "0s", "idle_timeout": "1h"},
    "late": {"allowed_lateness": "5s"},
    "aggregates": {"n": {"fn": "count"}}}])";

struct Run {
    int exit_code = -1;
    std::string output;
};

Run run_shell(const std::string& command) {
    Run r;
    FILE* p = ::popen((command + " 2>&1").c_str(), "r");
    REQUIRE(p);
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0)
        r.output.append(buf, n);
    const int status = ::pclose(p);
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return r;
}

// GET path from 127.0.0.1:port; the body, or empty when nothing answers.
std::string http_get(int port, const std::string& path) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    std::string response;
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
        const std::string request =
            "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
        if (::write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size())) {
            char buf[8192];
            ssize_t n;
            while ((n = ::read(fd, buf, sizeof buf)) > 0)
                response.append(buf, static_cast<size_t>(n));
        }
    }
    ::close(fd);
    const size_t body = response.find("\r\n\r\n");
    return body == std::string::npos ? std::string() : response.substr(body + 4);
}

// A prometheus-node-exporter with only the textfile collector, on a free loopback port.
class NodeExporter {
  public:
    explicit NodeExporter(const std::string& textfile_dir) {
        port_ = test::free_loopback_port();
        const std::string listen = "--web.listen-address=127.0.0.1:" + std::to_string(port_);
        const std::string dir = "--collector.textfile.directory=" + textfile_dir;
        const char* argv[] = {"/usr/bin/prometheus-node-exporter",
                              "--collector.disable-defaults",
                              "--collector.textfile",
                              dir.c_str(),
                              listen.c_str(),
                              nullptr};
        REQUIRE(fs::exists(argv[0]));  // Debian's prometheus-node-exporter (scripts/lib.sh)
        REQUIRE(::posix_spawn(&pid_, argv[0], nullptr, nullptr, const_cast<char**>(argv),
                              environ) == 0);
    }
    ~NodeExporter() {
        ::kill(pid_, SIGTERM);
        ::waitpid(pid_, nullptr, 0);
    }
    NodeExporter(const NodeExporter&) = delete;
    NodeExporter& operator=(const NodeExporter&) = delete;

    // /metrics once it holds `needle` (up to 10 s: the exporter takes a moment to listen).
    std::string metrics_with(const std::string& needle) {
        std::string body;
        for (int i = 0; i < 100; ++i) {
            body = http_get(port_, "/metrics");
            if (body.find(needle) != std::string::npos) break;
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        return body;
    }

  private:
    pid_t pid_ = -1;
    int port_ = 0;
};

config::Config load(const std::string& dir, const std::string& health) {
    std::string text = test::config_text(dir, pipelines_json);
    text.insert(text.rfind('}'), R"(, "storage": {"fsync": "never"}, "health": )" + health);
    auto c = config::parse_config(text, "/");
    INFO((c ? std::string() : config::format_errors(c.error())));
    REQUIRE(c);
    return *c;
}

}  // namespace

TEST_CASE("health.prometheus_textfile: promtool accepts it and node_exporter serves it") {
    test::TempDir dir("tidemark-prometheus");
    const std::string textfile_dir = dir.path() + "/node-exporter";
    fs::create_directories(textfile_dir);
    const std::string textfile = textfile_dir + "/tidemark.prom";
    const config::Config config =
        load(dir.path(), R"({"interval": "10s", "prometheus_textfile": ")" + textfile + R"("})");

    test::ManualClock clock(1'000'000 + 700'000);
    auto opened = firmware::ServiceParts::open(config, clock);
    REQUIRE(opened);
    firmware::ServiceParts& parts = **opened;
    REQUIRE(parts.host().recover([] { return false; }));
    // Three devices, 60 events, every 20th 30 s late (too late: dropped).
    auto feed = [&](int from, int to) {
        for (int i = from; i < to; ++i) {
            const int64_t ingest = 1'000'000 + i * 333;
            const int64_t ts = i % 20 == 19 ? ingest - 30'000 : ingest;
            REQUIRE(parts.host().log().append(
                log::RecordType::message, ingest, "t/d" + std::to_string(i % 3),
                R"({"ts": )" + std::to_string(ts) + R"(, "v": )" + std::to_string(i) + "}"));
        }
        for (;;) {
            auto n = parts.host().step(4096, /*drain=*/true);
            REQUIRE(n);
            if (*n == 0) break;
        }
    };
    feed(0, 60);
    REQUIRE(parts.host().checkpoint());
    parts.refresh_health(nullptr, nullptr);
    REQUIRE(fs::exists(textfile));
    CHECK_FALSE(fs::exists(textfile + ".tmp"));
    const std::string text = test::read_file(textfile);
    INFO(text);
    CHECK(text.find("tidemark_events_total{node=\"gw-test\",pipeline=\"p\"} 60\n") !=
          std::string::npos);
    CHECK(text.find("tidemark_too_late_total{node=\"gw-test\",pipeline=\"p\"} 3\n") !=
          std::string::npos);
    // The windows with the most too-late events, by rank: [980 s, 990 s) has two (events 39
    // and 59), [970 s, 980 s) one (event 19).
    const std::string labels = "{node=\"gw-test\",pipeline=\"p\",rank=";
    CHECK(text.find("tidemark_too_late_window_events" + labels + "\"1\"} 2\n") !=
          std::string::npos);
    CHECK(text.find("tidemark_too_late_window_start_seconds" + labels + "\"1\"} 980\n") !=
          std::string::npos);
    CHECK(text.find("tidemark_too_late_window_end_seconds" + labels + "\"2\"} 980\n") !=
          std::string::npos);
    CHECK(text.find("tidemark_too_late_window_events" + labels + "\"2\"} 1\n") !=
          std::string::npos);
    CHECK(text.find("rank=\"3\"") == std::string::npos);
    CHECK(text.find("# TYPE tidemark_emitted_total counter\n") != std::string::npos);
    CHECK(text.find("tidemark_emitted_total{node=\"gw-test\",pipeline=\"p\",kind=\"final\"} ") !=
          std::string::npos);
    CHECK(text.find("tidemark_checkpoints_total{node=\"gw-test\"} 1\n") != std::string::npos);
    CHECK(text.find("tidemark_resident_memory_bytes{node=\"gw-test\"} ") != std::string::npos);

    // Debian's promtool: the format and Prometheus's naming conventions (lint on).
    const Run checked = run_shell("promtool check metrics < '" + textfile + "'");
    INFO(checked.output);
    CHECK(checked.exit_code == 0);
    CHECK(checked.output.empty());

    // Within the interval the file stays as it was; after it, it says the new figures.
    feed(60, 90);
    parts.refresh_health(nullptr, nullptr);
    CHECK(test::read_file(textfile) == text);
    clock.advance(10'000);
    parts.refresh_health(nullptr, nullptr);
    const std::string later = test::read_file(textfile);
    CHECK(later.find("tidemark_events_total{node=\"gw-test\",pipeline=\"p\"} 90\n") !=
          std::string::npos);

    // A real node_exporter's textfile collector reads it without a scrape error.
    NodeExporter exporter(textfile_dir);
    const std::string metrics = exporter.metrics_with("tidemark_events_total");
    INFO(metrics.substr(0, 2000));
    CHECK(metrics.find("tidemark_events_total{node=\"gw-test\",pipeline=\"p\"} 90") !=
          std::string::npos);
    CHECK(metrics.find("node_textfile_scrape_error 0") != std::string::npos);
}

TEST_CASE("prometheus_text labels escape and nulls are left out") {
    auto text = firmware::prometheus_text(
        R"({"node": "gw \"a\"\\b", "checkpoint": {"age_ms": -1, "count": 0},
            "alarms": ["disk_full", "checkpoint_failed: no space"],
            "pipelines": {"p\nq": {"watermark_lag_ms": null, "events_in": 5,
                                    "lag_ms": {"p50": 1500, "p99": 2000, "p999": 2500}}}})");
    REQUIRE(text);
    INFO(*text);
    CHECK(text->find("tidemark_checkpoint_age_seconds") == std::string::npos);
    CHECK(text->find("tidemark_watermark_lag_seconds") == std::string::npos);
    CHECK(text->find(R"(tidemark_events_total{node="gw \"a\"\\b",pipeline="p\nq"} 5)") !=
          std::string::npos);
    CHECK(text->find(R"(tidemark_alarm{node="gw \"a\"\\b",alarm="checkpoint_failed"} 1)") !=
          std::string::npos);
    CHECK(text->find(R"(tidemark_event_lag_p99_seconds{node="gw \"a\"\\b",pipeline="p\nq"} 2)"
                     "\n") != std::string::npos);
    CHECK_FALSE(firmware::prometheus_text("[1, 2]"));
    CHECK_FALSE(firmware::prometheus_text("not json"));
}

TEST_CASE("prometheus_text: the top too-late windows by rank, their bounds in seconds") {
    auto text = firmware::prometheus_text(
        R"({"node": "gw", "pipelines": {"p": {"too_late_windows_dropped": 2,
            "too_late_windows": [{"start_ms": 1764400060000, "end_ms": 1764400120000, "too_late": 7},
                                 {"start_ms": 1764400000000, "end_ms": 1764400060000, "too_late": 3}]}}})");
    REQUIRE(text);
    INFO(*text);
    CHECK(
        text->find("# TYPE tidemark_too_late_window_events gauge\n"
                   "tidemark_too_late_window_events{node=\"gw\",pipeline=\"p\",rank=\"1\"} 7\n"
                   "tidemark_too_late_window_events{node=\"gw\",pipeline=\"p\",rank=\"2\"} 3\n") !=
        std::string::npos);
    CHECK(
        text->find("tidemark_too_late_window_start_seconds{node=\"gw\",pipeline=\"p\",rank=\"1\"} "
                   "1764400060\n") != std::string::npos);
    CHECK(text->find("tidemark_too_late_window_end_seconds{node=\"gw\",pipeline=\"p\",rank=\"2\"} "
                     "1764400060\n") != std::string::npos);
    CHECK(text->find("tidemark_too_late_windows_dropped_total{node=\"gw\",pipeline=\"p\"} 2\n") !=
          std::string::npos);
}

TEST_CASE("health.prometheus_textfile must be an absolute .prom path") {
    test::TempDir dir("tidemark-prometheus-config");
    for (const char* bad : {"tidemark.prom", "/var/lib/x/tidemark.txt", "/var/lib/x/.prom"}) {
        INFO(bad);
        std::string text = test::config_text(dir.path(), pipelines_json);
        text.insert(text.rfind('}'),
                    std::string(R"(, "health": {"prometheus_textfile": ")") + bad + R"("})");
        auto c = config::parse_config(text, "/");
        REQUIRE_FALSE(c);
        const std::string errors = config::format_errors(c.error());
        CHECK(errors.find("/health/prometheus_textfile") != std::string::npos);
        CHECK(errors.find("ending in .prom") != std::string::npos);
    }
}
