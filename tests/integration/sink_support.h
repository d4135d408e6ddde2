// What the sink's integration tests share: a sink process and its config, the consumer view
// computed independently from the upstream messages (DESIGN.md sections 4 and 10), the rows of
// the view `current` read back from PostgreSQL, synthetic result and version records.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "tests/integration/daemon.h"
#include "tests/support/postgres.h"

namespace tidemark::test {

/// A sink config: `broker_uri` as source (topics `topics`), `pg` as the database, health every
/// second, the spool in `spool_dir`, batches of `max_rows` (small in tests: more commits to
/// kill between).
nlohmann::json sink_config(const std::string& broker_uri, const Postgres& pg,
                           const std::string& client_id, const std::string& spool_dir,
                           std::vector<std::string> topics = {"tidemark/#"},
                           uint64_t max_rows = 1000);

/// `tidemark sink --config FILE` as a child process, and its health on the upstream broker.
class SinkProcess {
  public:
    SinkProcess(const std::string& dir, const nlohmann::json& config,
                const std::string& broker_uri);
    void start();
    void kill9() { daemon_->kill9(); }
    int terminate() { return daemon_->terminate(); }
    bool running() { return daemon_->running(); }
    std::string log() const { return daemon_->log(); }
    std::string health_topic() const { return health_topic_; }
    /// After a broker restart: the health watcher connects again.
    void reconnect_health();
    /// Waits for a health record (published after this call started) satisfying `ready`.
    nlohmann::json wait_health(const std::function<bool(const nlohmann::json&)>& ready,
                               std::chrono::milliseconds timeout, const std::string& what);
    /// Waits for a fresh health record saying everything spooled is committed, without alarm.
    nlohmann::json wait_committed(std::chrono::milliseconds timeout);

  private:
    std::string broker_uri_;
    std::string health_topic_;
    std::unique_ptr<Daemon> daemon_;
    std::unique_ptr<TestClient> health_;
};

/// One row of `current`, as the test compares it.
struct CurrentRow {
    std::string id, closed_by;
    int64_t revision = 0;
    nlohmann::json values;  ///< name -> number or null
    bool operator==(const CurrentRow&) const = default;
};
/// (node, pipeline, version, key, window_start, window_end)
using WindowId = std::tuple<std::string, std::string, std::string, std::string, int64_t, int64_t>;
using CurrentView = std::map<WindowId, CurrentRow>;

/// What the upstream messages say `current` must hold: per (node, pipeline) the version record
/// with the highest switch_ms (an empty one removes it), per window identity the record of the
/// highest (revision, retract wins) rank; the windows at the named version whose record is not a
/// retract. Computed here, from the messages, without the sink's code.
CurrentView consumer_view(const std::vector<ReceivedMessage>& messages);

/// `current` as PostgreSQL holds it now.
CurrentView current_view(const Postgres& pg, const std::string& schema = "tidemark");

/// "" when equal, else the first differences (at most a few) in words.
std::string view_difference(const CurrentView& expected, const CurrentView& actual);

/// Polls until `current` equals `expected` (or `timeout`); the last difference, "" when equal.
std::string wait_for_view(const Postgres& pg, const CurrentView& expected,
                          std::chrono::milliseconds timeout);

/// A result record as a gateway writes it (DESIGN.md section 7).
std::string result_json(const std::string& node, const std::string& pipeline,
                        const std::string& version, const std::string& key, int64_t start_ms,
                        int64_t end_ms, int64_t revision, const std::string& kind,
                        const nlohmann::json& values);
/// A version record as a gateway writes it (DESIGN.md section 4).
std::string version_json(const std::string& node, const std::string& pipeline,
                         const std::string& version, int64_t switch_ms,
                         const nlohmann::json& aggregates);

/// Waits until `client` has seen no new message for `quiet` (at most `timeout`); all it has.
std::vector<ReceivedMessage> wait_quiet(TestClient& client, std::chrono::milliseconds quiet,
                                        std::chrono::milliseconds timeout);

}  // namespace tidemark::test
