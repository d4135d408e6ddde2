// `tidemark advise` and the watermark advisor behind it: lag quantiles and the cost of each
// delay (command_advise_analysis.cpp), their text (command_advise_text.cpp), the command.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "adapters/config/config.h"
#include "core/pipeline.h"
#include "core/result.h"

namespace tidemark::firmware {

/// Bounds on the advisor's memory, whatever the length of the log.
struct AdviseLimits {
    /// Partitions tracked (newest event time and a lag sketch each); events of further
    /// partitions are counted in `events_untracked` and left out of the on-time shares.
    uint64_t partitions_max = 100'000;
    /// Out-of-order events whose disorder is remembered (8 bytes each) so that the quantile
    /// candidates are counted in one pass; past it the log is read a second time.
    uint64_t disorder_values_max = 4'000'000;
    /// Partitions listed in the report, worst p99 lag first.
    size_t partitions_listed_max = 10;
};

inline constexpr double advise_sketch_relative_error = 0.01;

struct LagQuantile {
    double q = 0;       // 0.5, 0.9, ...
    double lag_ms = 0;  // within advise_sketch_relative_error of the exact value at that rank
};

/// What one watermark delay would have done over the events read.
struct DelayCandidate {
    int64_t delay_ms = 0;
    std::string origin;        // "" for the fixed list, else the lag quantile it came from ("p99")
    uint64_t late_events = 0;  // events whose partition had seen an event more than delay newer
    double on_time_percent = 100;
    int64_t added_latency_ms = 0;  // a window is emitted this much after its end is seen
    uint64_t windows_per_key = 0;  // core::windows_per_key_estimate with this delay
};

struct PartitionLag {
    std::string partition;
    uint64_t events = 0;
    double p50_ms = 0;
    double p99_ms = 0;
    int64_t disorder_max_ms = 0;  // the largest (newest event seen) - event_ms in the partition
};

/// [lower_ms, upper_ms) of lag; the first bucket holds every negative lag (clocks ahead of the
/// gateway), the last everything from its lower bound up.
struct LagBucket {
    int64_t lower_ms = 0;
    int64_t upper_ms = 0;
    uint64_t count = 0;
};

struct AdviseReport {
    std::string pipeline;
    double target_percent = 99.9;
    uint64_t records = 0;           // log records read
    uint64_t events = 0;            // events of this pipeline decoded
    uint64_t malformed = 0;         // records matching the pipeline's topic that did not decode
    uint64_t events_untracked = 0;  // in partitions past partitions_max
    uint64_t partitions = 0;
    bool second_pass = false;  // the log was read twice (see disorder_values_max)
    double relative_error = advise_sketch_relative_error;
    int64_t lag_min_ms = 0;                      // exact
    int64_t lag_max_ms = 0;                      // exact
    std::vector<LagQuantile> quantiles;          // p50, p90, p99, p99.9, p99.99
    std::vector<PartitionLag> partitions_worst;  // by p99 lag, at most partitions_listed_max
    std::vector<LagBucket> histogram;
    std::vector<DelayCandidate> candidates;  // by delay, ascending, no two equal
    std::optional<size_t> recommended;       // index into candidates
};

/// Computes the report from events fed in log order.
///
/// Operation: add() takes each event's partition, event time and ingest time. Lag (ingest -
/// event) goes into a QuantileSketch (relative error advise_sketch_relative_error) and an exact
/// bucket count; disorder (the newest event time seen in the partition so far - event time) is
/// exact per event: it is what a watermark of (newest event - delay) makes late. Late counts of
/// the fixed candidates are kept as events arrive; those of the lag-quantile candidates come
/// from the remembered disorders, or, when there were more than disorder_values_max of them,
/// from a second feed of the same events: begin_second_pass(), then add_again() for each.
/// Concurrency: none; one owner.
/// Limits: see AdviseLimits.
class LagAdvisor {
  public:
    LagAdvisor(core::PipelineSpec spec, double target_percent, AdviseLimits limits = {});
    ~LagAdvisor();
    LagAdvisor(const LagAdvisor&) = delete;
    LagAdvisor& operator=(const LagAdvisor&) = delete;

    void add(std::string_view partition, int64_t event_ms, int64_t ingest_ms);
    /// More disorders than disorder_values_max: the quantile candidates need a second feed.
    bool needs_second_pass() const;
    void begin_second_pass();
    void add_again(std::string_view partition, int64_t event_ms);

    AdviseReport report() const;

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

/// Reads the log in log_dir (read-only, up to its end when called) and feeds every event of the
/// pipeline to a LagAdvisor; `records`/`malformed` of the report are filled here.
Result<AdviseReport> advise_log(const config::PipelineConfig& pipeline, const std::string& log_dir,
                                double target_percent, const AdviseLimits& limits = {});

/// The report as `tidemark advise` prints it, histogram bars at most `bar_columns` wide
/// (command_advise_text.cpp).
std::string format_advise_report(const AdviseReport& report, int bar_columns = 60);
/// How the report names a quantile: "p99.9" for 0.999.
std::string quantile_name(double q);
/// `part` of `whole` in percent; 100 when `whole` is 0.
double percent(uint64_t part, uint64_t whole);

struct AdviseOptions {
    std::string config_path;
    std::string pipeline;
    double target_percent = 99.9;
    std::string log_dir;  // empty: <data_dir>/log of the config
};
/// `tidemark advise`: the report of one pipeline over the retained log. Returns the exit code.
int advise_command(const AdviseOptions& options);

}  // namespace tidemark::firmware
