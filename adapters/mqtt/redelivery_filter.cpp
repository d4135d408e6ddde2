#include "adapters/mqtt/redelivery_filter.h"

#include <algorithm>

#include "core/hash.h"
#include "core/result.h"

namespace tidemark::mqtt {

// The digests live in memory only (candidates of this process): never stored or compared
// across versions.
std::uint64_t RedeliveryFilter::hash(std::string_view topic, std::string_view payload) {
    using namespace core::hash;
    const std::uint64_t h = fnv1a(fnv1a(fnv_offset, topic), std::string_view("\0", 1));
    return fnv1a(h, payload);  // the 0 byte: so ("ab","c") and ("a","bc") differ
}

void RedeliveryFilter::push_recent(Entry entry) {
    recent_[recent_next_] = entry;
    recent_next_ = (recent_next_ + 1) % candidates_max;
    if (recent_count_ < candidates_max) ++recent_count_;
}

void RedeliveryFilter::connection_started() {
    started_ = true;
    // The newest records win: unmatched candidates of earlier connections (their redelivery
    // may itself have been cut off) first, then the records since the last start, oldest first.
    const std::size_t kept = std::min(candidate_count_, candidates_max - recent_count_);
    std::copy(candidates_.begin() + static_cast<std::ptrdiff_t>(candidate_count_ - kept),
              candidates_.begin() + static_cast<std::ptrdiff_t>(candidate_count_),
              candidates_.begin());
    candidate_count_ = kept;
    const std::size_t oldest = (recent_next_ + candidates_max - recent_count_) % candidates_max;
    for (std::size_t i = 0; i < recent_count_; ++i)
        candidates_[candidate_count_++] = recent_[(oldest + i) % candidates_max];
    recent_count_ = 0;
    recent_next_ = 0;
    TM_ASSERT(candidate_count_ <= candidates_max);
}

void RedeliveryFilter::remember(int packet_id, std::string_view topic, std::string_view payload) {
    TM_ASSERT(packet_id >= 0);
    push_recent({hash(topic, payload), packet_id});
}

void RedeliveryFilter::seed(std::string_view topic, std::string_view payload) {
    // Seeds after a connection started would be taken for that connection's own records.
    TM_ASSERT(!started_);
    push_recent({hash(topic, payload), any_packet_id});
}

bool RedeliveryFilter::is_redelivery(int packet_id, std::string_view topic,
                                     std::string_view payload) {
    TM_ASSERT(packet_id >= 0);
    // A linear scan of at most candidates_max: it runs only for messages flagged DUP.
    const std::uint64_t h = hash(topic, payload);
    const auto begin = candidates_.begin();
    const auto end = begin + static_cast<std::ptrdiff_t>(candidate_count_);
    auto found = std::find_if(
        begin, end, [&](const Entry& e) { return e.hash == h && e.packet_id == packet_id; });
    if (found == end) {
        // A seeded record: the oldest first, the order in which the broker resends.
        found = std::find_if(begin, end, [&](const Entry& e) {
            return e.hash == h && e.packet_id == any_packet_id;
        });
    }
    if (found == end) return false;
    std::copy(found + 1, end, found);
    --candidate_count_;
    // Its PUBACK, sent on this connection, can be lost too: a candidate again next time.
    push_recent({h, packet_id});
    return true;
}

}  // namespace tidemark::mqtt
