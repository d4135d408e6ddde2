// The config loader's top level: the file, the JSON parse (duplicate keys refused), the root
// keys, and the checks across sections. The sections are read by connections.cpp,
// pipelines.cpp and budget.cpp, all through checker.h.
#include "adapters/config/config.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>
#include <utility>

#include "adapters/config/checker.h"
#include "core/duration.h"

namespace tidemark::config {
namespace {

using namespace detail;

constexpr size_t pipelines_max = 64;

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

namespace detail {

std::optional<Json> parse_document(std::string_view text, std::vector<ConfigError>& errors) {
    DuplicateKeyFinder duplicates;
    Json root;
    try {
        root = Json::parse(text.begin(), text.end(), std::ref(duplicates));
    } catch (const Json::exception& e) {
        // parse_error, and out_of_range for a number no double holds (1e400).
        std::string message = e.what();
        if (auto pos = message.find("] "); pos != std::string::npos) message.erase(0, pos + 2);
        errors.push_back({"", "the config is not valid JSON: " + message});
        return std::nullopt;
    }
    errors.insert(errors.end(), duplicates.errors.begin(), duplicates.errors.end());
    return root;
}

}  // namespace detail

namespace {

// node_id and data_dir.
void read_identity(Checker& c, const Json& root, Config& config) {
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
}

void read_checkpoint(Checker& c, const Json& root, CheckpointConfig& checkpoint) {
    Section s = c.section(root, "", "checkpoint", R"({"interval": "60s"})", {"interval"});
    if (s) c.read_duration(*s, s.pointer, "interval", checkpoint.interval_ms, true);
}

bool has_error_at(const Checker& c, std::string_view pointer) {
    return std::any_of(c.errors.begin(), c.errors.end(),
                       [&](const ConfigError& e) { return e.pointer == pointer; });
}

void check_outbox_fits(Checker& c, const Config& config) {
    // A max_bytes already refused (below 1MiB, say) left the default in its place: comparing
    // that with the map would be a second error, about a value nobody wrote.
    if (!config.upstream || has_error_at(c, "/upstream/outbox/max_bytes") ||
        config.upstream->outbox.max_bytes <= config.storage.map_size_bytes / 2) {
        return;
    }
    c.error("/upstream/outbox/max_bytes",
            core::format_size(config.upstream->outbox.max_bytes) +
                " is more than half of storage.map_size " +
                core::format_size(config.storage.map_size_bytes) +
                ": raise storage.map_size or lower the outbox's max_bytes");
}

// A topic template with {node_id} and {pipeline} filled in, as codec::expand_topic_template
// does for names that need no escaping (node_id and pipeline names are such names).
std::string filled(std::string t, const std::string& node_id, const std::string& pipeline) {
    const std::pair<std::string_view, const std::string*> fields[] = {{"{node_id}", &node_id},
                                                                      {"{pipeline}", &pipeline}};
    for (const auto& [field, value] : fields) {
        for (size_t at = t.find(field); at != std::string::npos;
             at = t.find(field, at + value->size()))
            t.replace(at, field.size(), *value);
    }
    return t;
}

// health.upstream: the record goes through the outbox to the upstream broker, so it needs one,
// and its topic there must not be a pipeline's results topic (a pipeline named "health" under
// "tidemark/{node_id}/{pipeline}"): the sink would see both on one topic, and the retained
// health would replace a result.
void check_upstream_health(Checker& c, const Config& config) {
    if (!config.health.upstream) return;
    if (!config.upstream) {
        c.error("/health/upstream",
                "true needs an upstream section: the health record goes upstream through the "
                "outbox, to upstream.uri (set health.upstream to false, or add upstream)");
        return;
    }
    const std::string health = filled(config.health.topic, config.node_id, "");
    for (size_t i = 0; i < config.pipelines.size(); ++i) {
        const std::string& name = config.pipelines[i].spec.name;
        if (config.upstream->topic.find("{key}") != std::string::npos) continue;
        if (filled(config.upstream->topic, config.node_id, name) != health) continue;
        c.error("/health/upstream",
                "the health topic " + in_quotes(health) +
                    " is also the upstream topic of "
                    "/pipelines/" +
                    std::to_string(i) + " (" + in_quotes(name) +
                    "): rename the pipeline, or change health.topic or upstream.topic");
    }
}

// One pipeline, then the checks that need it whole; false when it has errors.
bool read_one_pipeline(Checker& c, const Json& j, const std::string& p, Config& config) {
    size_t errors_before = c.errors.size();
    PipelineConfig pipeline;
    read_pipeline(c, j, p, pipeline);
    for (size_t k = 0; k < config.pipelines.size(); ++k) {
        if (!pipeline.spec.name.empty() && config.pipelines[k].spec.name == pipeline.spec.name) {
            c.error(p + "/name", "duplicate pipeline name " + in_quotes(pipeline.spec.name) +
                                     ": /pipelines/" + std::to_string(k) +
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
        check_key_budget(c, pipeline, p);
        ok = c.errors.size() == errors_before;
    }
    config.pipelines.push_back(std::move(pipeline));
    return ok;
}

void read_pipelines(Checker& c, const Json& root, Config& config) {
    const Json* pipelines = Checker::member(root, "pipelines");
    if (!pipelines) {
        c.missing("/pipelines", "a list of at least one pipeline");
        return;
    }
    if (!pipelines->is_array() || pipelines->empty()) {
        c.error(
            "/pipelines",
            "expected a list of 1 to " + std::to_string(pipelines_max) + " pipelines, found " +
                (pipelines->is_array() ? std::string("an empty list") : type_phrase(*pipelines)));
        return;
    }
    if (pipelines->size() > pipelines_max) {
        c.error("/pipelines", "at most " + std::to_string(pipelines_max) + " pipelines, not " +
                                  std::to_string(pipelines->size()));
        return;
    }
    std::vector<bool> pipeline_ok;
    for (size_t i = 0; i < pipelines->size(); ++i) {
        pipeline_ok.push_back(
            read_one_pipeline(c, (*pipelines)[i], child("/pipelines", i), config));
    }
    // When map_size itself is wrong, a budget against the default would mislead; so would a
    // sum with an outbox bound that was refused (the default stands in for it).
    if (has_error_at(c, "/storage/map_size")) return;
    check_map_budget(c, config, pipeline_ok,
                     /*with_outbox=*/!has_error_at(c, "/upstream/outbox/max_bytes"));
}

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

ConfigResult parse_config(std::string_view text, const std::string& base_dir_for_relative_files,
                          size_t pointer_bytes) {
    Checker c(base_dir_for_relative_files);
    auto parsed = parse_document(text, c.errors);
    if (!parsed) return std::unexpected(std::move(c.errors));
    const Json& root = *parsed;
    if (!root.is_object()) {
        c.error("", "the config must be a JSON object, not " + type_phrase(root));
        return std::unexpected(std::move(c.errors));
    }
    c.check_keys(root, "",
                 {"node_id", "data_dir", "storage", "checkpoint", "source", "upstream", "health",
                  "log_level", "backfill", "pipelines"});

    Config config;
    read_identity(c, root, config);
    read_storage(c, root, config.storage, pointer_bytes);
    read_checkpoint(c, root, config.checkpoint);
    read_source(c, root, config.node_id, config.source);
    read_upstream(c, root, config.node_id, config.upstream);
    read_health(c, root, config.health);
    c.read_choice(root, "", "log_level", config.log_level,
                  {{"trace", std::string("trace")},
                   {"debug", std::string("debug")},
                   {"info", std::string("info")},
                   {"warn", std::string("warn")},
                   {"error", std::string("error")}});
    read_backfill_settings(c, root, config.backfill);
    check_outbox_fits(c, config);
    read_pipelines(c, root, config);
    check_upstream_health(c, config);

    if (!c.errors.empty()) return std::unexpected(std::move(c.errors));
    return config;
}

namespace detail {

std::optional<std::string> read_config_text(const std::string& path,
                                            std::vector<ConfigError>& errors) {
    errno = 0;
    std::ifstream in(path, std::ios::binary);
    if (!in || std::filesystem::is_directory(path)) {
        int err = errno ? errno : EISDIR;
        errors.push_back(
            {"", "cannot read the config file " + in_quotes(path) + ": " + std::strerror(err)});
        return std::nullopt;
    }
    std::ostringstream buffer;
    buffer << in.rdbuf();
    return buffer.str();
}

}  // namespace detail

ConfigResult load_config_file(const std::string& path) {
    std::vector<ConfigError> errors;
    auto text = read_config_text(path, errors);
    if (!text) return std::unexpected(std::move(errors));
    std::string base = std::filesystem::absolute(path).parent_path().string();
    return parse_config(*text, base);
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
