// Integration-test helpers: the tidemark binary as a child process, its commands, configs
// written to files, the health record and upstream results as the tests read them.
// Failures throw std::runtime_error (Catch reports the message).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/support/broker.h"

namespace tidemark::test {

/// Path of the tidemark binary under test (compile definition TIDEMARK_BINARY).
std::string tidemark_binary();

/// Wall clock, ms since the epoch.
int64_t now_ms();

/// Writes `text` to `path` (truncating); throws when it cannot.
void write_file(const std::string& path, const std::string& text);
std::string read_file_text(const std::string& path);

struct CommandResult {
    int exit_code = -1;  ///< exit status, or 128 + signal when killed
    std::string out;
    std::string err;
};

/// Runs `tidemark ARGS...` to completion (SIGKILL after `timeout`), capturing stdout and stderr.
CommandResult run_tidemark(const std::vector<std::string>& args,
                           std::chrono::milliseconds timeout = std::chrono::seconds(60));

/// Operation: `tidemark run --config FILE` (or another `command`: `sink`, `status`, with
/// `extra_args` after the config) as a child process (fork/exec), its stdout and stderr
/// appended to one file so that restarts keep the whole story. Dies with the test
/// (PR_SET_PDEATHSIG). The destructor SIGKILLs a daemon still running.
class Daemon {
  public:
    Daemon(std::string config_path, std::string log_path, std::string command = "run",
           std::vector<std::string> extra_args = {});
    ~Daemon();
    Daemon(const Daemon&) = delete;
    Daemon& operator=(const Daemon&) = delete;

    void start();  ///< throws when already running
    bool running();
    /// SIGTERM, then wait up to `timeout`; the exit code (128 + signal when killed). A daemon
    /// that does not stop in time is SIGKILLed and the call throws.
    int terminate(std::chrono::milliseconds timeout = std::chrono::seconds(20));
    void kill9();  ///< SIGKILL and reap
    /// Waits for the process to exit by itself; its exit code, or -1 on timeout.
    int wait_exit(std::chrono::milliseconds timeout);
    std::string log() const;  ///< everything the daemon wrote so far
    int starts() const { return starts_; }
    pid_t pid() const { return pid_; }  ///< -1 when not running

  private:
    std::string config_path_;
    std::string log_path_;
    std::string command_;
    std::vector<std::string> extra_args_;
    pid_t pid_ = -1;
    int starts_ = 0;
    int last_status_ = -1;
};

/// The shared skeleton of a test config: node `node`, data_dir `data_dir`, the gateway broker as
/// source, `upstream_uri` as upstream (absent when empty), health every second, checkpoint
/// every second. Callers add "pipelines".
nlohmann::json base_config(const std::string& node, const std::string& data_dir,
                           const std::string& gateway_uri, const std::string& upstream_uri);

/// Writes `config` to DIR/NAME and returns the path.
std::string write_config(const std::string& dir, const std::string& name,
                         const nlohmann::json& config);

/// The health JSON records received so far on `client` (subscribed to the health topic);
/// payloads that are not JSON objects (status "online"/"offline") are skipped.
std::vector<nlohmann::json> health_records(const TestClient& client,
                                           const std::string& health_topic);

/// Waits until the newest health record on `health_topic` satisfies `ready`; returns it.
/// Throws with the last record seen on timeout.
nlohmann::json wait_health(TestClient& client, const std::string& health_topic,
                           const std::function<bool(const nlohmann::json&)>& ready,
                           std::chrono::milliseconds timeout, const std::string& what);

/// One result record (DESIGN.md section 7) as received upstream.
struct ResultRecord {
    std::string raw;  ///< the payload exactly as received
    std::string id, node, pipeline, key, kind, closed_by;
    int64_t start_ms = 0, end_ms = 0, watermark_ms = 0;
    int64_t revision = 0;
    nlohmann::json values;
};

/// Parses a result payload; throws with the payload when it is not a result record.
ResultRecord parse_result(const std::string& payload);

/// Every message received on topics that do not end in "/side" parsed as results, in order.
std::vector<ResultRecord> parse_results(const std::vector<ReceivedMessage>& messages);

/// Window identity for a consumer's upsert.
struct WindowKey {
    std::string pipeline, key;
    int64_t start_ms = 0, end_ms = 0;
    auto operator<=>(const WindowKey&) const = default;
};

/// The consumer of DESIGN.md section 5: dedupe by id, then per (pipeline, key, window) keep
/// the highest revision, a retract winning a tie. Windows whose kept record is a retract are
/// left out.
std::map<WindowKey, ResultRecord> upsert_view(const std::vector<ResultRecord>& results);

/// A pipeline over sensors/+/telemetry ({"ts": epoch ms, "v": ...}, keyed by the device),
/// global watermark, drop too-late events, 100 keys: what the tests vary is below.
struct TestPipeline {
    nlohmann::json window = {{"type", "tumbling"}, {"size", "10s"}};
    nlohmann::json aggregates = {{"n", {{"fn", "count"}}}};
    std::string delay = "1s", idle_timeout = "2s", allowed_lateness = "0s";
    std::string corrections = "upsert";
    int max_open_windows = 10000;
};
nlohmann::json test_pipeline(const std::string& name, const TestPipeline& p);

/// A JSON telemetry payload {"ts":TS,"v":V} (integers print without a fraction).
std::string telemetry(int64_t ts_ms, int64_t value);
std::string telemetry_seq(int64_t ts_ms, int64_t seq);  ///< {"ts":TS,"seq":N,"v":1}

/// The usual scene: a gateway broker, an upstream broker, a data directory, a client watching
/// health on the gateway and a client collecting results upstream (subscribed before tidemark
/// starts), and the daemon.
struct Rig {
    Rig(std::string node_id, Broker::Options gateway_options, Broker::Options upstream_options,
        bool persistent_collector = false);
    ~Rig();

