// What the config tests share: the smallest config that loads, and ways to break it and read
// the one error that results.
#pragma once

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "adapters/config/config.h"
#include "core/result.h"

namespace tidemark::test {

// Replaces the first occurrence of `from` (which must exist) in `text`.
inline std::string replace(std::string text, const std::string& from, const std::string& to) {
    auto at = text.find(from);
    TM_ASSERT(at != std::string::npos);
    return text.replace(at, from.size(), to);
}

// The smallest config that loads; tests below break one thing at a time.
inline const std::string minimal = R"({
  "node_id": "gw-01",
  "source": {"uri": "tcp://127.0.0.1:1883"},
  "pipelines": [{
    "name": "p",
    "topic": "sensors/+/telemetry",
    "key": "topic:1",
    "fields": {"temp": "/temp"},
    "window": {"type": "tumbling", "size": "1m"},
    "aggregates": {"n": {"fn": "count"}}
  }]
})";

inline std::vector<config::ConfigError> errors_of(const std::string& json,
                                                  const std::string& base = "/") {
    auto result = config::parse_config(json, base);
    REQUIRE_FALSE(result.has_value());
    return result.error();
}

// Exactly one error, at `pointer`; returns its message.
inline std::string only_error(const std::string& json, const std::string& pointer) {
    auto errors = errors_of(json);
    INFO(config::format_errors(errors));
    REQUIRE(errors.size() == 1);
    CHECK(errors[0].pointer == pointer);
    return errors[0].message;
}

}  // namespace tidemark::test
