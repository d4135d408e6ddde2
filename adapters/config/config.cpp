// The config loader: walks the document once, collecting every error with its JSON pointer.
#include "adapters/config/config.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "core/aggregate.h"
#include "core/duration.h"

namespace tidemark::config {
namespace {

// ordered_json keeps the document's order: "fields" and "aggregates" are ordered by it.
using Json = nlohmann::ordered_json;

// Bounds on what one config may declare; each protects a hot-path structure sized by it.
constexpr size_t pipelines_max = 64;
constexpr size_t fields_max = 64;
constexpr size_t aggregates_max = 64;
constexpr size_t key_parts_max = 8;
constexpr size_t name_bytes_max = 64;
constexpr size_t password_bytes_max = 4096;
constexpr size_t topic_bytes_max = 65535;  // MQTT's limit on a topic (filter)
constexpr int topic_level_max = 1023;
constexpr uint64_t payload_bytes_limit = 256ULL << 20;  // MQTT's maximum packet size

std::string escape_pointer_token(std::string_view token) {
    std::string out;
    for (char c : token) {
        if (c == '~') {
            out += "~0";
        } else if (c == '/') {
            out += "~1";
        } else {
            out += c;
        }
    }
    return out;
}

std::string child(const std::string& pointer, std::string_view key) {
    return pointer + "/" + escape_pointer_token(key);
}
std::string child(const std::string& pointer, size_t index) {
    return pointer + "/" + std::to_string(index);
}

std::string in_quotes(std::string_view s) {
    return "\"" + std::string(s) + "\"";
}

// A short rendering of a value for messages: strings quoted, big values elided.
std::string show(const Json& j) {
    std::string text = j.dump();
    if (text.size() > 60) text = text.substr(0, 57) + "...";
    return text;
}

std::string type_phrase(const Json& j) {
    switch (j.type()) {
        case Json::value_t::null:
            return "null";
        case Json::value_t::boolean:
            return "the boolean " + show(j);
        case Json::value_t::string:
            return "the string " + show(j);
        case Json::value_t::object:
            return "an object";
        case Json::value_t::array:
            return "an array";
        default:
            return "the number " + show(j);
    }
}

size_t edit_distance(std::string_view a, std::string_view b) {
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j)
        row[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
        size_t diagonal = row[0];
        row[0] = i;
        for (size_t j = 1; j <= b.size(); ++j) {
            size_t above = row[j];
            row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
            diagonal = above;
        }
    }
    return row[b.size()];
}

std::string join(const std::vector<std::string>& items, std::string_view separator) {
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += separator;
        out += items[i];
    }
    return out;
}

// "1.5MiB"-style approximation for sizes in budget messages (format_size is exact only).
std::string approx_size(uint64_t bytes) {
    static constexpr const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    double value = static_cast<double>(bytes);
    int unit = 0;
    while (value >= 1024 && unit < 6) {
        value /= 1024;
        ++unit;
    }
    char buffer[32];
    if (unit == 0 || std::fmod(value, 1.0) == 0) {
        std::snprintf(buffer, sizeof buffer, "%.0f%s", value, units[unit]);
    } else {
        std::snprintf(buffer, sizeof buffer, "%.1f%s", value, units[unit]);
    }
    return buffer;
}

bool is_name(std::string_view s) {
    if (s.empty() || s.size() > name_bytes_max) return false;
    return std::all_of(s.begin(), s.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '_' || c == '-' || c == '.';
    });
}

