// The config loader's one way to read a field: look it up, say it is missing, check its type,
// and name it by JSON pointer in every message. Internal to adapters/config.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "adapters/config/config.h"

namespace tidemark::config::detail {

// ordered_json keeps the document's order: "fields" and "aggregates" are ordered by it.
using Json = nlohmann::ordered_json;

/// "/a" + "b~/" -> "/a/b~0~1" (RFC 6901 escaping).
std::string escape_pointer_token(std::string_view token);
std::string child(const std::string& pointer, std::string_view key);
std::string child(const std::string& pointer, size_t index);

std::string in_quotes(std::string_view s);
/// A short rendering of a value for messages: strings quoted, big values elided.
std::string show(const Json& j);
/// "null", "the string \"x\"", "an object", ...: what was found where something else belonged.
std::string type_phrase(const Json& j);
std::string join(const std::vector<std::string>& items, std::string_view separator);
/// "1.5MiB"-style approximation for sizes in budget messages (core::format_size is exact only).
std::string approx_size(uint64_t bytes);

/// An object the document holds at `pointer`, found by Checker::section.
struct Section {
    const Json* json = nullptr;
    std::string pointer;
    explicit operator bool() const { return json != nullptr; }
    const Json& operator*() const { return *json; }
    const Json* operator->() const { return json; }
};

/// Collects every error of one document, each with its pointer.
///
/// Operation: each read_* looks up `key` in `object` (whose pointer is `pointer`). Absent and
/// optional (empty `required_hint`): false, no error. Absent and required: "is required: <hint>".
/// Present: checks the type ("expected <type>, found <what was there>") and the range, and
/// writes `out` only when valid. So a reader's default stays in `out` unless a valid value
/// replaces it.
class Checker {
  public:
    explicit Checker(std::string base_dir) : base_dir_(std::move(base_dir)) {}

    std::vector<ConfigError> errors;

    void error(std::string pointer, std::string message) {
        errors.push_back({std::move(pointer), std::move(message)});
    }
    void missing(const std::string& pointer, std::string_view hint) {
        error(pointer, "is required: " + std::string(hint));
    }

    static const Json* member(const Json& object, std::string_view key);

    /// The one preamble: `object[key]`, or nullptr when it is absent (an error when required)
    /// or when `is_type` is set and refuses it (an error "expected <expected>, found ...").
    const Json* field(const Json& object, const std::string& pointer, std::string_view key,
                      bool (Json::*is_type)() const noexcept, std::string_view expected,
                      std::string_view required_hint = {});

    /// The object at `parent[key]`, its keys checked against `allowed` (unless empty: the caller
    /// checks them); an empty Section when it is absent (an error when required) or not an
    /// object ("expected an object such as <example>, ...").
    Section section(const Json& parent, const std::string& parent_pointer, std::string_view key,
                    std::string_view example, std::initializer_list<std::string_view> allowed,
                    std::string_view required_hint = {});

    bool expect_object(const Json& j, const std::string& pointer, std::string_view example);

    /// Refuses each key not in `allowed`, listing them and the nearest one.
    void check_keys(const Json& object, const std::string& pointer,
                    std::initializer_list<std::string_view> allowed, std::string_view context = {});

    bool read_string(const Json& object, const std::string& pointer, std::string_view key,
                     std::string& out, std::string_view required_hint = {});
    /// "5s", "10m": `positive` refuses "0s" as well as negative ones.
    bool read_duration(const Json& object, const std::string& pointer, std::string_view key,
                       int64_t& out, bool positive, std::string_view required_hint = {});
    /// "64MiB", between min_bytes and max_bytes.
    bool read_size(const Json& object, const std::string& pointer, std::string_view key,
                   uint64_t& out, uint64_t min_bytes, uint64_t max_bytes,
                   std::string_view required_hint = {});
    bool read_uint(const Json& object, const std::string& pointer, std::string_view key,
                   uint64_t& out, uint64_t min, uint64_t max, std::string_view required_hint = {});
    bool read_bool(const Json& object, const std::string& pointer, std::string_view key, bool& out);
    /// A number more than `low` and less than `high`, or up to `high` when inclusive.
    bool read_fraction(const Json& object, const std::string& pointer, std::string_view key,
                       double& out, double low, double high, bool high_inclusive,
                       std::string_view required_hint = {});