    /// base_config() for this rig; callers add pipelines.
    nlohmann::json config() const;
    /// Writes the config, starts tidemark and waits until health says ingest is connected.
    void start(const nlohmann::json& config);
    nlohmann::json wait_health(const std::function<bool(const nlohmann::json&)>& ready,
                               std::chrono::milliseconds timeout, const std::string& what);
    std::string health_topic() const { return "tidemark/" + node + "/health"; }
    std::string results_filter() const { return "tidemark/" + node + "/+"; }
    /// Results collected so far (over every collector connection).
    std::vector<ResultRecord> results() const;
    /// After an upstream broker restart: connects the persistent collector again (the broker
    /// kept its session and queued messages).
    void reconnect_collector();
    /// After a gateway broker restart: the health watcher connects again.
    void reconnect_health();
    std::string daemon_log() const { return daemon ? daemon->log() : std::string(); }

    std::string node;
    Broker gateway;
    Broker upstream;
    TempDir dir;
    std::string config_path;
    std::unique_ptr<TestClient> health_client;
    std::unique_ptr<TestClient> collector;
    std::unique_ptr<Daemon> daemon;

  private:
    bool persistent_collector_;
    std::vector<ReceivedMessage> earlier_results_;  // from collector connections now closed
};

/// Operation: one thread per device publishing {"ts":now,"seq":n,"v":1} at QoS1 to
/// sensors/DEVICE/telemetry every `period`, counting what the broker acknowledged. A publish that
/// fails (broker gone) is retried on a new connection until acknowledged; hold() parks every
/// thread between two publishes so that a test can restart the broker without a message in
/// flight (a message the broker took but did not acknowledge would be published twice).
/// Limits: one connection per device; the seq counters are the only state.
class SteadyPublisher {
  public:
    SteadyPublisher(std::string uri, std::vector<std::string> devices,
                    std::chrono::milliseconds period);
    ~SteadyPublisher();
    SteadyPublisher(const SteadyPublisher&) = delete;
    SteadyPublisher& operator=(const SteadyPublisher&) = delete;

    void start();
    void stop();     ///< stops and joins; idempotent
    void hold();     ///< returns when every thread is parked between publishes
    void release();  ///< lets them go on
    /// Acknowledged messages per device.
    std::map<std::string, int64_t> published() const;
    int64_t retries() const;
    std::vector<std::string> errors() const;

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

/// Polls `predicate` every 50 ms until it holds or `timeout` passes; its last value.
bool eventually(const std::function<bool()>& predicate, std::chrono::milliseconds timeout);

}  // namespace tidemark::test
