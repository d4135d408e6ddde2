// The pipeline sections: topic filter, key and partition, timestamp, fields, window, watermark,
// late policy, aggregates, quantile options and limits.
#include <algorithm>
#include <charconv>

#include "adapters/config/checker.h"
#include "core/aggregate.h"

namespace tidemark::config::detail {
namespace {

// Bounds on what one pipeline may declare; each protects a hot-path structure sized by it.
constexpr size_t fields_max = 64;
constexpr size_t aggregates_max = 64;
constexpr size_t key_parts_max = 8;
constexpr int topic_level_max = 1023;

}  // namespace

// MQTT 3.1.1 section 4.7: '+' fills a whole level, '#' only as the whole last level.
std::optional<std::string> topic_filter_problem(std::string_view filter) {
    if (filter.empty()) return "a topic filter cannot be empty";
    if (filter.size() > topic_bytes_max) {
        return "a topic filter is at most " + std::to_string(topic_bytes_max) + " bytes";
    }
    for (size_t i = 0; i < filter.size(); ++i) {
        char c = filter[i];
        if (c == '\0') return "a topic filter cannot contain NUL";
        bool level_start = i == 0 || filter[i - 1] == '/';
        bool level_end = i + 1 == filter.size() || filter[i + 1] == '/';
        if (c == '+' && !(level_start && level_end)) {
            return "'+' must be a whole level, as in \"sensors/+/telemetry\"";
        }
        if (c == '#' && !(level_start && i + 1 == filter.size())) {
            return "'#' must be the whole last level, as in \"sensors/#\"";
        }
    }
    return std::nullopt;
}

namespace {

struct FilterShape {
    int literal_levels = 0;  // levels in the filter before any '#'
    bool multi_level = false;
};
FilterShape filter_shape(std::string_view filter) {
    FilterShape shape;
    size_t start = 0;
    while (true) {
        size_t slash = filter.find('/', start);
        std::string_view level = filter.substr(
            start, slash == std::string_view::npos ? std::string_view::npos : slash - start);
        if (level == "#") {
            shape.multi_level = true;
            break;
        }
        ++shape.literal_levels;
        if (slash == std::string_view::npos) break;
        start = slash + 1;
    }
    return shape;
}

bool is_valid_json_pointer(std::string_view text) {
    if (!text.starts_with('/')) return false;
    for (size_t i = 0; i < text.size(); ++i) {
        if (text[i] == '~' &&
            (i + 1 == text.size() || (text[i + 1] != '0' && text[i + 1] != '1'))) {
            return false;
        }
    }
    return true;
}

// "topic:N" or "/json/pointer".
std::optional<Extractor> parse_extractor(Checker& c, const Json& j, const std::string& pointer,
                                         const std::optional<FilterShape>& shape) {
    if (!j.is_string()) {
        c.error(pointer, "expected \"topic:N\" or a JSON pointer such as \"/device\", found " +
                             type_phrase(j));
        return std::nullopt;
    }
    auto text = j.get<std::string>();
    if (text.starts_with("topic:")) {
        std::string_view digits = std::string_view(text).substr(6);
        int level = -1;
        auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), level);
        if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() ||
            level < 0 || level > topic_level_max) {
            c.error(pointer, in_quotes(text) + " is not \"topic:N\" with N a level number from 0");
            return std::nullopt;
        }
        if (shape && !shape->multi_level && level >= shape->literal_levels) {
            c.error(pointer,
                    in_quotes(text) + " is past the last level of the topic filter, which has " +
                        std::to_string(shape->literal_levels) + " levels (numbered from 0)");
            return std::nullopt;
        }
        return Extractor{Extractor::topic_level, level, ""};
    }
    if (!text.starts_with('/')) {
        c.error(pointer,
                in_quotes(text) + " is neither \"topic:N\" nor a JSON pointer starting with \"/\"");
        return std::nullopt;
    }
    if (!is_valid_json_pointer(text)) {
        c.error(pointer, in_quotes(text) +
                             " is not a valid JSON pointer: '~' must be followed by 0 (for ~) or "
                             "1 (for /)");
        return std::nullopt;
    }
    return Extractor{Extractor::json_pointer, 0, text};
}

