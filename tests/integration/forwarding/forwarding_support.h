// Helpers of the store-and-forward tests: the tidemark daemon as a child process, a config
// builder, health snapshots read from the gateway broker, the replay reference and the
// comparisons (dedupe by id, upsert by window) that an upstream consumer makes.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "tests/support/broker.h"

#ifndef TIDEMARK_BIN
#error "TIDEMARK_BIN (the tidemark executable) must be defined by the build"
#endif

namespace tidemark::test::fwd {

using json = nlohmann::json;
using namespace std::chrono_literals;

inline constexpr const char* node_id = "fw-node";
inline constexpr const char* health_topic = "tidemark/fw-node/health";
inline constexpr const char* status_topic = "tidemark/fw-node/status";

inline std::string read_file(const std::string& path) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

inline void write_file(const std::string& path, const std::string& text) {
    std::ofstream out(path, std::ios::trunc);
    out << text;
    if (!out) throw std::runtime_error("cannot write " + path);
}

/// Polls `done` every `poll` until it holds or `timeout` passes; returns its last value.
inline bool wait_until(const std::function<bool()>& done, std::chrono::milliseconds timeout,
                       std::chrono::milliseconds poll = 100ms) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
        if (done()) return true;
        if (std::chrono::steady_clock::now() >= deadline) return false;
        std::this_thread::sleep_for(poll);
    }
}

/// Runs a program to completion with stdout and stderr in `log_path`; returns its exit code.
inline int run_program(const std::vector<std::string>& argv, const std::string& log_path) {
    const pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) {
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        const int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            ::dup2(fd, STDOUT_FILENO);
            ::dup2(fd, STDERR_FILENO);
            ::close(fd);
        }
        std::vector<char*> args;
        for (const auto& a : argv)
            args.push_back(const_cast<char*>(a.c_str()));
        args.push_back(nullptr);
        ::execv(args[0], args.data());
        ::_exit(127);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/// Where a test keeps tidemark's log, outside its temporary directory so that it survives a
/// failure: TIDEMARK_BUILD_DIR/Testing/forwarding/NAME.log (or /tmp/NAME.log). Truncated here.
inline std::string daemon_log_path(const std::string& name) {
    const char* build = std::getenv("TIDEMARK_BUILD_DIR");
    std::string dir = build ? std::string(build) + "/Testing/forwarding" : std::string("/tmp");
    (void)std::system(("mkdir -p '" + dir + "'").c_str());
    const std::string path = dir + "/" + name + ".log";
    write_file(path, "");
    return path;
}

/// `tidemark run --config FILE` as a child process; its stderr goes to `log_path` (appended,
/// so that the log of every run of one test stays in one file).
class Daemon {
  public:
    Daemon(std::string config_path, std::string log_path)
        : config_path_(std::move(config_path)), log_path_(std::move(log_path)) {}
    ~Daemon() { kill9(); }
    Daemon(const Daemon&) = delete;
    Daemon& operator=(const Daemon&) = delete;

