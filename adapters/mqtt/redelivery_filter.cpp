#include "adapters/mqtt/redelivery_filter.h"

#include <algorithm>

#include "core/result.h"

namespace tidemark::mqtt {

namespace {
constexpr std::uint64_t fnv_offset = 14695981039346656037ull;
constexpr std::uint64_t fnv_prime = 1099511628211ull;

std::uint64_t fnv1a(std::uint64_t h, std::string_view bytes) {
    for (const char c : bytes) {
        h ^= static_cast<unsigned char>(c);
        h *= fnv_prime;
    }
    return h;
}
}  // namespace

std::uint64_t RedeliveryFilter::hash(std::string_view topic, std::string_view payload) {
    std::uint64_t h = fnv1a(fnv_offset, topic);
    h = fnv1a(h, std::string_view("\0", 1));  // so ("ab","c") and ("a","bc") differ
    return fnv1a(h, payload);
}

bool RedeliveryFilter::seen(std::string_view topic, std::string_view payload) const {
    // A linear scan: it runs only for messages flagged DUP, which are rare.
    const std::uint64_t h = hash(topic, payload);
    return std::find(ring_.begin(), ring_.begin() + static_cast<std::ptrdiff_t>(count_), h) !=
           ring_.begin() + static_cast<std::ptrdiff_t>(count_);
}

void RedeliveryFilter::remember(std::string_view topic, std::string_view payload) {
    ring_[next_] = hash(topic, payload);
    next_ = (next_ + 1) % capacity;
    if (count_ < capacity) ++count_;
    TM_ASSERT(count_ <= capacity);
}

}  // namespace tidemark::mqtt