// MQTT 3.1.1 section 4.7: '+' fills a whole level, '#' only as the whole last level.
std::optional<std::string> topic_filter_problem(std::string_view filter) {
    if (filter.empty()) return "a topic filter cannot be empty";
    if (filter.size() > topic_bytes_max) return "a topic filter is at most 65535 bytes";
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

std::string window_description(const core::PipelineSpec& spec) {
    using core::format_duration;
    const auto& w = spec.window;
    std::string text;
    switch (w.type) {
        case core::WindowType::tumbling:
            text = format_duration(w.size_ms) + " tumbling";
            break;
        case core::WindowType::hopping:
            text = format_duration(w.size_ms) + " hopping every " + format_duration(w.advance_ms);
            break;
        case core::WindowType::session:
            text = "sessions with a " + format_duration(w.gap_ms) + " gap, at most " +
                   format_duration(w.max_duration_ms) + " long";
            break;
    }
    std::vector<std::string> extras;
    if (spec.watermark.delay_ms > 0) {
        extras.push_back(format_duration(spec.watermark.delay_ms) + " delay");
    }
    if (spec.late.allowed_lateness_ms > 0) {
        extras.push_back(format_duration(spec.late.allowed_lateness_ms) + " allowed lateness");
    }
    if (!extras.empty()) text += ", plus " + join(extras, " and ");
    return text;
}

class Checker {
  public:
    explicit Checker(std::string base_dir) : base_dir_(std::move(base_dir)) {}

    std::vector<ConfigError> errors;

    void error(std::string pointer, std::string message) {
        errors.push_back({std::move(pointer), std::move(message)});
    }

    bool expect_object(const Json& j, const std::string& pointer, std::string_view example) {
        if (j.is_object()) return true;
        error(pointer,
              "expected an object such as " + std::string(example) + ", found " + type_phrase(j));
        return false;
    }

    void check_keys(const Json& object, const std::string& pointer,
                    std::initializer_list<std::string_view> allowed,
                    std::string_view context = {}) {
        std::vector<std::string> names(allowed.begin(), allowed.end());
        for (const auto& [key, value] : object.items()) {
            if (std::find(names.begin(), names.end(), key) != names.end()) continue;
            // Known, refused with its own sentence by read_credentials.
            if (key == "password" &&
                std::find(names.begin(), names.end(), "password_file") != names.end()) {
                continue;
            }
            std::string message = "unknown key " + in_quotes(key);
            if (!context.empty()) message += " " + std::string(context);
            message += ": allowed keys are " + join(names, ", ");
            size_t best = 3;
            std::string suggestion;
            for (const auto& name : names) {
                size_t d = edit_distance(key, name);
                if (d < best) {
                    best = d;
                    suggestion = name;
                }
            }
            if (!suggestion.empty()) message += " (did you mean " + in_quotes(suggestion) + "?)";
            error(child(pointer, key), message);
        }
    }

    static const Json* member(const Json& object, std::string_view key) {
        auto it = object.find(std::string(key));
        return it == object.end() ? nullptr : &*it;
    }

    void missing(const std::string& pointer, std::string_view hint) {
        error(pointer, "is required: " + std::string(hint));
    }

    // Each reader: absent and optional -> false, no error; absent and required -> error;
    // present -> checks type and range, writes `out` only when valid.
    bool read_string(const Json& object, const std::string& pointer, std::string_view key,
                     std::string& out, std::string_view required_hint = {}) {
        const Json* j = member(object, key);
        std::string p = child(pointer, key);
        if (!j) {
            if (!required_hint.empty()) missing(p, required_hint);
            return false;
        }
        if (!j->is_string()) {
            error(p, "expected a string, found " + type_phrase(*j));
            return false;
        }
        out = j->get<std::string>();
        return true;
    }

    bool read_duration(const Json& object, const std::string& pointer, std::string_view key,
                       int64_t& out, bool positive, std::string_view required_hint = {}) {
        const Json* j = member(object, key);
        std::string p = child(pointer, key);
        if (!j) {
            if (!required_hint.empty()) missing(p, required_hint);
            return false;
        }
        if (!j->is_string()) {
            error(p, "expected a duration string such as \"5s\", found " + type_phrase(*j));
            return false;
        }
        auto text = j->get<std::string>();
        auto parsed = core::parse_duration_ms(text);
        if (!parsed) {
            error(p, in_quotes(text) +
                         " is not a duration: use a number followed by ms, s, m, h or d");
            return false;
        }
        if (*parsed < 0 || (positive && *parsed == 0)) {
            error(p, in_quotes(text) + " must be " + (positive ? "more than 0" : "0 or more"));
            return false;
        }
        out = *parsed;
        return true;
    }

    bool read_size(const Json& object, const std::string& pointer, std::string_view key,
                   uint64_t& out, uint64_t min_bytes, uint64_t max_bytes,
                   std::string_view required_hint = {}) {
        const Json* j = member(object, key);
        std::string p = child(pointer, key);
        if (!j) {
            if (!required_hint.empty()) missing(p, required_hint);
            return false;
        }
        if (!j->is_string()) {
            error(p, "expected a size string such as \"64MiB\", found " + type_phrase(*j));
            return false;
        }
        auto text = j->get<std::string>();
        auto parsed = core::parse_size_bytes(text);
        if (!parsed) {
            error(p, in_quotes(text) +
                         " is not a size: use a number followed by B, KiB, MiB, GiB or TiB");
            return false;
        }
        if (*parsed < min_bytes || *parsed > max_bytes) {
            error(p, in_quotes(text) + " is out of range: use between " +
                         core::format_size(min_bytes) + " and " + core::format_size(max_bytes));
            return false;
        }
        out = *parsed;
        return true;
    }

    bool read_uint(const Json& object, const std::string& pointer, std::string_view key,
                   uint64_t& out, uint64_t min, uint64_t max, std::string_view required_hint = {}) {
        const Json* j = member(object, key);
        std::string p = child(pointer, key);
        if (!j) {
            if (!required_hint.empty()) missing(p, required_hint);
            return false;
        }
        if (!j->is_number_integer()) {
            error(p, "expected an integer, found " + type_phrase(*j));
            return false;
        }
        if (!j->is_number_unsigned() || j->get<uint64_t>() < min || j->get<uint64_t>() > max) {
            error(p, "must be between " + std::to_string(min) + " and " + std::to_string(max) +
                         ", not " + show(*j));
            return false;
        }
        out = j->get<uint64_t>();
        return true;
    }

    bool read_bool(const Json& object, const std::string& pointer, std::string_view key,
                   bool& out) {
        const Json* j = member(object, key);
        if (!j) return false;
        if (!j->is_boolean()) {
            error(child(pointer, key), "expected true or false, found " + type_phrase(*j));
            return false;
        }
        out = j->get<bool>();
        return true;
    }

    // A number strictly between `low` and `high` (exclusive) or up to `high` when inclusive.
    bool read_fraction(const Json& object, const std::string& pointer, std::string_view key,
                       double& out, double low, double high, bool high_inclusive,
                       std::string_view required_hint = {}) {
        const Json* j = member(object, key);
        std::string p = child(pointer, key);
        if (!j) {
            if (!required_hint.empty()) missing(p, required_hint);
            return false;
        }
        if (!j->is_number()) {
            error(p, "expected a number, found " + type_phrase(*j));
            return false;
        }
        double v = j->get<double>();
        bool ok = v > low && (high_inclusive ? v <= high : v < high);
        if (!ok) {
            std::ostringstream range;
            range << "must be more than " << low << " and "
                  << (high_inclusive ? "at most " : "less than ") << high << ", not " << show(*j);
            error(p, range.str());
            return false;
        }
        out = v;
        return true;
    }

    template <typename E>
    bool read_choice(const Json& object, const std::string& pointer, std::string_view key, E& out,
                     std::initializer_list<std::pair<std::string_view, E>> choices,
                     std::string_view required_hint = {}) {
        const Json* j = member(object, key);
        std::string p = child(pointer, key);
        if (!j) {
            if (!required_hint.empty()) missing(p, required_hint);
            return false;
        }
        std::vector<std::string> names;
        for (const auto& choice : choices)
            names.emplace_back(choice.first);
        if (j->is_string()) {
            auto text = j->get<std::string>();
            for (const auto& [name, value] : choices) {
                if (name == text) {
                    out = value;
                    return true;
                }
            }
        }
        error(p, show(*j) + " is not one of " + join(names, ", "));
        return false;
    }

    std::string resolve_path(const std::string& path) const {
        std::filesystem::path p(path);
        if (p.is_relative() && !base_dir_.empty()) p = std::filesystem::path(base_dir_) / p;
        return p.lexically_normal().string();
    }

    // A file that must be readable now (so that a bad path fails check-config, not the service).
    bool readable_file(const std::string& pointer, const std::string& path, std::string_view what,
                       std::string* contents = nullptr, size_t bytes_max = 0) {
        errno = 0;
        std::ifstream in(path, std::ios::binary);
        if (!in) {
            error(pointer, "cannot read the " + std::string(what) + " " + in_quotes(path) + ": " +
                               std::strerror(errno ? errno : ENOENT));
            return false;
        }
        if (std::filesystem::is_directory(path)) {
            error(pointer, "the " + std::string(what) + " " + in_quotes(path) + " is a directory");
            return false;
        }
        if (contents) {
            std::string data(bytes_max + 1, '\0');
            in.read(data.data(), static_cast<std::streamsize>(data.size()));
            data.resize(static_cast<size_t>(in.gcount()));
            if (data.size() > bytes_max) {
                error(pointer, "the " + std::string(what) + " " + in_quotes(path) +
                                   " is longer than " + std::to_string(bytes_max) + " bytes");
                return false;
            }
            *contents = std::move(data);
        }
        return true;
    }

  private:
    std::string base_dir_;
};

// scheme://host[:port], the schemes Paho understands.
void check_uri(Checker& c, const std::string& pointer, const std::string& uri) {
    // What every client here speaks (client_options.h's validate): MQTT over TCP or TLS. Paho
    // would take mqtt:// and ws:// too, but the forwarder's libmosquitto does not, and a
    // config that check-config passes must run.
    static constexpr std::string_view schemes[] = {"tcp://", "ssl://"};
    size_t host_start = std::string::npos;
    for (auto scheme : schemes) {
        if (uri.starts_with(scheme)) host_start = scheme.size();
    }
    if (host_start == std::string::npos) {
        c.error(pointer, in_quotes(uri) +
                             " is not a broker URI: use tcp:// or ssl:// followed by host:port, "
                             "as in \"tcp://127.0.0.1:1883\"");
        return;
    }
    std::string_view rest = std::string_view(uri).substr(host_start);
    std::string_view authority = rest.substr(0, rest.find('/'));
    std::string_view host = authority;
    if (authority.starts_with('[')) {  // IPv6 literal
        size_t close = authority.find(']');
        host = authority.substr(0, close == std::string_view::npos ? authority.size() : close + 1);
    } else {
        host = authority.substr(0, authority.rfind(':'));
    }
    if (host.empty() || host == "[]") {
        c.error(pointer,
                in_quotes(uri) + " has no host: use a form such as \"tcp://127.0.0.1:1883\"");
        return;
    }
    if (host.size() == authority.size()) {
        c.error(pointer, in_quotes(uri) + " has no port: use host:port, as in " +
                             "\"tcp://127.0.0.1:1883\" (8883 is the usual one for ssl://)");
        return;
    }
    {
        std::string_view port = authority.substr(host.size());
        if (!port.starts_with(':')) {
            c.error(pointer, in_quotes(uri) + " is not host:port");
            return;
        }
        port.remove_prefix(1);
        unsigned value = 0;
        auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
        if (ec != std::errc() || end != port.data() + port.size() || value == 0 || value > 65535) {
            c.error(pointer, in_quotes(uri) + " has an invalid port: use 1 to 65535");
        }
    }
}

bool uri_is_encrypted(std::string_view uri) {
    return uri.starts_with("ssl://");
}

// {node_id}, {pipeline} and (where allowed) {key}; no wildcards, since it names a topic.
void check_topic_template(Checker& c, const std::string& pointer, const std::string& tmpl,
                          std::initializer_list<std::string_view> placeholders) {
    std::vector<std::string> names;
    for (auto name : placeholders)
        names.push_back("{" + std::string(name) + "}");
    if (tmpl.empty()) {
        c.error(pointer, "a topic cannot be empty");
        return;
    }
    for (size_t i = 0; i < tmpl.size(); ++i) {
        char ch = tmpl[i];
        if (ch == '+' || ch == '#' || ch == '\0') {
            c.error(pointer, in_quotes(tmpl) + " contains '" + std::string(1, ch ? ch : '0') +
                                 "': a topic to publish to cannot contain wildcards or NUL");
            return;
        }
        if (ch == '}') {
            c.error(pointer, in_quotes(tmpl) + " has a '}' without '{': placeholders are " +
                                 join(names, ", "));
            return;
        }
        if (ch != '{') continue;
        size_t close = tmpl.find('}', i);
        std::string name = close == std::string::npos ? "" : tmpl.substr(i, close - i + 1);
        if (std::find(names.begin(), names.end(), name) == names.end()) {
            c.error(pointer, in_quotes(tmpl) + " uses an unknown placeholder" +
                                 (name.empty() ? std::string() : " " + name) +
                                 ": the placeholders are " + join(names, ", "));
            return;
        }
        i = close;
    }
}

std::optional<TlsConfig> read_tls(Checker& c, const Json& parent, const std::string& pointer,
                                  const std::string& uri) {
    const Json* j = Checker::member(parent, "tls");
    if (!j) return std::nullopt;
    std::string p = child(pointer, "tls");
    if (!c.expect_object(*j, p, R"({"ca_file": "/etc/tidemark/ca.pem"})")) return std::nullopt;
    c.check_keys(*j, p, {"ca_file", "cert_file", "key_file"});
    TlsConfig tls;
    for (auto [key, target] : {std::pair<std::string_view, std::string*>{"ca_file", &tls.ca_file},
                               {"cert_file", &tls.cert_file},
                               {"key_file", &tls.key_file}}) {
        if (c.read_string(*j, p, key, *target)) {
            *target = c.resolve_path(*target);
            c.readable_file(child(p, key), *target, "TLS file");
        }
    }
    if (tls.cert_file.empty() != tls.key_file.empty()) {
        c.error(p,
                "cert_file and key_file go together: set both for a client certificate, or "
                "neither");
    }
    if (!uri.empty() && !uri_is_encrypted(uri)) {
        c.error(p,
                "tls is set but " + in_quotes(uri) + " is not an encrypted transport: use ssl://");
    }
    return tls;
}

// username + password_file; an inline "password" is refused so secrets stay out of configs.
void read_credentials(Checker& c, const Json& j, const std::string& pointer, std::string& username,
                      std::string& password) {
    c.read_string(j, pointer, "username", username);
    if (Checker::member(j, "password")) {
        c.error(child(pointer, "password"),
                "passwords are not accepted in the config: write it to a file only the tidemark "
                "user can read and name that file in \"password_file\"");
    }
    std::string file;
    if (c.read_string(j, pointer, "password_file", file)) {
        std::string p = child(pointer, "password_file");
        file = c.resolve_path(file);
        std::string contents;
        if (c.readable_file(p, file, "password file", &contents, password_bytes_max)) {
            while (!contents.empty() && (contents.back() == '\n' || contents.back() == '\r')) {
                contents.pop_back();
            }
            if (contents.empty()) {
                c.error(p, "the password file " + in_quotes(file) + " is empty");
            }
            password = std::move(contents);
        }
        if (username.empty()) {
            c.error(p,
                    "password_file is set but username is not: MQTT 3.1.1 sends a password "
                    "only with a username");
        }
    }
}

void read_storage(Checker& c, const Json& root, StorageConfig& storage) {
    const Json* j = Checker::member(root, "storage");
    if (!j) return;
    const std::string p = "/storage";
    if (!c.expect_object(*j, p, R"({"map_size": "1GiB", "fsync": "interval"})")) return;
    c.check_keys(*j, p, {"map_size", "fsync", "fsync_interval", "log_retention", "segment_size"});
    c.read_size(*j, p, "map_size", storage.map_size_bytes, 1ULL << 20, 1ULL << 40);
    c.read_choice(*j, p, "fsync", storage.fsync,
                  {{"always", FsyncPolicy::always},
                   {"interval", FsyncPolicy::interval},
                   {"never", FsyncPolicy::never}});
    c.read_duration(*j, p, "fsync_interval", storage.fsync_interval_ms, true);
    c.read_size(*j, p, "segment_size", storage.segment_bytes, 64ULL << 10, 4ULL << 30);
    if (const Json* r = Checker::member(*j, "log_retention")) {
        std::string rp = p + "/log_retention";
        if (c.expect_object(*r, rp, R"({"max_age": "7d", "max_bytes": "512MiB"})")) {
            c.check_keys(*r, rp, {"max_age", "max_bytes"});
            c.read_duration(*r, rp, "max_age", storage.log_retention.max_age_ms, true);
            c.read_size(*r, rp, "max_bytes", storage.log_retention.max_bytes, 1ULL << 20,
                        1ULL << 50);
        }
    }
}

void read_source(Checker& c, const Json& root, const std::string& node_id, SourceConfig& source) {
    const Json* j = Checker::member(root, "source");
    const std::string p = "/source";
    if (!j) {
        c.missing(p, R"(the gateway broker to read from, e.g. {"uri": "tcp://127.0.0.1:1883"})");
        return;
    }
    if (!c.expect_object(*j, p, R"({"uri": "tcp://127.0.0.1:1883"})")) return;
    c.check_keys(*j, p,
                 {"uri", "client_id", "username", "password_file", "tls", "max_payload", "retained",
                  "clock"});
    if (c.read_string(*j, p, "uri", source.uri,
                      "the gateway broker, e.g. \"tcp://127.0.0.1:1883\"")) {
        check_uri(c, p + "/uri", source.uri);
    }
    source.client_id = "tidemark-" + node_id;
    c.read_string(*j, p, "client_id", source.client_id);
    if (source.client_id.empty()) c.error(p + "/client_id", "a client id cannot be empty");
    read_credentials(c, *j, p, source.username, source.password);
    source.tls = read_tls(c, *j, p, source.uri);
    c.read_size(*j, p, "max_payload", source.max_payload_bytes, 16, payload_bytes_limit);
    c.read_choice(*j, p, "retained", source.accept_retained, {{"skip", false}, {"ingest", true}});
    c.read_choice(*j, p, "clock", source.clock_trust,
                  {{"auto", ClockTrust::automatic},
                   {"synchronised", ClockTrust::synchronised},
                   {"always", ClockTrust::always}});
}

void read_upstream(Checker& c, const Json& root, const std::string& node_id,
                   std::optional<UpstreamConfig>& out) {
    const Json* j = Checker::member(root, "upstream");
    if (!j) return;
    const std::string p = "/upstream";
    if (!c.expect_object(*j, p, R"({"uri": "ssl://cloud.example:8883"})")) return;
    c.check_keys(*j, p,
                 {"uri", "client_id", "username", "password_file", "tls", "topic", "side_topic",
                  "qos", "max_inflight", "outbox", "compact_superseded", "reconnect_max"});
    UpstreamConfig up;
    if (c.read_string(*j, p, "uri", up.uri,
                      "the broker results go to, e.g. \"ssl://cloud.example:8883\"")) {
        check_uri(c, p + "/uri", up.uri);
    }
    up.client_id = node_id;
    c.read_string(*j, p, "client_id", up.client_id);
    if (up.client_id.empty()) c.error(p + "/client_id", "a client id cannot be empty");
    read_credentials(c, *j, p, up.username, up.password);
    up.tls = read_tls(c, *j, p, up.uri);
    if (c.read_string(*j, p, "topic", up.topic)) {
        check_topic_template(c, p + "/topic", up.topic, {"node_id", "pipeline", "key"});
    }
    if (c.read_string(*j, p, "side_topic", up.side_topic)) {
        check_topic_template(c, p + "/side_topic", up.side_topic, {"node_id", "pipeline", "key"});
    }
    uint64_t value = 0;
    if (c.read_uint(*j, p, "qos", value, 0, 1)) up.qos = static_cast<int>(value);
    if (c.read_uint(*j, p, "max_inflight", value, 1, 65535)) {
        up.max_inflight = static_cast<uint32_t>(value);
    }
    c.read_bool(*j, p, "compact_superseded", up.compact_superseded);
    if (c.read_duration(*j, p, "reconnect_max", up.reconnect_max_ms, true) &&
        (up.reconnect_max_ms < UpstreamConfig::reconnect_min_ms ||
         up.reconnect_max_ms > UpstreamConfig::reconnect_max_ms_limit)) {
        c.error(p + "/reconnect_max",
                "must be between 250ms and 1h: the longest wait between two connect attempts, "
                "and so the longest a recovered link stays unused");
    }
    if (const Json* o = Checker::member(*j, "outbox")) {
        std::string op = p + "/outbox";
        if (c.expect_object(*o, op, R"({"max_bytes": "256MiB", "when_full": "drop_oldest"})")) {
            c.check_keys(*o, op, {"max_bytes", "when_full"});
            c.read_size(*o, op, "max_bytes", up.outbox.max_bytes, 1ULL << 20, 1ULL << 40);
            c.read_choice(
                *o, op, "when_full", up.outbox.when_full,
                {{"drop_oldest", WhenFull::drop_oldest}, {"pause_ingest", WhenFull::pause_ingest}});
        }
    }
    out = std::move(up);
}

void read_health(Checker& c, const Json& root, HealthConfig& health) {
    const Json* j = Checker::member(root, "health");
    if (!j) return;
    const std::string p = "/health";
    if (!c.expect_object(*j, p, R"({"topic": "tidemark/{node_id}/health", "interval": "10s"})")) {
        return;
    }
    c.check_keys(*j, p, {"topic", "interval"});
    if (c.read_string(*j, p, "topic", health.topic)) {
        check_topic_template(c, p + "/topic", health.topic, {"node_id"});
    }
    c.read_duration(*j, p, "interval", health.interval_ms, true);
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
    Extractor e;
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
            c.error(pointer, in_quotes(text) +
                                 " is past the last level of the topic filter, which "
                                 "has " +
                                 std::to_string(shape->literal_levels) +
                                 " levels (numbered from 0)");
            return std::nullopt;
        }
        e.kind = Extractor::topic_level;
        e.level = level;
        return e;
    }
    if (!text.starts_with('/')) {
        c.error(pointer,
                in_quotes(text) + " is neither \"topic:N\" nor a JSON pointer starting with \"/\"");
        return std::nullopt;
    }
    for (size_t i = 0; i < text.size(); ++i) {
        if (text[i] == '~' &&
            (i + 1 == text.size() || (text[i + 1] != '0' && text[i + 1] != '1'))) {
            c.error(pointer, in_quotes(text) +
                                 " is not a valid JSON pointer: '~' must be followed by "
                                 "0 (for ~) or 1 (for /)");
            return std::nullopt;
        }
    }
    e.kind = Extractor::json_pointer;
    e.pointer = text;
    return e;
}

std::vector<Extractor> parse_extractors(Checker& c, const Json& j, const std::string& pointer,
                                        const std::optional<FilterShape>& shape) {
    std::vector<Extractor> out;
    if (j.is_array()) {
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
    if (auto e = parse_extractor(c, j, pointer, shape)) out.push_back(*e);
    return out;
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

void read_timestamp(Checker& c, const Json& pipeline, const std::string& pointer,
                    TimestampSpec& ts) {
    const Json* j = Checker::member(pipeline, "timestamp");
    if (!j) return;  // ingest time
    std::string p = child(pointer, "timestamp");
    const char* example = R"("ingest" or {"pointer": "/ts", "format": "epoch_ms"})";
    if (j->is_string()) {
        if (j->get<std::string>() == "ingest") {
            ts.ingest = true;
            return;
        }
        c.error(p, "expected " + std::string(example) + ", found " + type_phrase(*j));
        return;
    }
    if (!j->is_object()) {
        c.error(p, "expected " + std::string(example) + ", found " + type_phrase(*j));
        return;
    }
    c.check_keys(*j, p, {"pointer", "format"});
    ts.ingest = false;
    if (c.read_string(*j, p, "pointer", ts.pointer, "the JSON pointer to the time, e.g. \"/ts\"") &&
        !is_valid_json_pointer(ts.pointer)) {
        c.error(p + "/pointer", in_quotes(ts.pointer) +
                                    " is not a JSON pointer: start it with \"/\" "
                                    "and write '~' as ~0, '/' as ~1");
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
    const Json* j = Checker::member(pipeline, "window");
    std::string p = child(pointer, "window");
    if (!j) {
        c.missing(p, R"(the window, e.g. {"type": "tumbling", "size": "1m"})");
        return;
    }
    if (!c.expect_object(*j, p, R"({"type": "tumbling", "size": "1m"})")) return;
    if (!c.read_choice(*j, p, "type", window.type,
                       {{"tumbling", core::WindowType::tumbling},
                        {"hopping", core::WindowType::hopping},
                        {"session", core::WindowType::session}},
                       "tumbling, hopping or session")) {
        return;
    }
    switch (window.type) {
        case core::WindowType::tumbling:
            c.check_keys(*j, p, {"type", "size", "offset"}, "for a tumbling window");
            c.read_duration(*j, p, "size", window.size_ms, true, "the window length, e.g. \"1m\"");
            c.read_duration(*j, p, "offset", window.offset_ms, false);
            break;
        case core::WindowType::hopping:
            c.check_keys(*j, p, {"type", "size", "advance"}, "for a hopping window");
            c.read_duration(*j, p, "size", window.size_ms, true, "the window length, e.g. \"1h\"");
            c.read_duration(*j, p, "advance", window.advance_ms, true,
                            "how often a window starts, e.g. \"1m\"");
            break;
        case core::WindowType::session:
            c.check_keys(*j, p, {"type", "gap", "max_duration"}, "for a session window");
            window.size_ms = 0;
            window.max_duration_ms = 24LL * 3600 * 1000;
            c.read_duration(*j, p, "gap", window.gap_ms, true,
                            "the silence that ends a session, e.g. \"5m\"");
            c.read_duration(*j, p, "max_duration", window.max_duration_ms, true);
            break;
    }
}

void read_watermark(Checker& c, const Json& pipeline, const std::string& pointer,
                    core::WatermarkSpec& wm) {
    const Json* j = Checker::member(pipeline, "watermark");
    if (!j) return;
    std::string p = child(pointer, "watermark");
    if (!c.expect_object(*j, p, R"({"delay": "5s"})")) return;
    c.check_keys(*j, p, {"delay", "idle_timeout", "max_future", "scope"});
    c.read_duration(*j, p, "delay", wm.delay_ms, false);
    c.read_duration(*j, p, "idle_timeout", wm.idle_timeout_ms, true);
    c.read_duration(*j, p, "max_future", wm.max_future_ms, false);
    c.read_choice(
        *j, p, "scope", wm.scope,
        {{"global", core::WatermarkScope::global}, {"partition", core::WatermarkScope::partition}});
}

void read_late(Checker& c, const Json& pipeline, const std::string& pointer, core::LateSpec& late) {
    const Json* j = Checker::member(pipeline, "late");
    if (!j) return;
    std::string p = child(pointer, "late");
    if (!c.expect_object(*j, p, R"({"allowed_lateness": "10m"})")) return;
    c.check_keys(*j, p, {"allowed_lateness", "too_late", "corrections"});
    c.read_duration(*j, p, "allowed_lateness", late.allowed_lateness_ms, false);
    c.read_choice(*j, p, "too_late", late.too_late,
                  {{"drop", core::TooLate::drop}, {"side_output", core::TooLate::side_output}});
    c.read_choice(*j, p, "corrections", late.corrections,
                  {{"upsert", core::Corrections::upsert}, {"retract", core::Corrections::retract}});
}

void read_fields(Checker& c, const Json& pipeline, const std::string& pointer,
                 PipelineConfig& out) {
    const Json* j = Checker::member(pipeline, "fields");
    if (!j) return;
    std::string p = child(pointer, "fields");
    if (!c.expect_object(*j, p, R"({"temp": "/temp"})")) return;
    if (j->size() > fields_max) {
        c.error(p, "at most " + std::to_string(fields_max) + " fields per pipeline, not " +
                       std::to_string(j->size()));
        return;
    }
    for (const auto& [name, value] : j->items()) {
        std::string fp = child(p, name);
        if (!is_name(name)) {
            c.error(fp, in_quotes(name) +
                            " is not a field name: use 1 to 64 letters, digits, '-', "
                            "'_' or '.'");
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

void read_aggregates(Checker& c, const Json& pipeline, const std::string& pointer,
                     PipelineConfig& out) {
    const Json* j = Checker::member(pipeline, "aggregates");
    std::string p = child(pointer, "aggregates");
    const char* example = R"({"n": {"fn": "count"}, "avg": {"fn": "mean", "field": "temp"}})";
    if (!j) {
        c.missing(p, std::string("what to compute per window, e.g. ") + example);
        return;
    }
    if (!c.expect_object(*j, p, example)) return;
    if (j->empty() || j->size() > aggregates_max) {
        c.error(p, "a pipeline computes 1 to " + std::to_string(aggregates_max) +
                       " aggregates, not " + std::to_string(j->size()) + ", e.g. " + example);
        return;
    }
    const auto& fields = out.spec.fields;
    for (const auto& [name, value] : j->items()) {
        std::string ap = child(p, name);
        if (!is_name(name)) {
            c.error(ap, in_quotes(name) +
                            " is not an aggregate name: use 1 to 64 letters, digits, "
                            "'-', '_' or '.'");
            continue;
        }
        if (!c.expect_object(value, ap, R"({"fn": "mean", "field": "temp"})")) continue;
        c.check_keys(value, ap, {"fn", "field", "q"});
        core::AggregateSpec spec;
        spec.name = name;
        std::string fn_name;
        if (!c.read_string(value, ap, "fn", fn_name,
                           "count, sum, min, max, mean, first, last, variance, stddev or "
                           "quantile")) {
            continue;
        }
        auto fn = core::parse_aggregate_fn(fn_name);
        if (!fn) {
            c.error(ap + "/fn", in_quotes(fn_name) +
                                    " is not an aggregate: use count, sum, min, max, mean, first, "
                                    "last, variance, stddev or quantile");
            continue;
        }
        spec.fn = *fn;
        std::string field;
        bool needs_field = spec.fn != core::AggregateFn::count;
        if (c.read_string(value, ap, "field", field,
                          needs_field ? "the field it aggregates, one of \"fields\"" : "")) {
            auto it = std::find(fields.begin(), fields.end(), field);
            if (it == fields.end()) {
                c.error(ap + "/field",
                        in_quotes(field) + " is not in this pipeline's fields (" +
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
        out.spec.aggregates.push_back(std::move(spec));
    }
}

void read_quantile_options(Checker& c, const Json& pipeline, const std::string& pointer,
                           core::QuantileOptions& options) {
    const Json* j = Checker::member(pipeline, "quantile");
    if (!j) return;
    std::string p = child(pointer, "quantile");
    if (!c.expect_object(*j, p, R"({"relative_error": 0.01, "max_buckets": 1024})")) return;
    c.check_keys(*j, p, {"relative_error", "max_buckets"});
    double relative_error = options.relative_error;
    if (c.read_fraction(*j, p, "relative_error", relative_error, 0.0, 0.5, true)) {
        // The sketch's own lower bound: anything that passes here must construct at run time.
        if (relative_error < core::QuantileSketch::relative_error_min)
            c.error(child(p, "relative_error"),
                    "must be at least 1e-06 (finer bounds need more buckets than a window "
                    "can hold), not " +
                        std::to_string(relative_error));
        else
            options.relative_error = relative_error;
    }
    uint64_t buckets = 0;
    if (c.read_uint(*j, p, "max_buckets", buckets, 16, 65536)) {
        options.buckets_max = static_cast<uint32_t>(buckets);
    }
}

void read_limits(Checker& c, const Json& pipeline, const std::string& pointer,
                 core::Limits& limits) {
    const Json* j = Checker::member(pipeline, "limits");
    if (!j) return;
    std::string p = child(pointer, "limits");
    if (!c.expect_object(*j, p, R"({"max_keys": 100000, "max_open_windows": 1000000})")) return;
    c.check_keys(*j, p, {"max_keys", "max_open_windows"});
    c.read_uint(*j, p, "max_keys", limits.keys_max, 1, 1ULL << 32);
    c.read_uint(*j, p, "max_open_windows", limits.open_windows_max, 1, 1ULL << 36);
}

void check_key_budget(Checker& c, const PipelineConfig& pipeline, const std::string& pointer) {
    const auto& spec = pipeline.spec;
    uint64_t per_key = core::windows_per_key_estimate(spec);
    uint64_t total = 0;
    bool overflow = __builtin_mul_overflow(spec.limits.keys_max, per_key, &total);
    if (!overflow && total <= spec.limits.open_windows_max) return;
    c.error(child(pointer, "limits"),
            std::to_string(spec.limits.keys_max) + " keys x " + std::to_string(per_key) +
                " windows per key (" + window_description(spec) +
                ") = " + (overflow ? std::string("more than 2^64") : std::to_string(total)) +
                " > max_open_windows " + std::to_string(spec.limits.open_windows_max) +
                ": raise max_open_windows or lower max_keys");
}

void check_map_budget(Checker& c, const Config& config, const std::vector<bool>& pipeline_ok) {
    uint64_t total = 0;
    bool overflow = false;
    std::vector<std::string> terms;
    for (size_t i = 0; i < config.pipelines.size(); ++i) {
        if (!pipeline_ok[i]) return;  // its numbers are not trustworthy; its errors say why
        const auto& spec = config.pipelines[i].spec;
        core::AggregateSet set(spec.aggregates, spec.quantile);
        uint64_t per_window = set.bytes_per_window() + window_overhead_bytes;
        uint64_t bytes = 0;
        overflow |= __builtin_mul_overflow(spec.limits.open_windows_max, per_window, &bytes);
        overflow |= __builtin_add_overflow(total, bytes, &total);
        terms.push_back(std::to_string(spec.limits.open_windows_max) + " windows x " +
                        std::to_string(per_window) + " bytes (" + spec.name + ")");
    }
    uint64_t half = config.storage.map_size_bytes / 2;
    if (!overflow && total <= half) return;
    c.error("/storage/map_size",
            "the pipelines' state can reach " + join(terms, " + ") + " = " +
                (overflow ? std::string("more than 2^64 bytes")
                          : std::to_string(total) + " bytes (" + approx_size(total) + ")") +
                ", more than half of storage.map_size " +
                core::format_size(config.storage.map_size_bytes) + " (" + approx_size(half) +
                "; the other half holds the outbox and checkpoint copies): raise "
                "storage.map_size or lower limits.max_open_windows");
}

void read_pipeline(Checker& c, const Json& j, const std::string& p, PipelineConfig& out) {
    const char* example = R"({"name": "temp_1m", "topic": "sensors/+/telemetry", ...})";
    if (!c.expect_object(j, p, example)) return;
    c.check_keys(j, p,
                 {"name", "topic", "key", "partition", "timestamp", "fields", "window", "watermark",
                  "late", "aggregates", "quantile", "limits"});
    if (c.read_string(j, p, "name", out.spec.name, "a unique name such as \"room_temp_1m\"") &&
        !is_name(out.spec.name)) {
        c.error(p + "/name", in_quotes(out.spec.name) +
                                 " is not a pipeline name: use 1 to 64 letters, digits, '-', '_' "
                                 "or '.' (it becomes an MQTT topic level)");
    }
    std::optional<FilterShape> shape;
    if (c.read_string(j, p, "topic", out.topic_filter,
                      "the MQTT topic filter to read, e.g. \"sensors/+/telemetry\"")) {
        if (auto problem = topic_filter_problem(out.topic_filter)) {
            c.error(p + "/topic",
                    in_quotes(out.topic_filter) + " is not a valid MQTT topic filter: " + *problem);
        } else {
            shape = filter_shape(out.topic_filter);
        }
    }
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
    read_late(c, j, p, out.spec.late);
    read_aggregates(c, j, p, out);
    read_quantile_options(c, j, p, out.spec.quantile);
    read_limits(c, j, p, out.spec.limits);
}

// Duplicate object keys are legal JSON that silently lose a value; refuse them by pointer.
class DuplicateKeyFinder {
  public:
    std::vector<ConfigError> errors;

    bool operator()(int, nlohmann::detail::parse_event_t event, Json& parsed) {
        using E = nlohmann::detail::parse_event_t;
        switch (event) {
            case E::object_start:
            case E::array_start:
                begin_element();
                frames_.push_back(Frame{event == E::array_start, -1, {}, {}});
                break;
            case E::object_end:
            case E::array_end:
                if (!frames_.empty()) frames_.pop_back();
                break;
            case E::key: {
                if (frames_.empty() || !parsed.is_string()) break;
                Frame& top = frames_.back();
                top.key = parsed.get<std::string>();
                if (std::find(top.seen.begin(), top.seen.end(), top.key) != top.seen.end()) {
                    errors.push_back({path(), "the key " + in_quotes(top.key) +
                                                  " appears twice in this object: keep one"});
                } else {
                    top.seen.push_back(top.key);
                }
                break;
            }
            case E::value:
                begin_element();
                break;
        }
        return true;
    }

  private:
    struct Frame {
        bool array;
        long index;
        std::string key;
        std::vector<std::string> seen;
    };
    void begin_element() {
        if (!frames_.empty() && frames_.back().array) ++frames_.back().index;
    }
    std::string path() const {
        std::string out;
        for (const auto& f : frames_) {
            out += "/";
            out += f.array ? std::to_string(f.index) : escape_pointer_token(f.key);
        }
        return out;
    }
    std::vector<Frame> frames_;
};

}  // namespace

std::string_view fsync_policy_name(FsyncPolicy policy) {
    switch (policy) {
        case FsyncPolicy::always:
            return "always";
        case FsyncPolicy::interval:
            return "interval";
        case FsyncPolicy::never:
            return "never";
    }
    return "?";
}

std::string_view when_full_name(WhenFull when_full) {
    return when_full == WhenFull::drop_oldest ? "drop_oldest" : "pause_ingest";
}

ConfigResult parse_config(std::string_view text, const std::string& base_dir_for_relative_files) {
    Checker c(base_dir_for_relative_files);
    Json root;
    DuplicateKeyFinder duplicates;
    try {
        root = Json::parse(text.begin(), text.end(), std::ref(duplicates));
    } catch (const Json::parse_error& e) {
        std::string message = e.what();
        if (auto pos = message.find("] "); pos != std::string::npos) message.erase(0, pos + 2);
        return std::unexpected(
            std::vector<ConfigError>{{"", "the config is not valid JSON: " + message}});
    }
    c.errors = std::move(duplicates.errors);
    if (!root.is_object()) {
        c.error("", "the config must be a JSON object, not " + type_phrase(root));
        return std::unexpected(std::move(c.errors));
    }
    c.check_keys(root, "",
                 {"node_id", "data_dir", "storage", "checkpoint", "source", "upstream", "health",
                  "log_level", "pipelines"});

    Config config;
    if (c.read_string(root, "", "node_id", config.node_id,
                      "a name for this gateway, unique in the fleet, e.g. \"gw-01\"") &&
        !is_name(config.node_id)) {
        c.error("/node_id", in_quotes(config.node_id) +
                                " is not a valid node_id: use 1 to 64 letters, digits, '-', '_' "
                                "or '.' (it becomes an MQTT topic level)");
    }
    if (c.read_string(root, "", "data_dir", config.data_dir)) {
        if (config.data_dir.empty()) {
            c.error("/data_dir", "data_dir cannot be empty");
        } else {
            config.data_dir = c.resolve_path(config.data_dir);
        }
    }
    read_storage(c, root, config.storage);
    if (const Json* j = Checker::member(root, "checkpoint")) {
        if (c.expect_object(*j, "/checkpoint", R"({"interval": "5s"})")) {
            c.check_keys(*j, "/checkpoint", {"interval"});
            c.read_duration(*j, "/checkpoint", "interval", config.checkpoint.interval_ms, true);
        }
    }
    read_source(c, root, config.node_id, config.source);
    read_upstream(c, root, config.node_id, config.upstream);
    read_health(c, root, config.health);
    c.read_choice(root, "", "log_level", config.log_level,
                  {{"trace", std::string("trace")},
                   {"debug", std::string("debug")},
                   {"info", std::string("info")},
                   {"warn", std::string("warn")},
                   {"error", std::string("error")}});
    if (config.upstream && config.upstream->outbox.max_bytes > config.storage.map_size_bytes / 2) {
        c.error("/upstream/outbox/max_bytes",
                core::format_size(config.upstream->outbox.max_bytes) +
                    " is more than half of storage.map_size " +
                    core::format_size(config.storage.map_size_bytes) +
                    ": raise storage.map_size or lower the outbox's max_bytes");
    }

    const Json* pipelines = Checker::member(root, "pipelines");
    std::vector<bool> pipeline_ok;
    if (!pipelines) {
        c.missing("/pipelines", "a list of at least one pipeline");
    } else if (!pipelines->is_array() || pipelines->empty()) {
        c.error(
            "/pipelines",
            "expected a list of 1 to " + std::to_string(pipelines_max) + " pipelines, found " +
                (pipelines->is_array() ? std::string("an empty list") : type_phrase(*pipelines)));
    } else if (pipelines->size() > pipelines_max) {
        c.error("/pipelines", "at most " + std::to_string(pipelines_max) + " pipelines, not " +
                                  std::to_string(pipelines->size()));
    } else {
        for (size_t i = 0; i < pipelines->size(); ++i) {
            std::string p = child("/pipelines", i);
            size_t errors_before = c.errors.size();
            PipelineConfig pipeline;
            read_pipeline(c, (*pipelines)[i], p, pipeline);
            for (size_t k = 0; k < config.pipelines.size(); ++k) {
                if (!pipeline.spec.name.empty() &&
                    config.pipelines[k].spec.name == pipeline.spec.name) {
                    c.error(p + "/name", "duplicate pipeline name " +
                                             in_quotes(pipeline.spec.name) + ": /pipelines/" +
                                             std::to_string(k) +
                                             " has it too; names must be unique");
                }
            }
            bool ok = c.errors.size() == errors_before;
            if (ok) {
                if (auto valid = core::validate(pipeline.spec); !valid) {
                    c.error(p + "/window", valid.error().message);
                    ok = false;
                }
            }
            if (ok) {
                size_t before_budget = c.errors.size();
                check_key_budget(c, pipeline, p);
                ok = c.errors.size() == before_budget;
            }
            pipeline_ok.push_back(ok);
            config.pipelines.push_back(std::move(pipeline));
        }
        // When map_size itself is wrong, a budget against the default would mislead.
        bool map_size_bad = std::any_of(c.errors.begin(), c.errors.end(), [](const auto& e) {
            return e.pointer == "/storage/map_size";
        });
        if (!map_size_bad) check_map_budget(c, config, pipeline_ok);
    }

    if (!c.errors.empty()) return std::unexpected(std::move(c.errors));
    return config;
}

ConfigResult load_config_file(const std::string& path) {
    errno = 0;
    std::ifstream in(path, std::ios::binary);
    if (!in || std::filesystem::is_directory(path)) {
        int err = errno ? errno : EISDIR;
        return std::unexpected(std::vector<ConfigError>{
            {"", "cannot read the config file " + in_quotes(path) + ": " + std::strerror(err)}});
    }
    std::ostringstream buffer;
    buffer << in.rdbuf();
    std::string base = std::filesystem::absolute(path).parent_path().string();
    return parse_config(buffer.str(), base);
}

std::string format_errors(const std::vector<ConfigError>& errors) {
    std::string out;
    for (const auto& e : errors) {
        out += e.pointer.empty() ? "(config)" : e.pointer;
        out += ": ";
        out += e.message;
        out += "\n";
    }
    return out;
}

}  // namespace tidemark::config
