// tidemark advise, the analysis: lag quantiles and each watermark delay's cost from the events of
// the retained log (LagAdvisor, advise_log).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <unordered_map>

#include "adapters/codec/decoder.h"
#include "adapters/log/log_reader.h"
#include "core/duration.h"
#include "core/quantile.h"
#include "firmware/adapter_options.h"
#include "firmware/commands/command_advise.h"
#include "firmware/human_units.h"

namespace tidemark::firmware {

namespace {

constexpr double quantiles_reported[] = {0.5, 0.9, 0.99, 0.999, 0.9999};
constexpr int64_t fixed_delays_ms[] = {0,      1'000,   2'000,   5'000,   10'000,    30'000,
                                       60'000, 120'000, 300'000, 600'000, 1'800'000, 3'600'000};
// Upper edges of the histogram's log-scale buckets, after one bucket for negative lag; the last
// bucket is open above. 1-2-5 steps in the unit of the edge (ms, s, m, h, then a day), so that
// every label is a round figure a person would write ("2m .. 5m", issue 29), not a 1-2-5 step
// in milliseconds printed in minutes ("1.667m .. 3.333m").
constexpr int64_t bucket_edges_ms[] = {1,
                                       2,
                                       5,
                                       10,
                                       20,
                                       50,
                                       100,
                                       200,
                                       500,  // ms
                                       1 * second_ms,
                                       2 * second_ms,
                                       5 * second_ms,
                                       10 * second_ms,
                                       20 * second_ms,
                                       50 * second_ms,
                                       1 * minute_ms,
                                       2 * minute_ms,
                                       5 * minute_ms,
                                       10 * minute_ms,
                                       20 * minute_ms,
                                       50 * minute_ms,
                                       1 * hour_ms,
                                       2 * hour_ms,
                                       5 * hour_ms,
                                       10 * hour_ms,
                                       20 * hour_ms,
                                       24 * hour_ms};
constexpr size_t bucket_count = 1 + std::size(bucket_edges_ms) + 1;
// Per-partition sketches are only listed, so they are coarser than the pipeline's.
constexpr uint32_t partition_sketch_buckets_max = 256;
constexpr uint32_t sketch_buckets_max = 4096;

struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const noexcept {
        return std::hash<std::string_view>{}(s);
    }
};

struct Partition {
    int64_t newest_event_ms = 0;
    int64_t disorder_max_ms = 0;
    uint64_t events = 0;
    core::QuantileSketch lag{advise_sketch_relative_error, partition_sketch_buckets_max};
};

size_t bucket_of(int64_t lag_ms) {
    if (lag_ms < 0) return 0;
    const auto* it =
        std::upper_bound(std::begin(bucket_edges_ms), std::end(bucket_edges_ms), lag_ms);
    return 1 + static_cast<size_t>(it - std::begin(bucket_edges_ms));
}

}  // namespace

std::string quantile_name(double q) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "p%g", q * 100);
    return buf;
}

double percent(uint64_t part, uint64_t whole) {
    return whole == 0 ? 100.0 : 100.0 * static_cast<double>(part) / static_cast<double>(whole);
}

struct LagAdvisor::Impl {
    core::PipelineSpec spec;
    double target_percent;
    AdviseLimits limits;
    core::QuantileSketch lag{advise_sketch_relative_error, sketch_buckets_max};
    std::unordered_map<std::string, Partition, StringHash, std::equal_to<>> partitions;
    uint64_t events = 0;
    uint64_t events_tracked = 0;
    uint64_t events_untracked = 0;
    int64_t lag_min_ms = INT64_MAX;
    int64_t lag_max_ms = INT64_MIN;
    std::array<uint64_t, bucket_count> buckets{};
    std::array<uint64_t, std::size(fixed_delays_ms)> fixed_late{};
    // Disorders > 0 of the events fed, while they fit in disorder_values_max.
    std::vector<int64_t> disorders;
    bool disorders_overflowed = false;
    // Second pass: the quantile candidates, their late counts, and fresh partition maxima.
    bool second_pass = false;
    std::vector<int64_t> second_delays_ms;
    std::vector<uint64_t> second_late;
    std::unordered_map<std::string, int64_t, StringHash, std::equal_to<>> second_newest_ms;

