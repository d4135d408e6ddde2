#include "core/backoff.h"

#include <algorithm>

#include "core/result.h"

namespace tidemark::core {

int64_t Backoff::cap_ms(int failures) const {
    TM_ASSERT(failures >= 0 && min_ms > 0 && max_ms >= min_ms);
    int64_t delay = min_ms;
    for (int i = 0; i < failures && delay < max_ms; ++i)
        delay *= 2;
    return std::min(delay, max_ms);
}

int64_t Backoff::wait_ms(int failures, double jitter) const {
    TM_ASSERT(jitter >= 0.0 && jitter <= 1.0);
    const int64_t cap = cap_ms(failures);
    const int64_t half = cap / 2;
    const auto extra = static_cast<int64_t>(static_cast<double>(cap - half) * jitter);
    const int64_t wait = half + extra;
    TM_ASSERT(wait >= half && wait <= max_ms);
    return wait;
}

}  // namespace tidemark::core
