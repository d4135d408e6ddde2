#include "adapters/codec/upstream_record.h"

#include <simdjson.h>

#include <algorithm>
#include <optional>
#include <string>

#include "adapters/codec/json_text.h"
#include "adapters/codec/utf8.h"

namespace tidemark::codec {

namespace {

// "key" in quotes, appended piecewise: GCC 12 at -O3 reports a false -Wrestrict on
// "\"" + std::string(key) (as in adapters/config/checker.cpp).
std::string quoted(std::string_view key) {
    std::string out;
    out.reserve(key.size() + 2);
    out += '"';
    out.append(key);
    out += '"';
    return out;
}

using simdjson::dom::element;
using simdjson::dom::element_type;
using simdjson::dom::object;

// What a value was, for messages: "a string", "the number 1.5", ...
std::string what(element e) {
    switch (e.type()) {
        case element_type::ARRAY:
            return "an array";
        case element_type::OBJECT:
            return "an object";
        case element_type::INT64:
            return "the number " + std::to_string(int64_t(e));
        case element_type::UINT64:
            return "the number " + std::to_string(uint64_t(e));
        case element_type::DOUBLE: {
            std::string text = "the number ";
            append_json_number(text, double(e));
            return text;
        }
        case element_type::STRING:
            return "a string";
        case element_type::BOOL:
            return bool(e) ? "true" : "false";
        case element_type::NULL_VALUE:
            return "null";
    }
    return "a value";
}

bool has_nul(std::string_view s) {
    return s.find('\0') != std::string_view::npos;
}

// Reads the fields of one record; the first problem found is kept, as one sentence.
class Fields {
  public:
    Fields(object o, std::string_view kind) : object_(o), kind_(kind) {}

    bool ok() const { return problem_.empty(); }
    std::string problem() const { return kind_ + ": " + problem_; }
    const std::string& bare_problem() const { return problem_; }
    void refuse(std::string problem) {
        if (problem_.empty()) problem_ = std::move(problem);
    }

    std::optional<element> get(std::string_view key, bool required = true) {
        element e;
        if (object_.at_key(key).get(e) != simdjson::SUCCESS) {
            if (required) refuse(quoted(key) + " is missing");
            return std::nullopt;
        }
        return e;
    }

    // A string without NUL; `out` is left alone when absent and not required.
    void text(std::string_view key, std::string& out, bool required = true) {
        auto e = get(key, required);
        if (!e) return;
        std::string_view s;
        if (e->get_string().get(s) != simdjson::SUCCESS) {
            refuse(quoted(key) + " must be a string, found " + what(*e));
        } else if (has_nul(s)) {
            refuse(quoted(key) +
                   " holds a NUL character, which PostgreSQL text "
                   "cannot store");
        } else {
            out.assign(s);
        }
    }

    // An integer in [min, max].
    void integer(std::string_view key, int64_t& out, int64_t min, int64_t max,
                 std::string_view range_text) {
        auto e = get(key);
        if (!e) return;
        int64_t v = 0;
        if ((e->type() != element_type::INT64 && e->type() != element_type::UINT64) ||
            e->get_int64().get(v) != simdjson::SUCCESS || v < min || v > max) {
            refuse(quoted(key) + " must be an integer " + std::string(range_text) + ", found " +
                   what(*e));
            return;
        }
        out = v;
    }

    void time(std::string_view key, int64_t& out) {
        integer(key, out, UpstreamParser::time_ms_min, UpstreamParser::time_ms_max,
                "of milliseconds since the epoch between about 4000 BC and 200000 AD");
    }

    object sub_object(std::string_view key, object& out) {
        auto e = get(key);
        if (!e) return out;
        if (e->get_object().get(out) != simdjson::SUCCESS)
            refuse(quoted(key) + " must be an object, found " + what(*e));
        return out;
    }

    void pipeline(std::string& out) {
        text("pipeline", out);
        if (ok() && !core::pipeline_view_name(out))
            refuse("the pipeline name '" + out + "' cannot name the view current_<pipeline>: " +
                   "use at most " + std::to_string(core::pipeline_view_name_bytes_max) +
                   " letters, digits, '-', '_' or '.'");
    }