    // The exact extremes bound the sketch's answer, which may overshoot them by its error.
    double lag_quantile(double q) const {
        return std::clamp(lag.quantile(q), static_cast<double>(lag_min_ms),
                          static_cast<double>(lag_max_ms));
    }

    // The lag quantiles as candidate delays: rounded up to whole ms, non-negative, not already
    // in the fixed list.
    std::vector<int64_t> quantile_delays() const {
        std::vector<int64_t> out;
        if (lag.empty()) return out;
        for (double q : quantiles_reported) {
            const double v = lag_quantile(q);
            if (!(v >= 0)) continue;
            const auto d = static_cast<int64_t>(std::ceil(v));
            if (std::find(std::begin(fixed_delays_ms), std::end(fixed_delays_ms), d) !=
                    std::end(fixed_delays_ms) ||
                std::find(out.begin(), out.end(), d) != out.end())
                continue;
            out.push_back(d);
        }
        return out;
    }

    // The partitions with the largest p99 lag, at most partitions_listed_max.
    std::vector<PartitionLag> partitions_worst() const {
        std::vector<PartitionLag> parts;
        parts.reserve(partitions.size());
        for (const auto& [name, p] : partitions)
            parts.push_back(
                {name, p.events, p.lag.quantile(0.5), p.lag.quantile(0.99), p.disorder_max_ms});
        const size_t listed = std::min(parts.size(), limits.partitions_listed_max);
        std::partial_sort(parts.begin(), parts.begin() + static_cast<std::ptrdiff_t>(listed),
                          parts.end(), [](const PartitionLag& a, const PartitionLag& b) {
                              if (a.p99_ms != b.p99_ms) return a.p99_ms > b.p99_ms;
                              return a.partition < b.partition;
                          });
        parts.resize(listed);
        return parts;
    }

    std::vector<LagBucket> histogram() const {
        std::vector<LagBucket> out;
        for (size_t i = 0; i < bucket_count; ++i) {
            LagBucket b;
            b.lower_ms =
                i == 0 ? std::min<int64_t>(lag_min_ms, 0) : (i == 1 ? 0 : bucket_edges_ms[i - 2]);
            b.upper_ms =
                i == 0 ? 0
                       : (i - 1 < std::size(bucket_edges_ms) ? bucket_edges_ms[i - 1] : INT64_MAX);
            b.count = buckets[i];
            out.push_back(b);
        }
        return out;
    }

    DelayCandidate candidate(int64_t delay_ms, std::string origin, uint64_t late) const {
        DelayCandidate c;
        c.delay_ms = delay_ms;
        c.origin = std::move(origin);
        c.late_events = late;
        c.on_time_percent = percent(events_tracked - late, events_tracked);
        c.added_latency_ms = delay_ms;
        core::PipelineSpec with_delay = spec;
        with_delay.watermark.delay_ms = delay_ms;
        c.windows_per_key = core::windows_per_key_estimate(with_delay);
        return c;
    }