// One extractor, or a list of them for a composite key.
std::vector<Extractor> parse_extractors(Checker& c, const Json& j, const std::string& pointer,
                                        const std::optional<FilterShape>& shape) {
    std::vector<Extractor> out;
    if (!j.is_array()) {
        if (auto e = parse_extractor(c, j, pointer, shape)) out.push_back(*e);
        return out;
    }
    if (j.empty() || j.size() > key_parts_max) {
        c.error(pointer, "a composite key lists 1 to " + std::to_string(key_parts_max) +
                             " parts, not " + std::to_string(j.size()));
        return out;
    }
    for (size_t i = 0; i < j.size(); ++i) {
        if (auto e = parse_extractor(c, j[i], child(pointer, i), shape)) out.push_back(*e);
    }
    return out;
}

// "ingest" (the default) or {"pointer", "format"}.
void read_timestamp(Checker& c, const Json& pipeline, const std::string& pointer,
                    TimestampSpec& ts) {
    const Json* j = Checker::member(pipeline, "timestamp");
    if (!j) return;
    std::string p = child(pointer, "timestamp");
    if (j->is_string() && j->get<std::string>() == "ingest") {
        ts.ingest = true;
        return;
    }
    if (!j->is_object()) {
        c.error(p, R"(expected "ingest" or {"pointer": "/ts", "format": "epoch_ms"}, found )" +
                       type_phrase(*j));
        return;
    }
    c.check_keys(*j, p, {"pointer", "format"});
    ts.ingest = false;
    if (c.read_string(*j, p, "pointer", ts.pointer, "the JSON pointer to the time, e.g. \"/ts\"") &&
        !is_valid_json_pointer(ts.pointer)) {
        c.error(p + "/pointer", in_quotes(ts.pointer) +
                                    " is not a JSON pointer: start it with \"/\" and write '~' as "
                                    "~0, '/' as ~1");
    }
    c.read_choice(*j, p, "format", ts.format,
                  {{"epoch_s", TimestampSpec::epoch_s},
                   {"epoch_ms", TimestampSpec::epoch_ms},
                   {"epoch_us", TimestampSpec::epoch_us},
                   {"epoch_ns", TimestampSpec::epoch_ns},
                   {"rfc3339", TimestampSpec::rfc3339}});
}

void read_window(Checker& c, const Json& pipeline, const std::string& pointer,
                 core::WindowSpec& window) {
    // Keys depend on the type, so they are checked below, not by section().
    Section s = c.section(pipeline, pointer, "window", R"({"type": "tumbling", "size": "1m"})", {},
                          R"(the window, e.g. {"type": "tumbling", "size": "1m"})");
    if (!s) return;
    const std::string& p = s.pointer;
    if (!c.read_choice(*s, p, "type", window.type,
                       {{"tumbling", core::WindowType::tumbling},
                        {"hopping", core::WindowType::hopping},
                        {"session", core::WindowType::session}},
                       "tumbling, hopping or session")) {
        return;
    }
    switch (window.type) {
        case core::WindowType::tumbling:
            c.check_keys(*s, p, {"type", "size", "offset"}, "for a tumbling window");
            c.read_duration(*s, p, "size", window.size_ms, true, "the window length, e.g. \"1m\"");
            c.read_duration(*s, p, "offset", window.offset_ms, false);
            break;
        case core::WindowType::hopping:
            c.check_keys(*s, p, {"type", "size", "advance"}, "for a hopping window");
            c.read_duration(*s, p, "size", window.size_ms, true, "the window length, e.g. \"1h\"");
            c.read_duration(*s, p, "advance", window.advance_ms, true,
                            "how often a window starts, e.g. \"1m\"");
            break;
        case core::WindowType::session:
            c.check_keys(*s, p, {"type", "gap", "max_duration"}, "for a session window");
            window.size_ms = 0;
            window.max_duration_ms = 24LL * 3600 * 1000;
            c.read_duration(*s, p, "gap", window.gap_ms, true,
                            "the silence that ends a session, e.g. \"5m\"");
            c.read_duration(*s, p, "max_duration", window.max_duration_ms, true);
            break;
    }
}

