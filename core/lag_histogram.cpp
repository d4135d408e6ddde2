#include "core/lag_histogram.h"

#include <bit>
#include <cmath>

#include "core/bytes.h"

namespace tidemark::core {

int LagHistogram::bucket_of(uint64_t v) {
    constexpr uint64_t sub = uint64_t{1} << sub_bits;
    if (v < sub) return static_cast<int>(v);
    const int top = 63 - std::countl_zero(v);  // >= sub_bits
    const int shift = top - sub_bits;
    const uint64_t mantissa = (v >> shift) - sub;  // 0 .. sub-1
    return static_cast<int>((static_cast<uint64_t>(shift + 1) << sub_bits) + mantissa);
}

uint64_t LagHistogram::lower_bound_of(int bucket) {
    constexpr uint64_t sub = uint64_t{1} << sub_bits;
    const uint64_t b = static_cast<uint64_t>(bucket);
    if (b < sub) return b;
    const uint64_t shift = (b >> sub_bits) - 1;
    return ((b & (sub - 1)) + sub) << shift;
}

void LagHistogram::add(int64_t lag_ms) {
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

void LagHistogram::merge(const LagHistogram& other) {
    count_ += other.count_;
    for (int i = 0; i < buckets; ++i) {
        positive_[static_cast<size_t>(i)] += other.positive_[static_cast<size_t>(i)];
        negative_[static_cast<size_t>(i)] += other.negative_[static_cast<size_t>(i)];
    }
}

int64_t LagHistogram::quantile(double q) const {
    if (count_ == 0) return 0;
    q = std::fmin(1.0, std::fmax(0.0, q));
    const uint64_t rank = static_cast<uint64_t>(std::floor(q * static_cast<double>(count_ - 1)));
    uint64_t seen = 0;
    // Most negative first: the negative half from its largest magnitude down.
    for (int i = buckets - 1; i >= 0; --i) {
        seen += negative_[static_cast<size_t>(i)];
        if (seen > rank) return -static_cast<int64_t>(lower_bound_of(i));
    }
    for (int i = 0; i < buckets; ++i) {
        seen += positive_[static_cast<size_t>(i)];
        if (seen > rank) return static_cast<int64_t>(lower_bound_of(i));
    }
    return 0;
}

void LagHistogram::encode(std::string& out) const {
    bytes::put_u64(out, count_);
    for (const auto* half : {&positive_, &negative_}) {
        uint32_t used = 0;
        for (uint64_t c : *half)
            used += c != 0;
        bytes::put_u32(out, used);
        for (int i = 0; i < buckets; ++i) {
            const uint64_t c = (*half)[static_cast<size_t>(i)];
            if (c == 0) continue;
            bytes::put_u32(out, static_cast<uint32_t>(i));
            bytes::put_u64(out, c);
        }
    }
}

bool LagHistogram::decode(std::string_view& in) {
    *this = LagHistogram{};
    if (!bytes::get_u64(in, count_)) return false;
    for (auto* half : {&positive_, &negative_}) {
        uint32_t used;
        if (!bytes::get_u32(in, used) || used > buckets) return false;
        for (uint32_t n = 0; n < used; ++n) {
            uint32_t i;
            uint64_t c;
            if (!bytes::get_u32(in, i) || i >= buckets || !bytes::get_u64(in, c)) return false;
            (*half)[i] = c;
        }
    }
    return true;
}

}  // namespace tidemark::core
