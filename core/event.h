// The engine's input: one decoded event, or a tick that only carries the gateway's clock.
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <string_view>

namespace tidemark::core {

/// A field that the payload did not carry (or that was not a number) has this value; every
/// aggregate skips it.
inline constexpr double field_missing = std::numeric_limits<double>::quiet_NaN();

/// One decoded record of the log, as one pipeline sees it.
///
/// Operation: views only; the caller keeps the bytes alive for the duration of Engine::process.
/// `order` is the record's log offset: it breaks event-time ties for first/last and names the
/// record in side output. `fields` is indexed as the pipeline's field list.
struct Event {
    std::string_view key;
    std::string_view partition;
    int64_t event_ms = 0;
    int64_t ingest_ms = 0;
    uint64_t order = 0;
    std::span<const double> fields;
    // The raw message, carried only so that a too-late event can go to side output whole.
    std::string_view topic;
    std::string_view payload;
};

}  // namespace tidemark::core