void read_watermark(Checker& c, const Json& pipeline, const std::string& pointer,
                    core::WatermarkSpec& wm) {
    Section s = c.section(pipeline, pointer, "watermark", R"({"delay": "5s"})",
                          {"delay", "idle_timeout", "max_future", "scope"});
    if (!s) return;
    c.read_duration(*s, s.pointer, "delay", wm.delay_ms, false);
    c.read_duration(*s, s.pointer, "idle_timeout", wm.idle_timeout_ms, true);
    c.read_duration(*s, s.pointer, "max_future", wm.max_future_ms, false);
    c.read_choice(
        *s, s.pointer, "scope", wm.scope,
        {{"global", core::WatermarkScope::global}, {"partition", core::WatermarkScope::partition}});
}

void read_too_late_alarm(Checker& c, const Section& late, PipelineConfig::TooLateAlarm& alarm) {
    const Json* j = Checker::member(*late, "alarm");
    if (!j) return;
    if (j->is_boolean() && !j->get<bool>()) {
        alarm.enabled = false;
        return;
    }
    Section s = c.section(*late, late.pointer, "alarm", R"({"share": 0.01, "over": "5m"} or false)",
                          {"share", "over"});
    if (!s) return;
    c.read_fraction(*s, s.pointer, "share", alarm.share, 0, 1, true);
    c.read_duration(*s, s.pointer, "over", alarm.over_ms, true);
}

