#include "adapters/codec/topic.h"

#include <algorithm>

#include "adapters/codec/utf8.h"

namespace tidemark::codec {

bool topic_matches(std::string_view filter, std::string_view topic) {
    return TopicFilter(filter).matches(topic);
}

TopicFilter::TopicFilter(std::string_view filter) {
    size_t start = 0;
    for (;;) {
        const size_t slash = filter.find('/', start);
        const std::string_view text =
            filter.substr(start, slash == std::string_view::npos ? slash : slash - start);
        Level& level = levels_.emplace_back();
        if (text == "+") {
            level.kind = Kind::one_level;
        } else if (text == "#") {
            level.kind = Kind::rest;
        } else {
            level.text = text;
        }
        if (slash == std::string_view::npos) break;
        start = slash + 1;
    }
    wildcard_first_ = levels_.front().kind != Kind::literal;
}

bool TopicFilter::matches(std::string_view topic) const noexcept {
    if (wildcard_first_ && !topic.empty() && topic[0] == '$') return false;
    const size_t n = topic.size();
    size_t t = 0;             // where the topic's next level begins
    bool topic_done = false;  // its last level is matched
    for (const Level& level : levels_) {
        // '#' is this level and every one below, and the parent level too when it ends the
        // filter ("a/#" matches "a").
        if (level.kind == Kind::rest) return !topic_done || &level == &levels_.back();
        if (topic_done) return false;
        // string_view's compare and find, not memcmp and memchr on topic.data(): a record's
        // topic may be an empty view with no data at all (a null pointer).
        size_t end;
        if (level.kind == Kind::literal) {
            const size_t m = level.text.size();
            if (n - t < m || topic.substr(t, m) != level.text) return false;
            end = t + m;
            if (end < n && topic[end] != '/') return false;
        } else {
            end = std::min(topic.find('/', t), n);
        }
        if (end == n) {
            topic_done = true;
        } else {
            t = end + 1;
        }
    }
    return topic_done;
}

// A plain scan: topics are short, and a call of memchr per level cost more than the scan (it
// runs for every record decoded, and for every record read ahead: issue 31).
std::optional<std::string_view> topic_level_of(std::string_view topic, int level) noexcept {
    if (level < 0) return std::nullopt;
    size_t start = 0;
    for (size_t i = 0; i < topic.size(); ++i) {
        if (topic[i] != '/') continue;
        if (level == 0) return topic.substr(start, i - start);
        --level;
        start = i + 1;
    }
    if (level == 0) return topic.substr(start);
    return std::nullopt;
}

void append_topic_level_escaped(std::string& out, std::string_view value) {
    static constexpr char hex[] = "0123456789ABCDEF";
    auto escape = [&](unsigned char b) {
        out += '%';
        out += hex[b >> 4];
        out += hex[b & 15];
    };
    for (size_t i = 0; i < value.size();) {
        auto b = static_cast<unsigned char>(value[i]);
        if (b < 0x80) {
            if (b < 0x20 || b == 0x7F || b == '/' || b == '+' || b == '#' || b == '%') {
                escape(b);
            } else {
                out += static_cast<char>(b);
            }
            ++i;
            continue;
        }
        size_t n = utf8_sequence_length(value, i);
        if (n == 0) {
            escape(b);
            ++i;
        } else {
            out.append(value.substr(i, n));
            i += n;
        }
    }
}

std::string expand_topic_template(std::string_view tmpl, std::string_view node_id,
                                  std::string_view pipeline, std::string_view key) {
    return TopicTemplate(tmpl, node_id).expand(pipeline, key);
}

TopicTemplate::TopicTemplate(std::string_view tmpl, std::string_view node_id) {
    auto text = [&]() -> std::string& {
        if (pieces_.empty() || pieces_.back().slot != Slot::text) pieces_.push_back({});
        return pieces_.back().text;
    };
    for (size_t i = 0; i < tmpl.size();) {
        std::string_view rest = tmpl.substr(i);
        if (rest.starts_with("{node_id}")) {
            append_topic_level_escaped(text(), node_id);
            i += 9;
        } else if (rest.starts_with("{pipeline}")) {
            pieces_.push_back({Slot::pipeline, {}});
            i += 10;
        } else if (rest.starts_with("{key}")) {
            pieces_.push_back({Slot::key, {}});
            i += 5;
        } else {
            text() += tmpl[i++];
        }
    }
    for (const Piece& p : pieces_)
        text_bytes_ += p.text.size();
}

std::string TopicTemplate::expand(std::string_view pipeline, std::string_view key) const {
    std::string out;
    out.reserve(text_bytes_ + pipeline.size() + key.size());
    for (const Piece& p : pieces_) {
        switch (p.slot) {
            case Slot::text:
                out += p.text;
                break;
            case Slot::pipeline:
                append_topic_level_escaped(out, pipeline);
                break;
            case Slot::key:
                append_topic_level_escaped(out, key);
                break;
        }
    }
    return out;
}

}  // namespace tidemark::codec
