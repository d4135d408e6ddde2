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

RedeliveryFilter::RedeliveryFilter() : window_(candidates_max) {
    alignments_.reserve(alignments_max);
}

void RedeliveryFilter::push(Entry entry) {
    at(next_) = entry;
    ++next_;
    if (count_ < candidates_max) ++count_;
}

void RedeliveryFilter::connection_started() {
    started_ = true;
    end_ = next_;
    run_ = count_ > 0 ? Run::not_started : Run::over;
    alignments_.clear();
}

void RedeliveryFilter::remember(int packet_id, std::string_view topic, std::string_view payload) {
    TM_ASSERT(packet_id >= 0);
    push({hash(topic, payload), packet_id});
}

void RedeliveryFilter::seed(std::string_view topic, std::string_view payload) {
    // Seeds after a connection started would be taken for that connection's own records.
    TM_ASSERT(!started_);
    push({hash(topic, payload), any_packet_id});
}

bool RedeliveryFilter::matches(std::uint64_t seq, std::uint64_t h, int packet_id) {
    const Entry& e = at(seq);
    return e.hash == h && (e.packet_id == packet_id || e.packet_id == any_packet_id);
}

std::size_t RedeliveryFilter::candidates() const {
    if (run_ == Run::over) return 0;
    if (run_ == Run::not_started) return static_cast<std::size_t>(end_ - oldest());
    std::uint64_t first = end_;
    for (const std::uint64_t a : alignments_)
        first = std::min(first, a);
    return static_cast<std::size_t>(end_ - first);
}

bool RedeliveryFilter::is_redelivery(int packet_id, std::string_view topic,
                                     std::string_view payload) {
    TM_ASSERT(packet_id >= 0);
    if (run_ == Run::over) return false;
    const std::uint64_t h = hash(topic, payload);
    if (run_ == Run::not_started) {
        // The run's first message: one scan of the window, newest first (records taken since
        // the connection started are not candidates; the oldest may have been overwritten).
        for (std::uint64_t seq = end_; seq > oldest() && alignments_.size() < alignments_max;) {
            --seq;
            if (matches(seq, h, packet_id)) alignments_.push_back(seq);
        }
    } else {
        std::size_t kept = 0;
        for (const std::uint64_t expected : alignments_) {
            // A record overwritten since the start (the window wrapped) cannot be matched.
            if (expected < end_ && expected >= oldest() && matches(expected, h, packet_id))
                alignments_[kept++] = expected;
        }
        alignments_.resize(kept);
    }
    if (alignments_.empty()) {
        run_ = Run::over;
        return false;
    }
    run_ = Run::running;
    // The broker kept the packet id: a seeded record now has it, once the run is certain.
    if (alignments_.size() == 1) at(alignments_.front()).packet_id = packet_id;
    for (std::uint64_t& a : alignments_)
        ++a;
    return true;
}

}  // namespace tidemark::mqtt