    // The fixed delays and the lag quantiles as delays, sorted by delay.
    std::vector<DelayCandidate> candidates() const {
        std::vector<DelayCandidate> out;
        for (size_t i = 0; i < std::size(fixed_delays_ms); ++i)
            out.push_back(candidate(fixed_delays_ms[i], "", fixed_late[i]));
        const std::vector<int64_t> qdelays = second_pass ? second_delays_ms : quantile_delays();
        std::vector<int64_t> sorted = disorders;
        std::sort(sorted.begin(), sorted.end());
        for (size_t i = 0; i < qdelays.size(); ++i) {
            uint64_t late = 0;
            if (second_pass)
                late = second_late[i];
            else
                late = static_cast<uint64_t>(
                    sorted.end() - std::upper_bound(sorted.begin(), sorted.end(), qdelays[i]));
            std::string origin;
            for (double q : quantiles_reported)
                if (lag_quantile(q) >= 0 &&
                    static_cast<int64_t>(std::ceil(lag_quantile(q))) == qdelays[i]) {
                    origin = quantile_name(q) + " lag";
                    break;
                }
            out.push_back(candidate(qdelays[i], origin, late));
        }
        std::sort(out.begin(), out.end(), [](const DelayCandidate& a, const DelayCandidate& b) {
            return a.delay_ms < b.delay_ms;
        });
        return out;
    }

    // Returns the event's disorder, or -1 for an event of a partition that is not tracked.
    static int64_t disorder_of(int64_t& newest_ms, bool first, int64_t event_ms) {
        if (first || event_ms >= newest_ms) {
            newest_ms = event_ms;
            return 0;
        }
        return newest_ms - event_ms;
    }
};

LagAdvisor::LagAdvisor(core::PipelineSpec spec, double target_percent, AdviseLimits limits)
    : impl_(std::make_unique<Impl>()) {
    TM_ASSERT(target_percent > 0 && target_percent <= 100);
    impl_->spec = std::move(spec);
    impl_->target_percent = target_percent;
    impl_->limits = limits;
}

LagAdvisor::~LagAdvisor() = default;

void LagAdvisor::add(std::string_view partition_name, int64_t event_ms, int64_t ingest_ms) {
    Impl& m = *impl_;
    TM_ASSERT(!m.second_pass);
    ++m.events;
    const int64_t lag_ms = ingest_ms - event_ms;
    m.lag.add(static_cast<double>(lag_ms));
    m.lag_min_ms = std::min(m.lag_min_ms, lag_ms);
    m.lag_max_ms = std::max(m.lag_max_ms, lag_ms);
    ++m.buckets[bucket_of(lag_ms)];

    auto it = m.partitions.find(partition_name);
    bool first = false;
    if (it == m.partitions.end()) {
        if (m.partitions.size() >= m.limits.partitions_max) {
            ++m.events_untracked;
            return;
        }
        it = m.partitions.emplace(std::string(partition_name), Partition{}).first;
        first = true;
    }
    Partition& p = it->second;
    ++p.events;
    p.lag.add(static_cast<double>(lag_ms));
    ++m.events_tracked;
    const int64_t disorder_ms = Impl::disorder_of(p.newest_event_ms, first, event_ms);
    if (disorder_ms == 0) return;
    p.disorder_max_ms = std::max(p.disorder_max_ms, disorder_ms);
    for (size_t i = 0; i < std::size(fixed_delays_ms); ++i)
        if (disorder_ms > fixed_delays_ms[i]) ++m.fixed_late[i];
    if (m.disorders.size() < m.limits.disorder_values_max)
        m.disorders.push_back(disorder_ms);
    else
        m.disorders_overflowed = true;
}

bool LagAdvisor::needs_second_pass() const {
    return impl_->disorders_overflowed && !impl_->second_pass;
}

void LagAdvisor::begin_second_pass() {
    Impl& m = *impl_;
    TM_ASSERT(!m.second_pass);
    m.second_pass = true;
    m.disorders.clear();
    m.disorders.shrink_to_fit();
    m.second_delays_ms = m.quantile_delays();
    m.second_late.assign(m.second_delays_ms.size(), 0);
}

void LagAdvisor::add_again(std::string_view partition_name, int64_t event_ms) {
    Impl& m = *impl_;
    TM_ASSERT(m.second_pass);
    // Only the partitions tracked in the first pass count, so both passes see the same events.
    if (!m.partitions.contains(partition_name)) return;
    auto it = m.second_newest_ms.find(partition_name);
    const bool first = it == m.second_newest_ms.end();
    if (first) it = m.second_newest_ms.emplace(std::string(partition_name), event_ms).first;
    const int64_t disorder_ms = Impl::disorder_of(it->second, first, event_ms);
    for (size_t i = 0; i < m.second_delays_ms.size(); ++i)
        if (disorder_ms > m.second_delays_ms[i]) ++m.second_late[i];
}

