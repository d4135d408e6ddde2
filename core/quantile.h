// A mergeable quantile sketch with a relative-error guarantee and a bounded number of buckets.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "core/quantile_buckets.h"

namespace tidemark::core {

/// Log-bucketed sketch (the DDSketch construction).
///
/// Operation: value v > 0 falls in bucket ceil(log_gamma(v)) with gamma = (1 + a) / (1 - a), so
/// any quantile whose bucket was not collapsed is returned within relative error `a` of a value
/// of the input at that rank. Negative values use a mirrored store; zero (|v| < 1e-9) its own
/// count. When more than `buckets_max` buckets are in use, the lowest ones are collapsed into one:
/// the bound then holds for quantiles above the collapsed range only (the low tail loses
/// precision, never the high quantiles telemetry alerts on).
/// "Lowest" is in value order: the most negative buckets go first, then zero, then the smallest
/// positive ones. Collapsed values are counted apart and reported as the lowest bucket kept, so
/// the state depends only on the multiset of values added, not on the order of adds and merges.
/// NaN is ignored; +-infinity counts as +-DBL_MAX. The exact minimum and maximum are kept
/// beside the buckets and every quantile is clamped to them: a bucket's representative value may
/// lie outside the data (p95 of the single value 30 would read 30.27), and no user expects a
/// quantile outside [min, max]; the clamp only moves a result towards the true value.
/// Concurrency: none; a plain value type.
/// Limits: 1e-6 <= relative_error < 1 and buckets_max >= 1 (asserted; config validates them).
/// Memory is at most buckets_max * 16 bytes plus the object; buckets are sparse, so typical
/// telemetry uses a few dozen, and up to QuantileBuckets::inline_max positive ones are held in
/// the object itself (negative values, rarer, open a vector as every bucket did before).
class QuantileSketch {
  public:
    /// The finest relative error the sketch accepts (config validates against it): it keeps
    /// every bucket index of a finite value inside int32 (|ln DBL_MAX| / ln gamma < 2^31).
    static constexpr double relative_error_min = 1e-6;
    /// A default sketch's: 1 % error, 1024 buckets (QuantileOptions' defaults too).
    static constexpr double relative_error_default = 0.01;
    static constexpr uint32_t buckets_max_default = 1024;

    QuantileSketch() = default;
    QuantileSketch(double relative_error, uint32_t buckets_max);

    void add(double value);
    /// Merges another sketch made with the same parameters.
    void merge(const QuantileSketch& other);
    /// The q-quantile (0 <= q <= 1) of what was added; NaN when empty.
    double quantile(double q) const;
    uint64_t count() const { return count_; }
    bool empty() const { return count_ == 0; }
    double relative_error() const { return relative_error_; }
    uint32_t buckets_max() const { return buckets_max_; }
    size_t bytes() const;

    /// Appends a portable binary encoding; decode() reads it back (false on damaged input).
    void encode(std::string& out) const;
    bool decode(std::string_view& in);

    bool operator==(const QuantileSketch&) const = default;

  private:
    static double gamma_log_of(double relative_error);
    double bucket_quantile(double q) const;  // the bucket's value, before the clamp
    int32_t index_of(double magnitude) const;
    double value_of(int32_t index) const;
    void collapse();
    bool below_lowest_kept(bool positive, int32_t index) const;

    // What add() reads comes first: with the positive buckets held in place, the values of a
    // sparse window are counted without leaving the sketch's first two cache lines.
    double gamma_log_ = gamma_log_of(relative_error_default);  // ln(gamma), cached
    uint64_t count_ = 0;
    // The exact extremes of what was added (clamped to +-DBL_MAX like the buckets); infinite
    // while unknown (empty, or decoded from a store written before they were kept).
    double min_ = std::numeric_limits<double>::infinity();
    double max_ = -std::numeric_limits<double>::infinity();
    // Values below the lowest bucket kept, after collapsing (see the class comment).
    uint64_t collapsed_count_ = 0;
    uint32_t buckets_max_ = buckets_max_default;
    // Sorted by index.
    QuantileBuckets positive_;
    std::vector<QuantileBucket> negative_;
    uint64_t zero_count_ = 0;
    double relative_error_ = relative_error_default;
};

}  // namespace tidemark::core
