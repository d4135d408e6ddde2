// A cheap, mergeable histogram of ingest-minus-event lag, for the health topic's p50/p99/p99.9.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace tidemark::core {

/// Log-linear buckets over int64 milliseconds (the HdrHistogram layout).
///
/// Operation: |v| < 32 has an exact bucket; above, each power of two is split into 32 linear
/// sub-buckets, so a quantile is reported within 1/32 (3.2 %) of a value at that rank.
/// Negative lags (devices whose clocks run ahead) have a mirrored half. add() is a few integer
/// operations and no allocation: it runs for every event.
/// Concurrency: a plain value; copy it to read it from another thread.
/// Limits: 2 x 59 x 32 counters, 30 KiB, whatever the input.
class LagHistogram {
  public:
    void add(int64_t lag_ms);
    void merge(const LagHistogram& other);
    /// The q-quantile (0 <= q <= 1), or 0 when empty.
    int64_t quantile(double q) const;
    uint64_t count() const { return count_; }

    void encode(std::string& out) const;
    bool decode(std::string_view& in);
    bool operator==(const LagHistogram&) const = default;

    static constexpr int sub_bits = 5;
    static constexpr int buckets = (64 - sub_bits) * (1 << sub_bits);

  private:
    static int bucket_of(uint64_t magnitude);
    static uint64_t lower_bound_of(int bucket);
    uint64_t count_ = 0;
    std::array<uint64_t, buckets> positive_{};
    std::array<uint64_t, buckets> negative_{};
};

}  // namespace tidemark::core
