// The simulation's shared vocabulary (tests/sim/appliance_sim.cpp has the overview): devices,
// pipeline definitions, the schedule of what the gateway lives through, the messages the
// devices send, and what a run recorded for the checker.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tidemark::sim {

inline constexpr const char* node_id = "gw";
/// One step of simulated time: traffic, a tick record when nothing came, the appliance's work.
inline constexpr int64_t tick_ms = 5'000;
inline constexpr int64_t second_ms = 1'000;
inline constexpr int64_t minute_ms = 60'000;

/// splitmix64: no std distributions, so a seed names the same run on every platform.
class Rng {
  public:
    explicit Rng(uint64_t seed) : state_(seed * 0x9E3779B97F4A7C15ull + 0x5151ull) {}
    uint64_t next() {
        uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    uint64_t below(uint64_t n) { return n == 0 ? 0 : next() % n; }
    int64_t range(int64_t lo, int64_t hi) {  // [lo, hi]
        return lo + static_cast<int64_t>(below(static_cast<uint64_t>(hi - lo + 1)));
    }
    bool chance(double p) { return static_cast<double>(next() >> 11) * 0x1.0p-53 < p; }
    template <typename T>
    const T& pick(const std::vector<T>& v) {
        return v[below(v.size())];
    }

  private:
    uint64_t state_;
};

/// A device: its topic is dev/<name>/m, its key the name; "site" in its payload is the
/// partition of pipelines partitioned by site.
struct Device {
    std::string name;
    std::string site;
    int64_t skew_ms = 0;  // its clock minus the gateway's (event time = true time + skew)
    int64_t period_ms = 20'000;
    int64_t jitter_ms = 0;        // a reading arrives up to this long after it was taken
    double late_chance = 0;       // a reading held back (a buffer, a flaky link) ...
    int64_t late_min_ms = 0;      // ... and sent this much later
    int64_t late_max_ms = 0;      //
    double malformed_chance = 0;  // a payload without its timestamp, or not JSON
    std::vector<std::pair<int64_t, int64_t>> online;  // [from, to) in ms since the start
};

/// One definition of a pipeline: what its version hashes, plus limits and backfill.from.
struct PipelineDef {
    std::string name;
    enum class Window { tumbling, hopping, session } window = Window::tumbling;
    int64_t size_ms = 30'000, offset_ms = 0, advance_ms = 0, gap_ms = 0, max_duration_ms = 0;
    int64_t delay_ms = 0, idle_timeout_ms = 60'000, max_future_ms = 600'000;
    bool scope_partition = false;
    bool partition_by_site = false;  // partition = the payload's site, else the key
    int64_t lateness_ms = 0;
    bool side_output = false;
    bool retract = false;
    int aggregates = 0;  // a bit set over sum, min, max, last, mean (count is always there)
    std::optional<int64_t> backfill_from_age_ms;
    uint64_t keys_max = 200;  // a limit: applied in place, not part of the version
};

/// One configuration of the appliance.
struct ConfigState {
    std::vector<PipelineDef> pipelines;
    bool compact_superseded = false;  // a store option: it changes only at a restart
};

enum class OpKind {
    reload,                  // EngineHost::reconfigure to `config`
    restart,                 // a crash, then a start with `config` (the same or another)
    upstream_down,           //
    upstream_up,             //
    fail_checkpoint,         // the next checkpoint's fdatasync of the store fails (EIO)
    fail_reload_checkpoint,  // a reload whose opening checkpoint fails
    damage_reload,           // one stored state entry damaged, then a reload, then repaired
};

struct Op {
    int64_t tick = 0;
    OpKind kind = OpKind::reload;
    int config = -1;    // index into Scenario::configs (reload, restart, *_reload)
    uint64_t pick = 0;  // which state entry to damage, how many redeliveries, ...
};

/// One reading as it reaches the gateway broker.
struct Message {
    int64_t arrival_ms = 0;  // since the start
    int device = -1;
    int64_t event_ms = 0;  // as stamped by the device (epoch ms)
    int64_t value = 0;
    enum class Shape { ok, no_timestamp, not_json, other_topic } shape = Shape::ok;
};

struct Scenario {
    uint64_t seed = 0;
    std::string family;
    int64_t t0_ms = 0;  // the gateway's clock at the start
    int64_t ticks = 0;
    std::vector<Device> devices;
    std::vector<ConfigState> configs;  // configs[0] is the first start's
    std::vector<Op> ops;               // by tick
    std::vector<Message> messages;     // by arrival
    // Pacing of the appliance's work, per tick.
    int step_every = 1;
    int step_records_max = 64;
    int backfill_steps = 1;
    int backfill_records_max = 16;
    int checkpoint_every = 2;
    int upstream_batch_max = 32;
    double upstream_pump_chance = 0.8;
    int redeliveries_max = 0;  // at a restart the broker resends up to this many messages
};

/// One record the simulation appended to the log.
struct LogEntry {
    uint64_t offset = 0;
    uint64_t next_offset = 0;
    int64_t ingest_ms = 0;
    bool tick = false;
    int message = -1;  // index into Scenario::messages
    std::string topic;
    std::string payload;
};

/// What reached the upstream broker, in order, duplicates included.
struct Received {
    bool version_record = false;
    std::string pipeline;
    uint64_t id = 0;
    std::string payload;
    uint64_t seq = 0;  // the outbox row it was
};

inline constexpr uint64_t offset_open = std::numeric_limits<uint64_t>::max();

}  // namespace tidemark::sim