// late.report: true, false or {"every": "1m"}. On by default with too_late "drop", where the
// per-window count is all the consumer learns of what was dropped; off by default with
// "side_output", which sends every too-late event itself.
void read_late_report(Checker& c, const Section& late, core::LateSpec& spec) {
    spec.report = spec.too_late == core::TooLate::drop;
    const Json* j = Checker::member(*late, "report");
    if (!j) return;
    if (j->is_boolean()) {
        spec.report = j->get<bool>();
        return;
    }
    Section s =
        c.section(*late, late.pointer, "report", R"({"every": "1m"}, true or false)", {"every"});
    if (!s) return;
    spec.report = true;
    if (c.read_duration(*s, s.pointer, "every", spec.report_every_ms, true) &&
        spec.report_every_ms < 1'000)
        c.error(child(s.pointer, "every"),
                "at least 1s: each interval may send a record for each of up to 256 windows");
}

void read_late(Checker& c, const Json& pipeline, const std::string& pointer, PipelineConfig& out) {
    core::LateSpec& late = out.spec.late;
    late.report = late.too_late == core::TooLate::drop;  // without a "late" section too
    Section s = c.section(pipeline, pointer, "late", R"({"allowed_lateness": "10m"})",
                          {"allowed_lateness", "too_late", "corrections", "alarm", "report"});
    if (!s) return;
    read_too_late_alarm(c, s, out.too_late_alarm);
    c.read_duration(*s, s.pointer, "allowed_lateness", late.allowed_lateness_ms, false);
    c.read_choice(*s, s.pointer, "too_late", late.too_late,
                  {{"drop", core::TooLate::drop}, {"side_output", core::TooLate::side_output}});
    c.read_choice(*s, s.pointer, "corrections", late.corrections,
                  {{"upsert", core::Corrections::upsert}, {"retract", core::Corrections::retract}});
    read_late_report(c, s, late);
}

void read_fields(Checker& c, const Json& pipeline, const std::string& pointer,
                 PipelineConfig& out) {
    // Keys are the operator's field names, checked one by one below.
    Section s = c.section(pipeline, pointer, "fields", R"({"temp": "/temp"})", {});
    if (!s) return;
    if (s->size() > fields_max) {
        c.error(s.pointer, "at most " + std::to_string(fields_max) + " fields per pipeline, not " +
                               std::to_string(s->size()));
        return;
    }
    for (const auto& [name, value] : s->items()) {
        std::string fp = child(s.pointer, name);
        if (!is_name(name)) {
            c.error(fp, in_quotes(name) +
                            " is not a field name: use 1 to 64 letters, digits, '-', '_' or '.'");
            continue;
        }
        if (!value.is_string() || !is_valid_json_pointer(value.get<std::string>())) {
            c.error(fp, "expected a JSON pointer such as \"/temp\", found " + type_phrase(value));
            continue;
        }
        out.spec.fields.push_back(name);
        out.field_pointers.push_back(value.get<std::string>());
    }
}

// One entry of "aggregates"; nullopt when its name, shape or fn is refused. A refused field
// or q is reported and the entry still returned: the pipeline's errors keep it from use.
std::optional<core::AggregateSpec> read_aggregate(Checker& c, const std::string& name,
                                                  const Json& value, const std::string& ap,
                                                  const std::vector<std::string>& fields) {
    if (!is_name(name)) {
        c.error(ap, in_quotes(name) +
                        " is not an aggregate name: use 1 to 64 letters, digits, '-', '_' or '.'");
        return std::nullopt;
    }
    if (!c.expect_object(value, ap, R"({"fn": "mean", "field": "temp"})")) return std::nullopt;
    c.check_keys(value, ap, {"fn", "field", "q"});
    core::AggregateSpec spec;
    spec.name = name;
    constexpr std::string_view fns =
        "count, sum, min, max, mean, first, last, variance, stddev or quantile";
    std::string fn_name;
    if (!c.read_string(value, ap, "fn", fn_name, fns)) return std::nullopt;
    auto fn = core::parse_aggregate_fn(fn_name);
    if (!fn) {
        c.error(ap + "/fn", in_quotes(fn_name) + " is not an aggregate: use " + std::string(fns));
        return std::nullopt;
    }
    spec.fn = *fn;
    std::string field;
    bool needs_field = spec.fn != core::AggregateFn::count;
    if (c.read_string(value, ap, "field", field,
                      needs_field ? "the field it aggregates, one of \"fields\"" : "")) {
        auto it = std::find(fields.begin(), fields.end(), field);
        if (it == fields.end()) {
            c.error(ap + "/field", in_quotes(field) + " is not in this pipeline's fields (" +
                                       (fields.empty() ? std::string("none") : join(fields, ", ")) +
                                       "): add it to \"fields\" with its JSON pointer");
        } else {
            spec.field = static_cast<int>(it - fields.begin());
        }
    }
    if (spec.fn == core::AggregateFn::quantile) {
        c.read_fraction(value, ap, "q", spec.q, 0.0, 1.0, false,
                        "the quantile between 0 and 1 (exclusive), e.g. 0.95");
    } else if (Checker::member(value, "q")) {
        c.error(ap + "/q", "q applies only to \"fn\": \"quantile\"");
    }
    return spec;
}

void read_aggregates(Checker& c, const Json& pipeline, const std::string& pointer,
                     PipelineConfig& out) {
    const char* example = R"({"n": {"fn": "count"}, "avg": {"fn": "mean", "field": "temp"}})";
    Section s = c.section(pipeline, pointer, "aggregates", example, {},
                          std::string("what to compute per window, e.g. ") + example);
    if (!s) return;
    if (s->empty() || s->size() > aggregates_max) {
        c.error(s.pointer, "a pipeline computes 1 to " + std::to_string(aggregates_max) +
                               " aggregates, not " + std::to_string(s->size()) + ", e.g. " +
                               example);
        return;
    }
    for (const auto& [name, value] : s->items()) {
        auto spec = read_aggregate(c, name, value, child(s.pointer, name), out.spec.fields);
        if (spec) out.spec.aggregates.push_back(std::move(*spec));
    }
}

void read_quantile_options(Checker& c, const Json& pipeline, const std::string& pointer,
                           core::QuantileOptions& options) {
    Section s =
        c.section(pipeline, pointer, "quantile", R"({"relative_error": 0.01, "max_buckets": 1024})",
                  {"relative_error", "max_buckets"});
    if (!s) return;
    double relative_error = options.relative_error;
    if (c.read_fraction(*s, s.pointer, "relative_error", relative_error, 0.0, 0.5, true)) {
        // The sketch's own lower bound: anything that passes here must construct at run time.
        if (relative_error < core::QuantileSketch::relative_error_min)
            c.error(child(s.pointer, "relative_error"),
                    "must be at least 1e-06 (finer bounds need more buckets than a window can "
                    "hold), not " +
                        std::to_string(relative_error));
        else
            options.relative_error = relative_error;
    }
    uint64_t buckets = 0;
    if (c.read_uint(*s, s.pointer, "max_buckets", buckets, 16, 65536)) {
        options.buckets_max = static_cast<uint32_t>(buckets);
    }
}

void read_limits(Checker& c, const Json& pipeline, const std::string& pointer,
                 core::Limits& limits) {
    Section s = c.section(pipeline, pointer, "limits",
                          R"({"max_keys": 100000, "max_open_windows": 1000000})",
                          {"max_keys", "max_open_windows"});
    if (!s) return;
    c.read_uint(*s, s.pointer, "max_keys", limits.keys_max, 1, 1ULL << 32);
    c.read_uint(*s, s.pointer, "max_open_windows", limits.open_windows_max, 1, 1ULL << 36);
}

// "name" and "topic", and the shape of the filter that the key's topic levels must fit.
std::optional<FilterShape> read_name_and_topic(Checker& c, const Json& j, const std::string& p,
                                               PipelineConfig& out) {
    if (c.read_string(j, p, "name", out.spec.name, "a unique name such as \"room_temp_1m\"") &&
        !is_name(out.spec.name)) {
        c.error(p + "/name", in_quotes(out.spec.name) +
                                 " is not a pipeline name: use 1 to 64 letters, digits, '-', '_' "
                                 "or '.' (it becomes an MQTT topic level)");
    }
    if (!c.read_string(j, p, "topic", out.topic_filter,
                       "the MQTT topic filter to read, e.g. \"sensors/+/telemetry\"")) {
        return std::nullopt;
    }
    if (auto problem = topic_filter_problem(out.topic_filter)) {
        c.error(p + "/topic",
                in_quotes(out.topic_filter) + " is not a valid MQTT topic filter: " + *problem);
        return std::nullopt;
    }
    return filter_shape(out.topic_filter);
}

}  // namespace

