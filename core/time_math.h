// Integer time arithmetic that rounds toward minus infinity, for window grids and timestamps
// before 1970.
#pragma once

#include <cstdint>

namespace tidemark::core {

/// a / b rounded down (C++ division rounds toward zero). b != 0.
constexpr int64_t floor_div(int64_t a, int64_t b) {
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
    return q;
}

/// The largest grid point `offset + k * step` that is <= t. step > 0.
constexpr int64_t floor_to(int64_t t, int64_t step, int64_t offset) {
    return floor_div(t - offset, step) * step + offset;
}

}  // namespace tidemark::core
