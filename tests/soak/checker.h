// The soak's independent checker (issue 14): recomputes every tumbling window from the events the
// gateway broker acknowledged and compares with the records that arrived upstream.
//
// Operation: written from the text of DESIGN.md sections 4, 5 and 7 and README "Records", not
// from core/: plain maps, int64 arithmetic, one pass over everything. A consumer keeps, per
// (pipeline, version, key, window), the record with the highest revision, a retract winning a
// tie; a window whose kept record is a retract has no value.
// Limits: tumbling windows with count/sum/min/max over integer values only (their final revision
// does not depend on arrival order, and sums of integers below 2^53 are exact in a double).
// Slow on purpose; a soak of a million events checks in about a second.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tidemark::soak {

/// What the event is grouped by in a pipeline.
enum class KeyBy : uint8_t { device, zone };

/// A pipeline as the soak configures it: tumbling(size, offset), key, and the names of its
/// count, sum, min and max aggregates (over the payload's integer field "v").
struct PipelineSpec {
    std::string name;
    int64_t size_ms = 0;
    int64_t offset_ms = 0;
    KeyBy key_by = KeyBy::device;
};

/// One event the gateway broker acknowledged (QoS1 PUBACK).
struct PublishedEvent {
    std::string device;
    std::string zone;
    int64_t ts_ms = 0;
    int64_t v = 0;
};

/// One message received upstream.
struct UpstreamMessage {
    std::string topic;
    std::string payload;
};

struct Verdict {
    int64_t events = 0;
    int64_t windows_expected = 0;
    int64_t windows_received = 0;
    int64_t windows_uncertain = 0;  ///< left out: an unacknowledged publish falls into them
    int64_t results = 0;            ///< result messages received (resends included)
    int64_t results_unique = 0;
    int64_t side_records = 0;  ///< side output (too late or undecodable): explains a loss
    int64_t versions = 0;      ///< distinct (pipeline, version) pairs; 1 per pipeline expected
    int64_t unparsable = 0;    ///< upstream messages that are not results (counted as wrong)
    int64_t lost = 0;          ///< expected window missing, retracted, or with a lower count
    int64_t wrong = 0;         ///< values differ (or a window nobody published into)
    int64_t duplicates_different_id = 0;  ///< one identity with two ids, or one id, two payloads
    std::vector<std::string> examples;    ///< the first few problems, for the report
};

/// Compares. `uncertain` are publishes whose acknowledgement never came (the broker may or may
/// not have taken them): the windows they fall into are left out. `examples_max` bounds
/// Verdict::examples.
Verdict check(const std::vector<PipelineSpec>& pipelines, const std::vector<PublishedEvent>& events,
              const std::vector<PublishedEvent>& uncertain,
              const std::vector<UpstreamMessage>& upstream, std::size_t examples_max = 20);

/// floor((t - offset) / size) * size + offset, for negative t too.
int64_t tumbling_start_ms(int64_t t_ms, int64_t size_ms, int64_t offset_ms);

}  // namespace tidemark::soak
