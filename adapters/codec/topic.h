// MQTT topic names: filter matching on the hot path, and topics built from templates.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tidemark::codec {

/// Does `topic` match the MQTT `filter` ('+' one level, '#' this level and all below,
/// "a/#" also matching "a")? Topics starting with '$' match no filter that starts with a
/// wildcard (MQTT 3.1.1 section 4.7.2). The filter is assumed valid (the config checked it).
/// Reads the filter on every call: TopicFilter reads it once.
bool topic_matches(std::string_view filter, std::string_view topic);

/// An MQTT filter read once into its levels, each literal level then compared whole (a record is
/// matched for every pipeline group: issue 31). matches() is topic_matches(filter, topic).
class TopicFilter {
  public:
    explicit TopicFilter(std::string_view filter);
    bool matches(std::string_view topic) const noexcept;

  private:
    enum class Kind : uint8_t { literal, one_level, rest };  // text, '+', '#'
    struct Level {
        Kind kind = Kind::literal;
        std::string text;  // Kind::literal only
    };
    std::vector<Level> levels_;
    bool wildcard_first_ = false;  // a topic beginning with '$' matches none (MQTT 4.7.2)
};

/// The `level`th level of `topic` (from 0), or nullopt when it has fewer levels.
std::optional<std::string_view> topic_level_of(std::string_view topic, int level) noexcept;

/// Appends `value` so that it stays inside one topic level: '/', '+', '#', '%', control
/// characters (NUL included) and bytes that are not valid UTF-8 become %XX (uppercase hex).
/// Everything else, multi-byte UTF-8 included, is copied.
void append_topic_level_escaped(std::string& out, std::string_view value);

/// "tidemark/{node_id}/{pipeline}" with each placeholder ({node_id}, {pipeline}, {key})
/// replaced by its value escaped as above: a key can never add levels or wildcards. Other text
/// is copied. Used for the upstream, side-output and health topics.
std::string expand_topic_template(std::string_view tmpl, std::string_view node_id,
                                  std::string_view pipeline, std::string_view key);

/// A topic template read once, with {node_id} filled in: what is left per row is {pipeline} and
/// {key}. expand() gives what expand_topic_template gives for the same arguments; the forwarder's
/// sources build one per topic at start instead of scanning the config's template per row.
class TopicTemplate {
  public:
    TopicTemplate(std::string_view tmpl, std::string_view node_id);
    std::string expand(std::string_view pipeline, std::string_view key) const;

  private:
    enum class Slot { text, pipeline, key };
    struct Piece {
        Slot slot = Slot::text;
        std::string text;  // the literal text, {node_id} already in it (Slot::text only)
    };
    std::vector<Piece> pieces_;
    size_t text_bytes_ = 0;
};

}  // namespace tidemark::codec
