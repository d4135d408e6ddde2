// Pipeline versions (DESIGN.md section 4): the hash of a definition, the backfill settings, and
// a stored definition read back.
#include <bit>
#include <cstdio>

#include "adapters/config/checker.h"
#include "core/duration.h"
#include "core/hash.h"

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

// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil).
int64_t days_from_civil(int64_t y, int64_t m, int64_t d) {
    y -= m <= 2;
    const int64_t era = (y >= 0 ? y : y - 399) / 400;
    const int64_t yoe = y - era * 400;
    const int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

// "2026-11-30T12:00:00Z", with optional fractional seconds and a "+hh:mm"/"-hh:mm" offset.
std::optional<int64_t> parse_rfc3339_ms(const std::string& s) {
    int y, mo, d, h, mi, sec, n = 0;
    if (std::sscanf(s.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &y, &mo, &d, &h, &mi, &sec, &n) != 6 ||
        n != 19 || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60)
        return std::nullopt;
    size_t i = 19;
    int64_t frac_ms = 0;
    if (i < s.size() && s[i] == '.') {
        int64_t scale = 100;
        for (++i; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i, scale /= 10)
            frac_ms += (s[i] - '0') * scale;
    }
    int64_t offset_min = 0;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) {
        int oh, om, m = 0;
        if (std::sscanf(s.c_str() + i + 1, "%2d:%2d%n", &oh, &om, &m) != 2 || m != 5)
            return std::nullopt;
        offset_min = (s[i] == '+' ? 1 : -1) * (oh * 60 + om);
        i += 6;
    } else if (i < s.size() && (s[i] == 'Z' || s[i] == 'z')) {
        ++i;
    } else {
        return std::nullopt;
    }
    if (i != s.size()) return std::nullopt;
    const int64_t days = days_from_civil(y, mo, d);
    return ((days * 24 + h) * 60 + mi - offset_min) * 60'000 + sec * 1000LL + frac_ms;
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
    } else if (auto at = parse_rfc3339_ms(text)) {
        out.backfill_from_ms = *at;
    } else {
        c.error(s.pointer + "/from", in_quotes(text) +
                                         " is neither a duration (\"7d\") nor an RFC 3339 time "
                                         "(\"2026-11-30T00:00:00Z\")");
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