AdviseReport LagAdvisor::report() const {
    const Impl& m = *impl_;
    TM_ASSERT(!needs_second_pass());
    AdviseReport r;
    r.pipeline = m.spec.name;
    r.target_percent = m.target_percent;
    r.events = m.events;
    r.events_untracked = m.events_untracked;
    r.partitions = m.partitions.size();
    r.second_pass = m.second_pass;
    if (m.events == 0) return r;
    r.lag_min_ms = m.lag_min_ms;
    r.lag_max_ms = m.lag_max_ms;
    for (double q : quantiles_reported)
        r.quantiles.push_back({q, m.lag_quantile(q)});

    r.partitions_worst = m.partitions_worst();
    r.histogram = m.histogram();
    r.candidates = m.candidates();
    // On time means not late: compare counts, not rounded percentages.
    const double late_allowed =
        (100.0 - m.target_percent) / 100.0 * static_cast<double>(m.events_tracked);
    for (size_t i = 0; i < r.candidates.size(); ++i)
        if (static_cast<double>(r.candidates[i].late_events) <= late_allowed + 1e-9) {
            r.recommended = i;
            break;
        }
    return r;
}

Result<AdviseReport> advise_log(const config::PipelineConfig& pipeline, const std::string& log_dir,
                                double target_percent, const AdviseLimits& limits) {
    LagAdvisor advisor(pipeline.spec, target_percent, limits);
    codec::Decoder decoder(decoder_spec(pipeline));
    codec::PayloadParser parser;
    codec::DecodedEvent decoded;
    uint64_t records = 0, malformed = 0, end_offset = 0;

    auto reader = log::LogReader::open(log_dir);
    if (!reader) return std::unexpected(reader.error());
    const uint64_t start_offset = (*reader)->position();
    log::Record rec;
    for (;;) {
        auto next = (*reader)->next(rec);
        if (!next) return std::unexpected(next.error());
        if (!*next) break;
        ++records;
        if (rec.type == log::RecordType::malformed) {
            if (decoder.matches(rec.topic)) ++malformed;
            continue;
        }
        if (rec.type != log::RecordType::message || !decoder.matches(rec.topic)) continue;
        if (decoder.decode(parser, rec.topic, rec.payload, rec.ingest_ms, rec.offset, decoded) !=
            codec::DecodeStatus::ok) {
            ++malformed;
            continue;
        }
        advisor.add(decoded.event.partition, decoded.event.event_ms, rec.ingest_ms);
    }
    end_offset = (*reader)->position();

    if (advisor.needs_second_pass()) {
        // The same records again (the service may append meanwhile: stop where the first pass
        // stopped), so that the quantile candidates are counted exactly too.
        advisor.begin_second_pass();
        auto again = log::LogReader::open(log_dir);
        if (!again) return std::unexpected(again.error());
        if (auto ok = (*again)->seek(start_offset); !ok)
            return fail("the log was trimmed by retention during `tidemark advise`: " +
                        ok.error().message + "; run it again");
        for (;;) {
            auto next = (*again)->next(rec, end_offset);
            if (!next) return std::unexpected(next.error());
            if (!*next) break;
            if (rec.type != log::RecordType::message || !decoder.matches(rec.topic)) continue;
            if (decoder.decode(parser, rec.topic, rec.payload, rec.ingest_ms, rec.offset,
                               decoded) == codec::DecodeStatus::ok)
                advisor.add_again(decoded.event.partition, decoded.event.event_ms);
        }
    }
    AdviseReport report = advisor.report();
    report.records = records;
    report.malformed = malformed;
    return report;
}

}  // namespace tidemark::firmware