    /// One of the named strings in `choices`.
    template <typename E>
    bool read_choice(const Json& object, const std::string& pointer, std::string_view key, E& out,
                     std::initializer_list<std::pair<std::string_view, E>> choices,
                     std::string_view required_hint = {}) {
        const Json* j = field(object, pointer, key, nullptr, {}, required_hint);
        if (!j) return false;
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
        error(child(pointer, key), show(*j) + " is not one of " + join(names, ", "));
        return false;
    }

    /// Relative to the config file's directory.
    std::string resolve_path(const std::string& path) const;

    /// A file that must be readable now (so that a bad path fails check-config, not the
    /// service); with `contents`, read into it when at most bytes_max long.
    bool readable_file(const std::string& pointer, const std::string& path, std::string_view what,
                       std::string* contents = nullptr, size_t bytes_max = 0);

  private:
    std::string base_dir_;
};

/// Letters, digits, '-', '_' or '.', 1 to 64 of them: it becomes an MQTT topic level.
bool is_name(std::string_view s);

// The pieces of a broker connection (connections.cpp), shared by the appliance's sections and
// the sink's (sink_config.cpp).
/// Reads "uri" (required): one URI or a list (a cluster's nodes, at most broker_uris_max, none
/// twice), into `uris` as written, `uri` (them joined by ", ") and their parsed `endpoints`.
void read_uri(Checker& c, const Section& s, std::string_view required_hint, std::string& uri,
              std::vector<std::string>& uris, std::vector<Endpoint>& endpoints);
/// A topic to publish to: the placeholders allowed, no wildcards.
void check_topic_template(Checker& c, const std::string& pointer, const std::string& tmpl,
                          std::initializer_list<std::string_view> placeholders);
void read_topic_template(Checker& c, const Section& s, std::string_view key, std::string& out,
                         std::initializer_list<std::string_view> placeholders);
/// The "tls" section of `parent`, for every address; refused when a URI (as written) is not
/// ssl://.
std::optional<TlsConfig> read_tls(Checker& c, const Section& parent,
                                  const std::vector<std::string>& uris);
/// "password_file", read now (trailing newlines removed); false when absent.
bool read_password_file(Checker& c, const Section& s, std::string& password);
/// "username" and "password_file" (read now); an inline "password" is refused.
void read_credentials(Checker& c, const Section& s, std::string& username, std::string& password);
void read_client_id(Checker& c, const Section& s, std::string& client_id);

/// What is wrong with an MQTT topic filter to subscribe to (pipelines.cpp), or nullopt.
std::optional<std::string> topic_filter_problem(std::string_view filter);

/// The contents of the config file at `path`; nullopt with the error when it cannot be read.
std::optional<std::string> read_config_text(const std::string& path,
                                            std::vector<ConfigError>& errors);
/// The document parsed, with every duplicate key refused by pointer (config.cpp); nullopt with
/// the error when it is not JSON.
std::optional<Json> parse_document(std::string_view text, std::vector<ConfigError>& errors);

// The sections, one reader per part of the document (connections.cpp, pipelines.cpp,
// budget.cpp). Each reports into the Checker and leaves defaults where a value is absent or bad.
void read_storage(Checker& c, const Json& root, StorageConfig& storage, size_t pointer_bytes);
void read_source(Checker& c, const Json& root, const std::string& node_id, SourceConfig& source);
void read_upstream(Checker& c, const Json& root, const std::string& node_id,
                   std::optional<UpstreamConfig>& out);
void read_health(Checker& c, const Json& root, HealthConfig& health);
void read_pipeline(Checker& c, const Json& j, const std::string& pointer, PipelineConfig& out);
// versions.cpp: a pipeline's "backfill" section, and the top-level one.
void read_backfill_from(Checker& c, const Json& pipeline, const std::string& pointer,
                        PipelineConfig& out);
void read_backfill_settings(Checker& c, const Json& root, BackfillConfig& out);
void check_key_budget(Checker& c, const PipelineConfig& pipeline, const std::string& pointer);
/// The pipelines' state against the map, then (with_outbox: the outbox's bound is trustworthy)
/// everything together (check_map_sum).
void check_map_budget(Checker& c, const Config& config, const std::vector<bool>& pipeline_ok,
                      bool with_outbox);
/// The pipelines' state + its largest pipeline again (the backfill's doubling) + the outbox's
/// bound + side output, with LMDB's overhead and reserve, <= map_size (config.h says the parts).
void check_map_sum(Checker& c, const Config& config, uint64_t state_bytes, uint64_t largest_bytes);

}  // namespace tidemark::config::detail
