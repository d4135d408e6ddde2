#include "core/lag_histogram.h"

#include <bit>
#include <cmath>

#include "core/bytes.h"

namespace tidemark::core {

uint64_t LagHistogram::lower_bound_of(int bucket) {
    constexpr uint64_t sub = uint64_t{1} << sub_bits;
    const uint64_t b = static_cast<uint64_t>(bucket);
    if (b < sub) return b;
    const uint64_t shift = (b >> sub_bits) - 1;
    return ((b & (sub - 1)) + sub) << shift;
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
