// The checker's parts (internal to tests/sim): the failures list, and the checks of the run as
// a whole that sim_checker.cpp's result checks call (sim_checks_runs.cpp).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "tests/sim/sim_expect.h"
#include "tests/sim/sim_world.h"

namespace tidemark::sim {

/// The first few failures of each kind in full, a count of the rest.
class Failures {
  public:
    void add(const std::string& kind, const std::string& text);
    std::vector<std::string> list() const;

  private:
    static constexpr int shown_per_kind = 2;
    std::vector<std::string> shown_;
    std::map<std::string, int> count_;
};

/// The downstream's version table (DESIGN.md section 10: per pipeline the record with the
/// highest switch_ms, an empty record deletes it) names each pipeline's last live version, with
/// its previous version, switch_ms and since_ms; a record is cleared only for a removed pipeline.
void check_version_records(const Recording& rec, const std::vector<Expected>& expected,
                           Failures& out);

/// The host's counters of each pipeline's last live version are the model's over its run.
void check_counters(const Recording& rec, const std::vector<Expected>& expected, Failures& out);

/// Scope partition (DESIGN.md section 4): what one device does never makes another device's
/// events late or refused. The most skewed device and one more, each turned silent in turn,
/// change no other partition's results.
void check_partition_independence(const Scenario& s, const Recording& rec,
                                  const std::vector<Expected>& expected, Failures& out);

}  // namespace tidemark::sim