void read_pipeline(Checker& c, const Json& j, const std::string& p, PipelineConfig& out) {
    const char* example = R"({"name": "temp_1m", "topic": "sensors/+/telemetry", ...})";
    if (!c.expect_object(j, p, example)) return;
    c.check_keys(j, p,
                 {"name", "topic", "key", "partition", "timestamp", "fields", "window", "watermark",
                  "late", "aggregates", "quantile", "limits", "backfill"});
    std::optional<FilterShape> shape = read_name_and_topic(c, j, p, out);
    if (const Json* key = Checker::member(j, "key")) {
        out.key = parse_extractors(c, *key, p + "/key", shape);
    } else {
        c.missing(p + "/key", "what identifies a series: \"topic:N\", a JSON pointer, or a list");
    }
    if (const Json* partition = Checker::member(j, "partition")) {
        out.partition = parse_extractors(c, *partition, p + "/partition", shape);
    }
    read_timestamp(c, j, p, out.timestamp);
    read_fields(c, j, p, out);
    read_window(c, j, p, out.spec.window);
    read_watermark(c, j, p, out.spec.watermark);
    read_late(c, j, p, out);
    read_aggregates(c, j, p, out);
    read_quantile_options(c, j, p, out.spec.quantile);
    read_limits(c, j, p, out.spec.limits);
    read_backfill_from(c, j, p, out);
    // The definition as written, compact, and what it means: see PipelineConfig::version.
    out.definition = j.dump();
    out.spec.version = pipeline_version(out);
}

}  // namespace tidemark::config::detail
