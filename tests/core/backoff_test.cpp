// The one reconnect backoff (core/backoff.h): every reconnect loop waits by it, so its promise
// is the loops' promise: doubling to a cap, jittered into [half, all] of the cap, never above
// the maximum (health's old jitter of 0.8..1.2 waited up to 36 s under a 30 s "cap").
#include <catch2/catch.hpp>

#include <random>

#include "core/backoff.h"

using tidemark::core::Backoff;

TEST_CASE("the backoff doubles to its cap", "[backoff]") {
    const Backoff b{250, 1'500};
    CHECK(b.cap_ms(0) == 250);
    CHECK(b.cap_ms(1) == 500);
    CHECK(b.cap_ms(2) == 1'000);
    CHECK(b.cap_ms(3) == 1'500);
    CHECK(b.cap_ms(40) == 1'500);
    CHECK(b.cap_ms(1'000'000) == 1'500);  // the doubling stops at the cap: no overflow
    CHECK(Backoff{250, 250}.cap_ms(5) == 250);
}

TEST_CASE("the jitter moves a wait within [half, all] of the cap, never above the maximum",
          "[backoff]") {
    const Backoff b{250, 1'500};
    CHECK(b.wait_ms(0, 1.0) == 250);
    CHECK(b.wait_ms(0, 0.0) == 125);
    CHECK(b.wait_ms(40, 1.0) == 1'500);
    CHECK(b.wait_ms(40, 0.0) == 750);
    CHECK(b.wait_ms(40, 0.5) == 1'125);

    const Backoff wide{250, 30'000};
    std::mt19937_64 rng(26);
    std::uniform_real_distribution<double> jitter(0.0, 1.0);
    for (int failures = 0; failures < 64; ++failures) {
        for (int i = 0; i < 100; ++i) {
            const int64_t wait = wide.wait_ms(failures, jitter(rng));
            CHECK(wait >= wide.cap_ms(failures) / 2);
            CHECK(wait <= wide.cap_ms(failures));
            CHECK(wait <= wide.max_ms);
        }
    }
}
