#include "core/quantile.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/bytes.h"
#include "core/result.h"

namespace tidemark::core {

namespace {

// Below this magnitude a value counts as zero: log-buckets would need ever more indices to
// reach it, and telemetry that small is noise around zero.
constexpr double zero_magnitude_max = 1e-9;

// Adds `n` to bucket `index`; true when a new bucket was opened. Growth is capped so that a
// store never holds more than `capacity_max` slots (the collapse that follows trims the size).
template <class Buckets>
bool add_to(Buckets& buckets, int32_t index, uint64_t n, size_t capacity_max) {
    auto it =
        std::lower_bound(buckets.begin(), buckets.end(), index,
                         [](const QuantileBucket& bucket, int32_t i) { return bucket.index < i; });
    if (it != buckets.end() && it->index == index) {
        it->count += n;
        return false;
    }
    if (buckets.size() == buckets.capacity()) {
        const size_t position = static_cast<size_t>(it - buckets.begin());
        buckets.reserve(std::min(capacity_max, std::max<size_t>(8, 2 * buckets.size())));
        it = buckets.begin() + static_cast<std::ptrdiff_t>(position);
    }
    buckets.insert(it, {index, n});
    return true;
}

template <class Buckets>
void merge_into(Buckets& into, const Buckets& from) {
    if (from.empty()) return;
    Buckets merged;
    merged.reserve(into.size() + from.size());
    const Buckets& kept = into;
    auto a = kept.begin();
    auto b = from.begin();
    while (a != kept.end() || b != from.end()) {
        if (b == from.end() || (a != kept.end() && a->index < b->index)) {
            merged.push_back(*a++);
        } else if (a == kept.end() || b->index < a->index) {
            merged.push_back(*b++);
        } else {
            merged.push_back({a->index, a->count + b->count});
            ++a;
            ++b;
        }
    }
    into = std::move(merged);
}

template <class Buckets>
void encode_buckets(std::string& out, const Buckets& buckets) {
    bytes::put_u32(out, static_cast<uint32_t>(buckets.size()));
    for (const auto& [index, n] : buckets) {
        bytes::put_u32(out, static_cast<uint32_t>(index));
        bytes::put_u64(out, n);
    }
}

// Reads what encode_buckets wrote; false unless indices ascend strictly and counts are positive.
template <class Buckets>
bool decode_buckets(std::string_view& in, Buckets& buckets, uint32_t buckets_max, uint64_t& total) {
    constexpr size_t entry_bytes = 12;
    uint32_t size = 0;
    if (!bytes::get_u32(in, size) || size > buckets_max || in.size() / entry_bytes < size) {
        return false;
    }
    buckets.clear();
    buckets.reserve(size);
    for (uint32_t i = 0; i < size; ++i) {
        uint32_t index = 0;
        uint64_t n = 0;
        if (!bytes::get_u32(in, index) || !bytes::get_u64(in, n) || n == 0) return false;
        const auto signed_index = static_cast<int32_t>(index);
        if (!buckets.empty() && buckets.back().index >= signed_index) return false;
        if (total + n < total) return false;
        total += n;
        buckets.push_back({signed_index, n});
    }
    return true;
}

}  // namespace

double QuantileSketch::gamma_log_of(double relative_error) {
    // ln((1 + a) / (1 - a)) without the cancellation of log() near 1.
    return std::log1p(2 * relative_error / (1 - relative_error));
}

QuantileSketch::QuantileSketch(double relative_error, uint32_t buckets_max)
    : gamma_log_(gamma_log_of(relative_error)),
      buckets_max_(buckets_max),
      relative_error_(relative_error) {
    TM_ASSERT(relative_error >= relative_error_min && relative_error < 1);
    TM_ASSERT(buckets_max >= 1);
}

int32_t QuantileSketch::index_of(double magnitude) const {
    TM_ASSERT(magnitude >= zero_magnitude_max && magnitude <= std::numeric_limits<double>::max());
    return static_cast<int32_t>(std::ceil(std::log(magnitude) / gamma_log_));
}

double QuantileSketch::value_of(int32_t index) const {
    // 2 gamma^i / (gamma + 1): the point of (gamma^(i-1), gamma^i] whose relative distance to
    // either end is exactly a. Summed in the exponent so that the top bucket does not overflow.
    const double gamma = (1 + relative_error_) / (1 - relative_error_);
    const double value = std::exp(index * gamma_log_ + std::log(2 / (gamma + 1)));
    return std::min(value, std::numeric_limits<double>::max());
}

void QuantileSketch::add(double value) {
    if (std::isnan(value)) return;
    const double magnitude = std::min(std::fabs(value), std::numeric_limits<double>::max());
    const double clamped = value < 0 ? -magnitude : magnitude;
    min_ = std::min(min_, clamped);
    max_ = std::max(max_, clamped);
    ++count_;
    if (magnitude < zero_magnitude_max) {
        ++zero_count_;
        collapse();
        return;
    }
    const int32_t index = index_of(magnitude);
    // Once collapsing has begun exactly buckets_max buckets are kept, so a value below the lowest
    // of them would open a bucket only to have it collapsed: count it as collapsed directly
    // (and skip two moves of the whole store).
    if (collapsed_count_ > 0 && below_lowest_kept(value > 0, index)) {
        ++collapsed_count_;
        return;
    }
    const size_t capacity_max = size_t{buckets_max_} + 1;
    if (value > 0 ? add_to(positive_, index, 1, capacity_max)
                  : add_to(negative_, index, 1, capacity_max))
        collapse();
}

bool QuantileSketch::below_lowest_kept(bool positive, int32_t index) const {
    if (!positive) return negative_.empty() || index > negative_.back().index;
    return negative_.empty() && !positive_.empty() && index < positive_.front().index;
}

void QuantileSketch::collapse() {
    size_t used = positive_.size() + negative_.size();
    if (used > buckets_max_) {
        size_t excess = used - buckets_max_;
        // In value order the lowest buckets are the most negative (the back of negative_),
        // then the smallest positive ones (the front of positive_).
        const size_t from_negative = std::min(excess, negative_.size());
        for (size_t i = negative_.size() - from_negative; i < negative_.size(); ++i) {
            collapsed_count_ += negative_[i].count;
        }
        negative_.resize(negative_.size() - from_negative);
        excess -= from_negative;
        for (size_t i = 0; i < excess; ++i)
            collapsed_count_ += positive_[i].count;
        positive_.erase_front(excess);
    }
    // Zero lies between the stores: once no negative bucket is kept it is collapsed too. Deciding
    // it from the kept state alone is what makes merges order-independent.
    if (collapsed_count_ > 0 && negative_.empty()) {
        collapsed_count_ += zero_count_;
        zero_count_ = 0;
    }
    // A merge may have left twice the bound allocated; give it back.
    if (positive_.capacity() > size_t{buckets_max_} + 1) positive_.shrink_to_fit();
    if (negative_.capacity() > size_t{buckets_max_} + 1) negative_.shrink_to_fit();
}

void QuantileSketch::merge(const QuantileSketch& other) {
    TM_ASSERT(relative_error_ == other.relative_error_ && buckets_max_ == other.buckets_max_);
    if (other.count_ == 0) return;
    count_ += other.count_;
    min_ = std::min(min_, other.min_);
    max_ = std::max(max_, other.max_);
    zero_count_ += other.zero_count_;
    collapsed_count_ += other.collapsed_count_;
    merge_into(positive_, other.positive_);
    merge_into(negative_, other.negative_);
    collapse();
}

double QuantileSketch::quantile(double q) const {
    TM_ASSERT(q >= 0 && q <= 1);
    if (count_ == 0) return std::numeric_limits<double>::quiet_NaN();
    // Infinite extremes (a store written before they were kept) leave the value as it is.
    return std::clamp(bucket_quantile(q), min_, max_);
}

double QuantileSketch::bucket_quantile(double q) const {
    // The value at sorted position floor(rank) lies in the first bucket whose running count
    // exceeds rank.
    const double rank = q * static_cast<double>(count_ - 1);
    uint64_t seen = collapsed_count_;
    if (static_cast<double>(seen) > rank) {
        // Collapsed values are reported as the lowest bucket kept (zero is never kept then).
        if (!negative_.empty()) return -value_of(negative_.back().index);
        TM_ASSERT(!positive_.empty());
        return value_of(positive_.front().index);
    }
    for (auto it = negative_.rbegin(); it != negative_.rend(); ++it) {
        seen += it->count;
        if (static_cast<double>(seen) > rank) return -value_of(it->index);
    }
    seen += zero_count_;
    if (static_cast<double>(seen) > rank) return 0;
    for (const auto& [index, n] : positive_) {
        seen += n;
        if (static_cast<double>(seen) > rank) return value_of(index);
    }
    TM_ASSERT(false);  // rank <= count - 1 < seen == count
    return 0;
}

size_t QuantileSketch::bytes() const {
    return sizeof(*this) +
           (positive_.heap_capacity() + negative_.capacity()) * sizeof(QuantileBucket);
}

void QuantileSketch::encode(std::string& out) const {
    // The relative error is written negated to mark the format that carries min and max after
    // it; the older format (a positive error, no extremes) is still read.
    bytes::put_f64(out, -relative_error_);
    bytes::put_f64(out, min_);
    bytes::put_f64(out, max_);
    bytes::put_u32(out, buckets_max_);
    bytes::put_u64(out, count_);
    bytes::put_u64(out, zero_count_);
    bytes::put_u64(out, collapsed_count_);
    encode_buckets(out, positive_);
    encode_buckets(out, negative_);
}

bool QuantileSketch::decode(std::string_view& in) {
    double relative_error = 0;
    uint32_t buckets_max = 0;
    uint64_t count = 0;
    uint64_t zero_count = 0;
    uint64_t collapsed_count = 0;
    double min = std::numeric_limits<double>::infinity();
    double max = -std::numeric_limits<double>::infinity();
    if (!bytes::get_f64(in, relative_error)) return false;
    if (relative_error < 0) {
        relative_error = -relative_error;
        if (!bytes::get_f64(in, min) || !bytes::get_f64(in, max)) return false;
        if (std::isnan(min) || std::isnan(max)) return false;
    }
    if (!bytes::get_u32(in, buckets_max) || !bytes::get_u64(in, count) ||
        !bytes::get_u64(in, zero_count) || !bytes::get_u64(in, collapsed_count)) {
        return false;
    }
    if (!(relative_error >= relative_error_min && relative_error < 1) || buckets_max == 0) {
        return false;
    }
    // Only an empty sketch has min > max (its +inf and -inf): quantile() clamps between them,
    // and std::clamp with lo > hi is undefined.
    if (count > 0 && min > max) return false;
    QuantileSketch decoded(relative_error, buckets_max);
    decoded.count_ = count;
    decoded.zero_count_ = zero_count;
    decoded.collapsed_count_ = collapsed_count;
    decoded.min_ = min;
    decoded.max_ = max;
    uint64_t total = 0;
    if (!decode_buckets(in, decoded.positive_, buckets_max, total) ||
        !decode_buckets(in, decoded.negative_, buckets_max, total)) {
        return false;
    }
    if (decoded.positive_.size() + decoded.negative_.size() > buckets_max) return false;
    // Collapsed values need a kept bucket to be reported as, and zero is never kept beside them
    // without a negative bucket (see collapse()).
    if (collapsed_count > 0 && decoded.negative_.empty() &&
        (zero_count > 0 || decoded.positive_.empty())) {
        return false;
    }
    if (total + zero_count < total || total + zero_count + collapsed_count < total + zero_count ||
        total + zero_count + collapsed_count != count) {
        return false;
    }
    *this = std::move(decoded);
    return true;
}

}  // namespace tidemark::core
