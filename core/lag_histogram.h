// A cheap, mergeable histogram of ingest-minus-event lag, for the health topic's p50/p99/p99.9.
#pragma once

#include <array>
#include <bit>
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
    /// Inline: it runs for every event.
    void add(int64_t lag_ms) {
        ++count_;
        if (lag_ms >= 0) {
            ++positive_[static_cast<size_t>(bucket_of(static_cast<uint64_t>(lag_ms)))];
        } else {
            const uint64_t magnitude =
                lag_ms == INT64_MIN ? uint64_t{1} << 63 : static_cast<uint64_t>(-lag_ms);
            int b = bucket_of(magnitude);
            if (b >= buckets) b = buckets - 1;
            ++negative_[static_cast<size_t>(b)];
        }
    }
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
    static int bucket_of(uint64_t v) {
        constexpr uint64_t sub = uint64_t{1} << sub_bits;
        if (v < sub) return static_cast<int>(v);
        const int top = 63 - std::countl_zero(v);  // >= sub_bits
        const int shift = top - sub_bits;
        const uint64_t mantissa = (v >> shift) - sub;  // 0 .. sub-1
        return static_cast<int>((static_cast<uint64_t>(shift + 1) << sub_bits) + mantissa);
    }
    static uint64_t lower_bound_of(int bucket);
    uint64_t count_ = 0;
    std::array<uint64_t, buckets> positive_{};
    std::array<uint64_t, buckets> negative_{};
};

}  // namespace tidemark::core
