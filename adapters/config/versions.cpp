// Pipeline versions (DESIGN.md section 4): the hash of a definition, the backfill settings, and
// a stored definition read back.
#include <bit>
#include <cstdio>

#include "adapters/config/checker.h"
#include "core/duration.h"
#include "core/hash.h"
#include "core/time_text.h"

namespace tidemark::config {

namespace hash = core::hash;
using detail::Json;

namespace {

// Bumped only if what a version means changes: every result id hashes the version.
constexpr std::string_view version_scheme = "tidemark-pipeline-version-1";

uint64_t put(uint64_t h, int64_t v) {
    return hash::fnv1a_le(h, static_cast<uint64_t>(v), 8);
}
uint64_t put(uint64_t h, double v) {
    return hash::fnv1a_le(h, std::bit_cast<uint64_t>(v), 8);
}
uint64_t put(uint64_t h, std::string_view s) {
    return hash::fnv1a_str(h, s);
}

uint64_t put_extractors(uint64_t h, const std::vector<Extractor>& list) {
    h = put(h, static_cast<int64_t>(list.size()));
    for (const Extractor& e : list) {
        h = put(h, static_cast<int64_t>(e.kind));
        h = e.kind == Extractor::topic_level ? put(h, static_cast<int64_t>(e.level))
                                             : put(h, e.pointer);
    }
    return h;
}

}  // namespace

std::string pipeline_version(const PipelineConfig& p) {
    uint64_t h = put(hash::fnv_offset, version_scheme);
    h = put(h, p.topic_filter);
    h = put_extractors(h, p.key);
    h = put_extractors(h, p.partition);
    h = put(h, static_cast<int64_t>(p.timestamp.ingest));
    if (!p.timestamp.ingest) {
        h = put(h, p.timestamp.pointer);
        h = put(h, static_cast<int64_t>(p.timestamp.format));
    }
    h = put(h, static_cast<int64_t>(p.spec.fields.size()));
    for (size_t i = 0; i < p.spec.fields.size(); ++i) {
        h = put(h, p.spec.fields[i]);
        h = put(h, i < p.field_pointers.size() ? p.field_pointers[i] : std::string());
    }
    const core::WindowSpec& w = p.spec.window;
    for (int64_t v : {static_cast<int64_t>(w.type), w.size_ms, w.offset_ms, w.advance_ms, w.gap_ms,
                      w.max_duration_ms})
        h = put(h, v);
    const core::WatermarkSpec& wm = p.spec.watermark;
    for (int64_t v :
         {wm.delay_ms, wm.idle_timeout_ms, wm.max_future_ms, static_cast<int64_t>(wm.scope)})
        h = put(h, v);
    const core::LateSpec& l = p.spec.late;
    for (int64_t v : {l.allowed_lateness_ms, static_cast<int64_t>(l.too_late),
                      static_cast<int64_t>(l.corrections)})
        h = put(h, v);
    h = put(h, static_cast<int64_t>(p.spec.aggregates.size()));
    for (const core::AggregateSpec& a : p.spec.aggregates) {
        h = put(h, a.name);
        h = put(h, static_cast<int64_t>(a.fn));
        h = put(h, static_cast<int64_t>(a.field));
        if (a.fn == core::AggregateFn::quantile) h = put(h, a.q);
    }
    h = put(h, p.spec.quantile.relative_error);
    h = put(h, static_cast<int64_t>(p.spec.quantile.buckets_max));
    char text[9];
    std::snprintf(text, sizeof text, "%08x", static_cast<unsigned>(hash::mix(h) >> 32));
    return text;
}

namespace detail {

void read_backfill_from(Checker& c, const Json& pipeline, const std::string& pointer,
                        PipelineConfig& out) {
    Section s = c.section(pipeline, pointer, "backfill", R"({"from": "7d"})", {"from"});
    if (!s) return;
    const Json* from = c.field(*s, s.pointer, "from", &Json::is_string,
                               "a duration before now such as \"7d\", or an RFC 3339 time");
    if (!from) return;
    const std::string text = from->get<std::string>();
    if (auto age = core::parse_duration_ms(text); age && *age >= 0) {
        out.backfill_from_age_ms = *age;
        return;
    }
    // The codec's parser and replay's (core/time_text.h): a date one refuses, all refuse.
    auto at = core::parse_rfc3339_ms(text);
    if (at) {
        out.backfill_from_ms = *at;
    } else if (at.error() == core::TimeTextError::not_rfc3339) {
        c.error(s.pointer + "/from", in_quotes(text) +
                                         " is neither a duration (\"7d\") nor an RFC 3339 time "
                                         "(\"2026-11-30T00:00:00Z\")");
    } else {
        c.error(s.pointer + "/from",
                in_quotes(text) + " " + std::string(core::time_text_error_text(at.error())));
    }
}

void read_backfill_settings(Checker& c, const Json& root, BackfillConfig& out) {
    Section s = c.section(root, "", "backfill", R"({"max_share": 0.5, "max_live_delay": "200ms"})",
                          {"max_share", "max_live_delay"});
    if (!s) return;
    c.read_fraction(*s, s.pointer, "max_share", out.max_share, 0.0, 1.0, true);
    c.read_duration(*s, s.pointer, "max_live_delay", out.max_live_delay_ms, true);
}

}  // namespace detail

std::expected<PipelineConfig, std::vector<ConfigError>> parse_pipeline_definition(
    std::string_view json) {
    detail::Checker c{std::string()};
    Json j;
    try {
        j = Json::parse(json.begin(), json.end());
    } catch (const Json::exception& e) {
        return std::unexpected(
            std::vector<ConfigError>{{"", std::string("a stored definition: ") + e.what()}});
    }
    PipelineConfig p;
    detail::read_pipeline(c, j, "", p);
    if (c.errors.empty())
        if (auto valid = core::validate(p.spec); !valid) c.error("/window", valid.error().message);
    if (!c.errors.empty()) return std::unexpected(std::move(c.errors));
    return p;
}

}  // namespace tidemark::config
