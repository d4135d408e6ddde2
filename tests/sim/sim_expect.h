// What each run of a version should have emitted: the records of its part of the log, decoded
// by docs/CONFIG.md's rules (not by adapters/codec), fed to the reference model
// (tests/core/reference_model.h). The checker's half that computes; sim_checker.cpp compares.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "tests/core/reference_model.h"
#include "tests/sim/sim_types.h"
#include "tests/sim/sim_versions.h"
#include "tests/sim/sim_world.h"

namespace tidemark::sim {

/// One result as a consumer sees it (from a record's JSON, or from a model emission).
struct Result {
    std::string key;
    int64_t start_ms = 0, end_ms = 0;
    std::string kind;  // final, update, retract
    uint32_t revision = 0;
    std::string closed_by;
    std::vector<std::optional<double>> values;  // in aggregate order; values[0] is the count
    int64_t watermark_ms = 0;
    bool operator==(const Result&) const = default;
};
std::string text(const Result& r);
Result from_emission(const core::Emission& e);

/// The model's view of one run.
struct Expected {
    const Run* run = nullptr;
    std::vector<Result> results;  // in emission order
    model::ModelStats stats;
    uint64_t malformed = 0;           // matched the topic filter but do not decode
    int64_t since_ms = 0;             // the oldest event fed before it became live (0: none)
    size_t results_before_live = 0;   // of `results`, those emitted before live_from
    int64_t switch_ms = 0;            // the ingest time of the last record before live_from
    std::set<std::string> ambiguous;  // partition|key over 256 bytes (see sim_checker.cpp)
    std::map<std::string, std::string> partition_of;  // result key -> its partition
    std::map<std::string, int> device_of;             // result key -> device
};

/// The model over the run's records; `silent_device` >= 0 turns that device's messages into
/// ticks (the gateway ticks when a device is quiet), for the partition-independence property.
Expected expect(const Scenario& s, const Recording& rec, const Run& run, int silent_device = -1);

/// The device with the largest clock skew among those with events in the run, or -1.
int most_skewed_device(const Scenario& s, const Recording& rec, const Run& run);

}  // namespace tidemark::sim
