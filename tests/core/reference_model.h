// An independent, deliberately slow model of the engine's semantics (DESIGN.md section 4 and the
// engine rules of issue 11), for differential tests against core::Engine.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/emission.h"
#include "core/pipeline.h"

namespace tidemark::model {

/// One log record as a pipeline sees it: a tick (only the clock) or an event.
struct Record {
    bool tick = false;
    int64_t ingest_ms = 0;
    std::string key;
    std::string partition;
    int64_t event_ms = 0;
    uint64_t order = 0;
    std::vector<double> fields;
};

struct ModelStats {
    uint64_t events_in = 0;
    uint64_t late_updated = 0;
    uint64_t too_late = 0;
    uint64_t too_late_partial = 0;
    uint64_t side_outputs = 0;
    uint64_t clamped = 0;
    uint64_t keys_refused = 0;
    uint64_t emitted_final = 0;
    uint64_t emitted_update = 0;
    uint64_t emitted_retract = 0;
    uint64_t keys = 0;
    uint64_t partitions_active = 0;
    uint64_t partitions_idle = 0;
};

/// Escapes `\` and `|` with a backslash: the parts of a composite result key.
std::string escape_key_part(const std::string& part);

/// Operation: step() takes the records of the log in order and appends what the engine should
/// emit. Every event of every key is kept and every window's values are recomputed from the
/// events it holds: nothing is incremental, so there is little to get wrong.
/// Limits: quantiles are exact (sorted values, nearest rank); compare them with a tolerance.
/// max_open_windows is not modelled (tests keep it out of reach).
class ReferenceModel {
  public:
    ReferenceModel(std::string node, core::PipelineSpec spec);

    void step(const Record& record);

    std::vector<core::Emission> emissions;
    // Per emission, per aggregate: the range a quantile may fall in (the exact values of the
    // ranks next to q's, before the sketch's relative error); unused for other aggregates.
    std::vector<std::vector<std::pair<double, double>>> quantile_ranges;
    std::vector<core::SideOutput> side;
    ModelStats stats;
    // How often each rule applied (for the generator's coverage, not compared).
    std::map<std::string, uint64_t> coverage;

    // Exposed for diagnostics.
    int64_t global_watermark_ms() const { return watermark_ms_; }

  private:
    struct Ev {
        int64_t t = 0;
        uint64_t order = 0;
        std::vector<double> fields;
    };
    struct Published {
        uint32_t revision = 0;
        std::vector<std::optional<double>> values;
        std::vector<std::pair<double, double>> ranges;
    };
    struct Session {
        std::vector<Ev> events;
        int64_t start = 0;
        int64_t end = 0;
        bool fired = false;
        Published published;
        int64_t earliest() const;
        int64_t latest() const;
    };
    struct Key {
        std::string partition;   // scope partition: its own; global: of its latest applied event
        std::vector<Ev> events;  // tumbling / hopping
        std::map<int64_t, bool> fired;           // window start -> fired (with or without data)
        std::map<int64_t, Published> published;  // window start -> last result
        std::vector<Session> sessions;           // sorted by start
    };
    struct Partition {
        int64_t max_event_ms = 0;
        int64_t last_ingest_ms = 0;
        bool active = true;
        // Scope partition only.
        int64_t watermark_ms = 0;
        int64_t idle_since_ms = 0;
        int64_t idle_base_ms = 0;
    };

    bool is_session() const;
    bool is_global() const;
    int64_t candidate(const Partition& p) const;
    std::vector<int64_t> window_starts(int64_t t) const;  // ascending
    int64_t window_end(int64_t start) const;
    using Values = std::vector<std::optional<double>>;
    using Ranges = std::vector<std::pair<double, double>>;
    Values aggregate(const std::vector<const Ev*>& events, Ranges* ranges) const;
    std::vector<const Ev*> window_events(const Key& key, int64_t start) const;
    static std::vector<const Ev*> session_events(const Session& s);
    int64_t domain_watermark(const std::string& partition) const;
    void recompute_session_ends(Key& key) const;
    std::vector<size_t> session_join(const Key& key, int64_t t) const;

    void advance_clock(int64_t now_ms);
    void apply_event(const Record& record);
    void fire(const std::string* partition, core::ClosedBy closed_by);
    void forget();
    // values: those of `events` (final, update) or, with events null, `published` (retract).
    void emit(core::EmissionKind kind, const std::string& key, int64_t start, int64_t end,
              uint32_t revision, core::ClosedBy closed_by, const std::vector<const Ev*>* events,
              const Published* published, int64_t watermark_ms);
    void side_output(const Record& record, int64_t t, const std::string& reason,
                     int64_t window_start, int64_t window_end, int64_t watermark_ms);

    std::string node_;
    core::PipelineSpec spec_;
    int64_t now_ms_ = 0;
    bool started_ = false;
    std::map<std::string, Partition> partitions_;
    std::map<std::string, Key> keys_;
    // Scope global.
    int64_t watermark_ms_;
    bool all_idle_ = false;
    int64_t all_idle_since_ms_ = 0;
    int64_t all_idle_base_ms_ = 0;
    // Scope partition (DECISIONS.md, "A device back after being forgotten"): each forgotten
    // partition's (W_P - now) when it was forgotten, at most keys_max of them (the lowest lead
    // given up first, ties by the stored hash of the name), and the floor, the highest
    // watermark a given-up one had when it went.
    std::map<std::string, int64_t> remembered_lead_ms_;
    int64_t floor_ms_;
    std::map<std::string, bool> ever_seen_;  // partition names, for coverage
};

}  // namespace tidemark::model
