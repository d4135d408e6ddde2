#include "adapters/codec/topic.h"

#include "adapters/codec/utf8.h"

namespace tidemark::codec {

bool topic_matches(std::string_view filter, std::string_view topic) noexcept {
    if (!topic.empty() && topic[0] == '$' && !filter.empty() &&
        (filter[0] == '+' || filter[0] == '#')) {
        return false;
    }
    // One pass over both, a level at a time (this runs per record and pipeline group).
    const size_t filter_size = filter.size();
    const size_t topic_size = topic.size();
    size_t f = 0;
    size_t t = 0;
    while (true) {
        const bool whole_level =
            f + 1 == filter_size || (f + 1 < filter_size && filter[f + 1] == '/');
        if (f < filter_size && filter[f] == '#' && whole_level) return true;
        if (f < filter_size && filter[f] == '+' && whole_level) {
            while (t < topic_size && topic[t] != '/')
                ++t;
            ++f;
        } else {
            for (; f < filter_size && filter[f] != '/'; ++f, ++t) {
                if (t == topic_size || topic[t] != filter[f]) return false;
            }
            if (t < topic_size && topic[t] != '/') return false;
        }
        // Both at the end of a level: '/' or the end.
        const bool filter_done = f == filter_size;
        const bool topic_done = t == topic_size;
        if (filter_done) return topic_done;
        // "a/#" matches "a": the parent level is part of the multi-level wildcard.
        if (topic_done) return filter.substr(f + 1) == "#";
        ++f;
        ++t;
    }
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
