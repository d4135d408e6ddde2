// The simulated gateway: the real engine host (firmware/service/engine_host.h) with the real LMDB
// store and log in a temporary directory, a manual clock, the devices' messages through the
// redelivery filter into the log, the simulated upstream, and the scenario's events (reloads,
// crashes and restarts, outages, injected faults). It records what happened for the checker
// and reports, as they happen, the failures only the run can see (a checkpoint or a reload
// that failed without a fault, a registry that left DESIGN's rules).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "adapters/config/config.h"
#include "adapters/mqtt/redelivery_filter.h"
#include "core/engine.h"
#include "firmware/service/alarms.h"
#include "firmware/service/engine_host.h"
#include "firmware/service/log_appender.h"
#include "firmware/service/processor.h"
#include "tests/sim/sim_types.h"
#include "tests/sim/sim_upstream.h"
#include "tests/sim/sim_versions.h"
#include "tests/support/manual_clock.h"

namespace tidemark::sim {

/// The live version of a pipeline at the end: what the host counted.
struct Figures {
    std::string pipeline;
    std::string version;
    core::PipelineStats stats;
    firmware::DecodeCounters decode;
};

/// Everything the checker reads.
struct Recording {
    std::vector<LogEntry> log;
    std::vector<Received> upstream;
    VersionTracker versions;
    std::vector<Figures> figures;
    bool compaction_ever = false;
    bool finished = false;  // the run reached its end (else it stopped at a failure)
    uint64_t end_of_log = 0;
};

using Reporter = std::function<void(const std::string&)>;

class World {
  public:
    /// `dir` is an empty directory for the data; `fail` gets each failure as it is found,
    /// `note` (may be empty) a journal line per event for --verbose.
    World(const Scenario& scenario, std::string dir, Reporter fail, Reporter note);
    ~World();
    /// Runs the scenario to its end, or to the first failure after which it cannot go on.
    Recording run();

  private:
    bool open(int config, const std::string& why);
    void crash();
    void apply_op(const Op& op);
    void reload(const Op& op, bool fail_checkpoint);
    void damage_reload(const Op& op);
    bool reconfigure(int config, const std::string& why, bool fault_expected);
    bool write_state(const std::string& key, const std::string& value);
    std::string live_state();
    void traffic(int64_t tick);
    void append_message(int index, bool redelivered);
    void work(int64_t tick);
    bool checkpoint(const std::string& why, bool fault_expected);
    size_t backfill_step(size_t records_max, const std::string& why);
    void observe_plan(const std::string& why);
    void drain();
    void read_back();
    std::vector<Candidate> candidates(int config);
    void failure(const std::string& text);
    void say_repeats();

    const Scenario& s_;
    std::string dir_;
    Reporter fail_, note_;
    test::ManualClock clock_;
    Rng rng_;
    std::unique_ptr<config::Config> config_;
    std::unique_ptr<firmware::Alarms> alarms_;
    std::unique_ptr<firmware::EngineHost> host_;
    // Ingest's filter (firmware::LogAppender's), seeded from the log at each start like the
    // service's.
    std::unique_ptr<mqtt::RedeliveryFilter> filter_;
    int running_ = 0;  // the config the host runs (as last applied)
    size_t switches_seen_ = 0;
    size_t next_message_ = 0;               // the next of Scenario::messages to arrive
    std::vector<int> connection_messages_;  // appended on the current broker connection
    Upstream upstream_;
    Recording rec_;
    bool stopped_ = false;  // a failure the run cannot go past
    std::string where_;     // the tick, for reports
    std::map<std::string, int> repeats_;
};

}  // namespace tidemark::sim
