// What the in-process engine-host tests share: the service's parts opened over a config and
// recovered, as the run loop does before it starts ingest.
#pragma once

#include <catch2/catch.hpp>
#include <memory>
#include <string>

#include "adapters/config/config.h"
#include "firmware/clock.h"
#include "firmware/service/service_parts.h"

namespace tidemark::test {

inline std::unique_ptr<firmware::ServiceParts> open_parts(const config::Config& c) {
    static const firmware::SystemClock clock;
    auto parts = firmware::ServiceParts::open(c, clock);
    INFO((parts ? std::string() : parts.error().message));
    REQUIRE(parts);
    auto recovered = (*parts)->host().recover([] { return false; });
    INFO((recovered ? std::string() : recovered.error().message));
    REQUIRE(recovered);
    return std::move(*parts);
}

}  // namespace tidemark::test