  private:
    object object_;
    std::string kind_;
    std::string problem_;
};

// Every string and key in `e` free of NUL (jsonb refuses \u0000). Recursion is bounded by
// simdjson's depth limit.
bool free_of_nul(element e) {
    switch (e.type()) {
        case element_type::STRING:
            return !has_nul(std::string_view(e));
        case element_type::ARRAY:
            for (element child : simdjson::dom::array(e))
                if (!free_of_nul(child)) return false;
            return true;
        case element_type::OBJECT:
            for (auto field : object(e))
                if (has_nul(field.key) || !free_of_nul(field.value)) return false;
            return true;
        default:
            return true;
    }
}

core::UpstreamRecord parse_result(object o) {
    Fields f(o, "result record");
    core::ReceivedResult r;
    f.text("id", r.id);
    f.text("node", r.node);
    f.pipeline(r.pipeline);
    f.text("version", r.version, /*required=*/false);
    f.text("key", r.key);
    object window;
    f.sub_object("window", window);
    if (f.ok()) {
        Fields w(window, "window");
        w.time("start", r.window_start_ms);
        w.time("end", r.window_end_ms);
        if (w.ok() && r.window_end_ms <= r.window_start_ms)
            w.refuse("its end must be after its start (windows are [start, end))");
        if (!w.ok()) f.refuse("\"window\": " + w.bare_problem());
    }
    std::string kind;
    f.text("kind", kind);
    if (f.ok()) {
        if (kind == "final") {
            r.kind = core::EmissionKind::final_result;
        } else if (kind == "update") {
            r.kind = core::EmissionKind::update;
        } else if (kind == "retract") {
            r.kind = core::EmissionKind::retract;
        } else {
            f.refuse("\"kind\" must be final, update or retract, found '" + kind + "'");
        }
    }
    int64_t revision = 0;
    f.integer("revision", revision, 0, core::ReceivedResult::revision_max, "from 0 to 2147483647");
    r.revision = static_cast<uint32_t>(revision);
    f.text("closed_by", r.closed_by);
    f.time("watermark", r.watermark_ms);
    object values;
    f.sub_object("values", values);
    if (!f.ok()) return core::Refusal{f.problem()};
    r.values_json.clear();  // then appended: GCC 12 -O3 reports a false -Wrestrict on = "{"
    r.values_json += '{';
    for (auto field : values) {
        if (has_nul(field.key))
            return core::Refusal{"result record: a value's name holds a NUL character"};
        const element v = field.value;
        if (r.values_json.size() > 1) r.values_json += ',';
        append_json_string(r.values_json, field.key);
        r.values_json += ':';
        switch (v.type()) {
            case element_type::INT64:
                append_json_integer(r.values_json, int64_t(v));
                break;
            case element_type::UINT64:
                r.values_json += std::to_string(uint64_t(v));
                break;
            case element_type::DOUBLE:
                append_json_number(r.values_json, double(v));
                break;
            case element_type::NULL_VALUE:
                r.values_json += "null";
                break;
            default:
                return core::Refusal{"result record: the value \"" + std::string(field.key) +
                                     "\" must be a number or null, found " + what(v)};
        }
    }
    r.values_json += '}';
    return r;
}

core::UpstreamRecord parse_late(object o) {
    Fields f(o, "too-late tally");
    core::ReceivedLate l;
    f.text("id", l.id);
    f.text("node", l.node);
    f.pipeline(l.pipeline);
    f.text("version", l.version, /*required=*/false);
    object window;
    f.sub_object("window", window);
    if (f.ok()) {
        Fields w(window, "window");
        w.time("start", l.window_start_ms);
        w.time("end", l.window_end_ms);
        if (w.ok() && l.window_end_ms <= l.window_start_ms)
            w.refuse("its end must be after its start (windows are [start, end))");
        if (!w.ok()) f.refuse("\"window\": " + w.bare_problem());
    }
    f.integer("too_late", l.too_late, 1, INT64_MAX, "from 1");
    f.time("since_ms", l.since_ms);
    f.time("as_of_ms", l.as_of_ms);
    if (!f.ok()) return core::Refusal{f.problem()};
    return l;
}

core::UpstreamRecord parse_version(object o, std::string_view topic, std::string_view payload) {
    Fields f(o, "version record");
    core::ReceivedVersion v;
    v.topic.assign(topic);
    v.record_json.assign(payload);
    f.text("node", v.node);
    f.pipeline(v.pipeline);
    f.text("version", v.version);
    f.time("since_ms", v.since_ms);
    f.integer("switch_ms", v.switch_ms, INT64_MIN, INT64_MAX, "of milliseconds");
    if (auto previous = f.get("previous", /*required=*/false); previous && !previous->is_null()) {
        std::string text;
        f.text("previous", text);
        v.previous = std::move(text);
    }
    object aggregates;
    f.sub_object("aggregates", aggregates);
    if (!f.ok()) return core::Refusal{f.problem()};
    for (auto field : aggregates) {
        const std::string name(field.key);
        std::string_view fn;
        if (field.value.get_string().get(fn) != simdjson::SUCCESS || fn.empty() || has_nul(fn))
            return core::Refusal{"version record: the aggregate \"" + name +
                                 "\" must name its function as a string, found " +
                                 what(field.value)};
        if (has_nul(name)) return core::Refusal{"version record: an aggregate name holds NUL"};
        if (auto problem = core::aggregate_column_problem(name); !problem.empty())
            return core::Refusal{"version record: " + problem};
        const bool repeated = std::any_of(v.aggregates.begin(), v.aggregates.end(),
                                          [&](const auto& a) { return a.name == name; });
        if (repeated)
            return core::Refusal{"version record: the aggregate \"" + name + "\" appears twice"};
        v.aggregates.push_back({name, std::string(fn)});
    }
    return v;
}

core::UpstreamRecord parse_side(element root, object o, std::string_view payload) {
    Fields f(o, "side output");
    core::ReceivedSide s;
    f.text("node", s.node);
    f.text("pipeline", s.pipeline);
    if (!f.ok()) return core::Refusal{f.problem()};
    if (!free_of_nul(root))
        return core::Refusal{
            "side output: holds a NUL character, which PostgreSQL jsonb cannot "
            "store"};
    s.record_json.assign(payload);
    return s;
}

// A gateway's health record (health.upstream): node, time_ms and pipelines are what the sink
// relies on; the rest is kept as it came (a newer gateway's fields included).
core::UpstreamRecord parse_health(element root, object o, std::string_view topic,
                                  std::string_view payload) {
    Fields f(o, "health record");
    core::ReceivedHealth h;
    h.topic.assign(topic);
    f.text("node", h.node);
    if (f.ok() && h.node.empty()) f.refuse("\"node\" is empty");
    f.time("time_ms", h.time_ms);
    object pipelines;
    f.sub_object("pipelines", pipelines);
    if (!f.ok()) return core::Refusal{f.problem()};
    if (!free_of_nul(root))
        return core::Refusal{
            "health record: holds a NUL character, which PostgreSQL jsonb cannot store"};
    h.record_json.assign(payload);
    return h;
}

}  // namespace

struct UpstreamParser::Impl {
    simdjson::dom::parser parser;
};

UpstreamParser::UpstreamParser() : impl_(std::make_unique<Impl>()) {}
UpstreamParser::~UpstreamParser() = default;

core::UpstreamRecord UpstreamParser::parse(std::string_view topic, std::string_view payload) {
    // MQTT topics are UTF-8 without NUL (3.1.1, 1.5.3), but a broker may not check: the topic
    // goes into text columns (versions.topic, rejected.topic).
    if (!is_valid_utf8(topic) || has_nul(topic))
        return core::Refusal{"the topic is not valid UTF-8 without NUL"};
    if (payload.empty()) {
        if (topic.ends_with("/version")) return core::VersionRemoved{std::string(topic)};
        return core::Refusal{"an empty message, not on a version topic (<topic>/version)"};
    }
    element root;
    // realloc_if_needed: the parser copies the payload into its own padded buffer.
    if (auto error = impl_->parser.parse(payload.data(), payload.size(), true).get(root)) {
        if (error == simdjson::UTF8_ERROR) return core::Refusal{"not valid UTF-8"};
        return core::Refusal{std::string("not JSON: ") + simdjson::error_message(error)};
    }
    object o;
    if (root.get_object().get(o) != simdjson::SUCCESS)
        return core::Refusal{"not a JSON object but " + what(root)};
    auto has = [&o](std::string_view key) {
        element unused;
        return o.at_key(key).get(unused) == simdjson::SUCCESS;
    };
    // Side output names a window too, but never a kind; a result never a reason. A too-late
    // tally names a window and its count, never a kind (and goes to "/late", which the class
    // does not rely on: a gateway chooses its topics).
    const bool side = has("reason") || has("malformed");
    if (!has("kind") && has("too_late") && !side) return parse_late(o);
    if (has("kind") || (has("window") && !side)) return parse_result(o);
    if (has("switch_ms")) return parse_version(o, topic, payload);
    if (side) return parse_side(root, o, payload);
    // A gateway's health names neither a window nor a kind; uptime_s with pipelines is a
    // gateway's (a sink's health has uptime_s but no pipelines, and is refused).
    if (has("uptime_s") && has("pipelines")) return parse_health(root, o, topic, payload);
    return core::Refusal{
        "a JSON object that is no tidemark record: a result has \"kind\" and \"window\", a "
        "version record \"switch_ms\", a too-late tally \"too_late\", side output "
        "\"reason\" or \"malformed\", a gateway's health \"uptime_s\" and \"pipelines\""};
}

}  // namespace tidemark::codec
