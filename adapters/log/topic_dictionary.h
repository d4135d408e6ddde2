// The writer's side of a segment's topic dictionary (record.h): which id each topic has, and
// whether its definition was written since the last anchor.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>

#include "adapters/log/record.h"

namespace tidemark::log {

/// Limits: at most topic_ids_max topics and topic_dictionary_bytes_max topic bytes (the writer
/// starts a new segment before either is passed), about 60 bytes of overhead per topic.
class TopicDictionary {
  public:
    struct Entry {
        uint32_t id = 0;
        uint64_t epoch = 0;  // of the anchor after which its definition was last written
    };
    /// How the next message on a topic is written: looked up once per append (use()), recorded
    /// once the frame is written (used()).
    struct Use {
        uint32_t id = 0;
        bool define = false;  // the frame must carry the topic (new, or first use since an anchor)
        Entry* entry = nullptr;  // the topic's entry; null for a topic new to the segment
    };

    /// Whether the active segment has an anchor (its frames after it are compact).
    bool compact() const { return compact_; }
    int64_t base_ms() const { return base_ms_; }
    bool anchor_due() const { return since_anchor_ >= anchor_interval_bytes; }
    /// Whether a new topic would take the dictionary past its limits.
    bool full_for(std::string_view topic) const {
        return ids_.size() >= topic_ids_max || bytes_ + topic.size() > topic_dictionary_bytes_max;
    }

    Use use(std::string_view topic) {
        auto it = ids_.find(topic);
        if (it == ids_.end()) return Use{next_id_, true, nullptr};
        return Use{it->second.id, it->second.epoch != epoch_, &it->second};
    }
    /// Records a use written; `use` was taken since the last anchored() or clear().
    void used(std::string_view topic, const Use& use) {
        if (use.entry != nullptr) {
            use.entry->epoch = epoch_;
            return;
        }
        ids_.emplace(std::string(topic), Entry{use.id, epoch_});
        bytes_ += topic.size();
        ++next_id_;
    }
    /// An anchor was written: topics are defined again at their next use.
    void anchored(int64_t base_ms) {
        compact_ = true;
        base_ms_ = base_ms;
        ++epoch_;
        since_anchor_ = 0;
    }
    void wrote(uint64_t frame_bytes) { since_anchor_ += frame_bytes; }
    /// A new segment.
    void clear() { *this = TopicDictionary(); }
    /// Goes on with the dictionary of a segment read back (compact, without damage): its topics
    /// count as defined (they are, earlier in the segment).
    void adopt(const FrameContext& context) {
        clear();
        compact_ = true;
        base_ms_ = context.base_ms;
        context.topics.for_each([&](uint32_t id, std::string_view topic) {
            ids_.emplace(std::string(topic), Entry{id, 0});
        });
        bytes_ = context.topics.bytes();
        next_id_ = static_cast<uint32_t>(context.topics.ids() + 1);
    }

  private:
    struct Hash {
        using is_transparent = void;
        size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
    };

    bool compact_ = false;
    int64_t base_ms_ = 0;
    uint64_t epoch_ = 0;  // anchors written; entries of epoch 0 came from adopt()
    uint64_t since_anchor_ = 0;
    uint32_t next_id_ = 1;
    uint64_t bytes_ = 0;
    std::unordered_map<std::string, Entry, Hash, std::equal_to<>> ids_;
};

}  // namespace tidemark::log
