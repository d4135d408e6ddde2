// The sink's reading of an upstream message: a result, a version record, a removal, side
// output, a gateway's health record, or a refusal that says why (core/upstream_record.h has the
// types).
#pragma once

#include <memory>
#include <string_view>

#include "core/upstream_record.h"

namespace tidemark::codec {

/// Operation: parse() classifies one message by its payload, never by its topic alone (a
/// gateway chooses its upstream.topic): an object with "kind", or with "window" and no
/// "reason", is a result, except one with "too_late" and no "kind" or "reason", a too-late
/// tally (core::ReceivedLate); one with "switch_ms" a version record; one with "reason" or
/// "malformed" side output (which names a window too, never a kind); one with "uptime_s" and
/// "pipelines" (and none of those) a gateway's health record (health.upstream, kept newest per
/// node; a sink's health has no "pipelines" and is refused); an empty payload on a topic ending in
/// "/version" is a removal (the gateway cleared the retained record). Each kind is checked in full:
/// required fields and their types, times inside PostgreSQL's timestamptz range, no NUL in any text
/// (PostgreSQL text cannot hold one), a pipeline name that makes a view name
/// (core::pipeline_view_name), aggregate names that make columns. A message that fails becomes a
/// Refusal naming the field and what was wrong; fields the parser does not know are ignored, so a
/// newer gateway's records still go in. Concurrency: one thread per parser (it reuses its buffers).
/// Limits: simdjson's own (a document of at most 4 GiB, 1024 levels deep); the spool bounds
/// a message long before that.
class UpstreamParser {
  public:
    UpstreamParser();
    ~UpstreamParser();
    UpstreamParser(const UpstreamParser&) = delete;
    UpstreamParser& operator=(const UpstreamParser&) = delete;

    core::UpstreamRecord parse(std::string_view topic, std::string_view payload);

    /// The earliest and latest millisecond times accepted for a timestamptz column (about
    /// 4000 BC and 200000 AD: well inside PostgreSQL's 4713 BC .. 294276 AD).
    static constexpr int64_t time_ms_min = -188'395'009'600'000;
    static constexpr int64_t time_ms_max = 6'249'223'968'000'000;

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace tidemark::codec