    void start() {
        if (pid_ > 0) throw std::runtime_error("tidemark is already running");
        const pid_t pid = ::fork();
        if (pid < 0) throw std::runtime_error("fork failed");
        if (pid == 0) {
            ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the test
            const int fd = ::open(log_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
            if (fd >= 0) {
                ::dup2(fd, STDOUT_FILENO);
                ::dup2(fd, STDERR_FILENO);
                ::close(fd);
            }
            ::execl(TIDEMARK_BIN, TIDEMARK_BIN, "run", "--config", config_path_.c_str(),
                    static_cast<char*>(nullptr));
            ::_exit(127);
        }
        pid_ = pid;
    }
    /// True while the process has not exited (reaps it when it has).
    bool alive() {
        if (pid_ <= 0) return false;
        int status = 0;
        const pid_t r = ::waitpid(pid_, &status, WNOHANG);
        if (r == 0) return true;
        exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        pid_ = -1;
        return false;
    }
    /// SIGTERM, then waits up to `timeout`; returns the exit code (-1: had to SIGKILL).
    int terminate(std::chrono::milliseconds timeout = 15s) {
        if (!alive()) return exit_code_;
        ::kill(pid_, SIGTERM);
        if (wait_until([&] { return !alive(); }, timeout, 20ms)) return exit_code_;
        kill9();
        return -1;
    }
    void kill9() {
        if (pid_ <= 0) return;
        ::kill(pid_, SIGKILL);
        int status = 0;
        ::waitpid(pid_, &status, 0);
        exit_code_ = 128 + SIGKILL;
        pid_ = -1;
    }
    pid_t pid() const { return pid_; }
    std::string log() const { return read_file(log_path_); }
    const std::string& log_path() const { return log_path_; }

  private:
    std::string config_path_, log_path_;
    pid_t pid_ = -1;
    int exit_code_ = -1;
};

/// The config every test starts from: one tumbling 1 s pipeline keyed by the topic's device
/// level, event time from /ts, corrections upserted within 5 s of lateness. One partition (the
/// first topic level), so that the watermark is the latest event time and Load::flush() closes
/// every window; idle timeout long so that nothing but the events moves the watermark.
inline json base_config(const std::string& dir, const Broker& gateway, const std::string& up_uri) {
    return json{
        {"node_id", node_id},
        {"data_dir", dir + "/data"},
        {"storage", {{"map_size", "256MiB"}, {"fsync", "interval"}, {"fsync_interval", "100ms"}}},
        {"checkpoint", {{"interval", "1s"}}},
        {"source", {{"uri", gateway.uri()}, {"client_id", "tidemark-fw-node"}}},
        {"upstream",
         {{"uri", up_uri},
          {"client_id", "fw-node-up"},
          {"topic", "tidemark/{node_id}/{pipeline}"},
          {"qos", 1},
          {"max_inflight", 64},
          {"outbox", {{"max_bytes", "16MiB"}, {"when_full", "drop_oldest"}}},
          {"compact_superseded", false}}},
        {"health", {{"topic", "tidemark/{node_id}/health"}, {"interval", "1s"}}},
        {"log_level", "info"},
        {"pipelines",
         json::array(
             {json{{"name", "t1s"},
                   {"topic", "sensors/+/telemetry"},
                   {"key", "topic:1"},
                   {"partition", "topic:0"},
                   {"timestamp", {{"pointer", "/ts"}, {"format", "epoch_ms"}}},
                   {"fields", {{"temp", "/temp"}}},
                   {"window", {{"type", "tumbling"}, {"size", "1s"}}},
                   {"watermark", {{"delay", "0s"}, {"idle_timeout", "1h"}, {"max_future", "1h"}}},
                   {"late",
                    {{"allowed_lateness", "5s"}, {"too_late", "drop"}, {"corrections", "upsert"}}},
                   {"aggregates",
                    {{"n", {{"fn", "count"}}},
                     {"avg", {{"fn", "mean"}, {"field", "temp"}}},
                     {"max", {{"fn", "max"}, {"field", "temp"}}}}},
                   {"limits", {{"max_keys", 1000}, {"max_open_windows", 100000}}}}})}};
}

/// The upstream broker of the outage tests: persistence on, so that the consumer's session
/// (and what is queued for it) survives a restart.
inline Broker persistent_broker(int max_inflight = 100) {
    Broker::Options options;
    options.persistence = true;
    options.max_inflight = max_inflight;
    return Broker::start(options);
}

inline std::string write_config(const std::string& dir, const json& config) {
    const std::string path = dir + "/tidemark.json";
    write_file(path, config.dump(2));
    return path;
}

/// Event time of the generated load: ten minutes in the past, on a whole second, so that no
/// event is clamped as "in the future" and windows line up.
inline int64_t load_base_ms() {
    const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
    return (now - 600'000) / 1000 * 1000;
}

/// Generates telemetry for `keys` devices whose event time advances step_ms per round, with a
/// late event (a correction of a fired window) every 8th round, and publishes it at QoS1.
class Load {
  public:
    Load(TestClient& client, int keys, int64_t base_ms, int64_t step_ms = 250)
        : client_(client), keys_(keys), base_ms_(base_ms), step_ms_(step_ms) {}
    void round() {
        const int64_t t = base_ms_ + round_ * step_ms_;
        for (int k = 0; k < keys_; ++k)
            publish(k, t, 20.0 + (round_ * 7 + k) % 50 / 10.0);
        if (round_ % 8 == 7) publish(round_ % keys_, t - 2'000, 99.5);
        ++round_;
    }
    void rounds(int n) {
        for (int i = 0; i < n; ++i)
            round();
    }
    /// Rounds until `duration` of wall time has passed.
    void for_duration(std::chrono::milliseconds duration) {
        const auto end = std::chrono::steady_clock::now() + duration;
        while (std::chrono::steady_clock::now() < end)
            round();
    }
    /// One event far ahead on its own key: the watermark passes every window generated so far
    /// and past their allowed lateness, so that each fires and is final.
    void flush() {
        const int64_t t = base_ms_ + round_ * step_ms_ + 60'000;
        client_.publish("sensors/flush/telemetry", json{{"ts", t}, {"temp", 0.0}}.dump(), 1);
        ++published_;
    }
    long published() const { return published_; }

    void publish(int key, int64_t ts, double temp) {
        client_.publish("sensors/dev-" + std::to_string(key) + "/telemetry",
                        json{{"ts", ts}, {"temp", temp}}.dump(), 1);
        ++published_;
    }

  private:
    TestClient& client_;
    int keys_;
    int64_t base_ms_;
    int64_t step_ms_;
    long round_ = 0;
    long published_ = 0;
};

/// The latest health snapshot collected by a client subscribed to the health topic.
inline json latest_health(const TestClient& client) {
    const auto messages = client.messages();
    for (auto it = messages.rbegin(); it != messages.rend(); ++it)
        if (it->topic == health_topic) return json::parse(it->payload, nullptr, false);
    return json();
}

/// The value at a JSON pointer of a health snapshot, or `fallback` when absent or null.
template <typename T>
T hget(const json& h, const std::string& pointer, T fallback) {
    if (!h.is_object()) return fallback;
    const json::json_pointer p(pointer);
    if (!h.contains(p) || h.at(p).is_null()) return fallback;
    return h.at(p).get<T>();
}

/// A value at a JSON pointer of the latest health, or `fallback` when absent.
template <typename T>
T health_value(const TestClient& client, const std::string& pointer, T fallback) {
    return hget<T>(latest_health(client), pointer, fallback);
}

/// Waits until health says ingest is connected (its subscriptions are in place: messages
/// published from now on reach tidemark) and, when `upstream` is set, the upstream link is up.
inline bool wait_ready(const TestClient& health, bool upstream,
                       std::chrono::milliseconds timeout = 20s) {
    return wait_until(
        [&] {
            const json h = latest_health(health);
            return hget(h, "/ingest/connected", false) &&
                   (!upstream || hget(h, "/upstream/link_up", false));
        },
        timeout);
}

/// Waits for a health snapshot published after this call (the previous ones are stale).
inline json fresh_health(const TestClient& client, std::chrono::milliseconds timeout = 5s) {
    const auto seen = client.messages().size();
    json h;
    wait_until(
        [&] {
            const auto m = client.messages();
            if (m.size() <= seen) return false;
            h = latest_health(client);
            return true;
        },
        timeout, 50ms);
    return h;
}

/// A result record as an upstream consumer sees it.
struct Result {
    std::string id;
    std::string pipeline, key;
    int64_t start = 0, end = 0;
    int64_t revision = 0;
    std::string kind;
    std::string payload;
    json values;
};

inline Result parse_result(const std::string& payload) {
    const json j = json::parse(payload);
    Result r;
    r.id = j.at("id").get<std::string>();
    r.pipeline = j.at("pipeline").get<std::string>();
    r.key = j.at("key").get<std::string>();
    r.start = j.at("window").at("start").get<int64_t>();
    r.end = j.at("window").at("end").get<int64_t>();
    r.revision = j.at("revision").get<int64_t>();
    r.kind = j.at("kind").get<std::string>();
    r.values = j.at("values");
    r.payload = payload;
    return r;
}

/// Results received upstream on `prefix`... topics (health, status and the retained version
/// records excluded).
inline std::vector<Result> received_results(const TestClient& client) {
    std::vector<Result> out;
    for (const auto& m : client.messages())
        if (m.topic.rfind("tidemark/", 0) == 0 && m.topic.find("/health") == std::string::npos &&
            m.topic.find("/status") == std::string::npos && !m.topic.ends_with("/version"))
            out.push_back(parse_result(m.payload));
    return out;
}

/// `tidemark replay --config C --out F` over the whole retained log: the reference results.
inline std::vector<Result> replay_reference(const std::string& dir,
                                            const std::string& config_path) {
    const std::string out = dir + "/replay.jsonl";
    const int rc = run_program({TIDEMARK_BIN, "replay", "--config", config_path, "--out", out},
                               dir + "/replay.log");
    if (rc != 0)
        throw std::runtime_error("tidemark replay exited with " + std::to_string(rc) + ": " +
                                 read_file(dir + "/replay.log"));
    std::vector<Result> results;
    std::ifstream in(out);
    std::string line;
    while (std::getline(in, line))
        if (!line.empty()) results.push_back(parse_result(line));
    return results;
}

inline std::set<std::string> ids_of(const std::vector<Result>& results) {
    std::set<std::string> ids;
    for (const auto& r : results)
        ids.insert(r.id);
    return ids;
}

using WindowKey = std::tuple<std::string, std::string, int64_t, int64_t>;

/// What an upstream consumer keeps: per (pipeline, key, window) the record with the highest
/// revision (kind and values).
inline std::map<WindowKey, std::pair<int64_t, std::string>> upserted(
    const std::vector<Result>& results) {
    std::map<WindowKey, std::pair<int64_t, std::string>> table;
    for (const auto& r : results) {
        const WindowKey k{r.pipeline, r.key, r.start, r.end};
        auto it = table.find(k);
        if (it == table.end() || r.revision > it->second.first)
            table[k] = {r.revision, r.kind + " " + r.values.dump()};
    }
    return table;
}

/// Ids received more than once whose payloads differ (must be none: an id names one record).
inline std::vector<std::string> conflicting_duplicates(const std::vector<Result>& results) {
    std::map<std::string, std::string> first;
    std::vector<std::string> bad;
    for (const auto& r : results) {
        auto [it, inserted] = first.emplace(r.id, r.payload);
        if (!inserted && it->second != r.payload) bad.push_back(r.id);
    }
    return bad;
}

/// Elements of `a` not in `b`, at most `limit`, as text for a failure message.
inline std::string missing_text(const std::set<std::string>& a, const std::set<std::string>& b,
                                size_t limit = 5) {
    std::string text;
    size_t n = 0;
    for (const auto& x : a)
        if (!b.count(x)) {
            if (n < limit) text += x + " ";
            ++n;
        }
    return std::to_string(n) + " missing: " + text;
}

}  // namespace tidemark::test::fwd

namespace tidemark::test::fwd {

/// The upstream consumer: a persistent session (clean session off) on `tidemark/#`, so that
/// what the forwarder publishes while the consumer reconnects after a broker restart is
/// queued for it. Keeps what every connection received.
class Consumer {
  public:
    explicit Consumer(const Broker& upstream, std::string client_id = "fw-consumer")
        : uri_(upstream.uri()), client_id_(std::move(client_id)) {
        reconnect();
    }
    /// After the broker restarted: a new connection to the same session.
    void reconnect() {
        if (client_) {
            for (auto& m : client_->messages())
                earlier_.push_back(std::move(m));
            client_.reset();
        }
        client_ = std::make_unique<TestClient>(TestClient::connect(uri_, client_id_, false));
        client_->subscribe("tidemark/#", 1);
    }
    /// The broker went away: keep what was received (the connection is dead).
    void lost() {
        if (!client_) return;
        for (auto& m : client_->messages())
            earlier_.push_back(std::move(m));
        client_.reset();
    }
    std::vector<Result> results() const {
        std::vector<Result> out;
        auto add = [&](const std::vector<ReceivedMessage>& messages) {
            for (const auto& m : messages)
                if (m.topic.find("/health") == std::string::npos &&
                    m.topic.find("/status") == std::string::npos &&
                    !m.topic.ends_with("/version"))  // the retained version records
                    out.push_back(parse_result(m.payload));
        };
        add(earlier_);
        if (client_) add(client_->messages());
        return out;
    }
    size_t count() const { return earlier_.size() + (client_ ? client_->messages().size() : 0); }

  private:
    std::string uri_, client_id_;
    std::unique_ptr<TestClient> client_;
    std::vector<ReceivedMessage> earlier_;
};

}  // namespace tidemark::test::fwd
