#include "core/sink_batch.h"

#include <algorithm>
#include <utility>

#include "core/result.h"

namespace tidemark::core {

void SinkBatchBuilder::add(UpstreamRecord record, std::string_view topic, std::string_view payload,
                           int64_t receive_ms, uint64_t spool_offset) {
    ++batch_.records;
    if (auto* result = std::get_if<ReceivedResult>(&record)) {
        batch_.results.push_back(std::move(*result));
    } else if (auto* version = std::get_if<ReceivedVersion>(&record)) {
        batch_.version_changes.emplace_back(std::move(*version));
    } else if (auto* removed = std::get_if<VersionRemoved>(&record)) {
        batch_.version_changes.emplace_back(std::move(*removed));
    } else if (auto* late = std::get_if<ReceivedLate>(&record)) {
        batch_.late.push_back(std::move(*late));
    } else if (auto* side = std::get_if<ReceivedSide>(&record)) {
        batch_.side.push_back(std::move(*side));
    } else if (auto* health = std::get_if<ReceivedHealth>(&record)) {
        batch_.health.push_back(std::move(*health));
    } else {
        auto& refusal = std::get<Refusal>(record);
        batch_.rejected.push_back(RejectedMessage{std::string(topic), std::string(payload),
                                                  std::move(refusal.reason), receive_ms,
                                                  spool_offset});
    }
}

SinkBatch SinkBatchBuilder::take() {
    auto& results = batch_.results;
    const std::size_t before = results.size();
    // Stable: among equal ranks of one window the first to arrive stays first, and is kept.
    std::stable_sort(results.begin(), results.end(),
                     [](const ReceivedResult& a, const ReceivedResult& b) {
                         const int order = compare_window(a, b);
                         if (order != 0) return order < 0;
                         return outranks(a, b);
                     });
    const auto last = std::unique(
        results.begin(), results.end(),
        [](const ReceivedResult& a, const ReceivedResult& b) { return compare_window(a, b) == 0; });
    results.erase(last, results.end());
    batch_.results_superseded = before - results.size();
    TM_ASSERT(std::is_sorted(
        results.begin(), results.end(),
        [](const ReceivedResult& a, const ReceivedResult& b) { return compare_window(a, b) < 0; }));
    // Health: the newest per node, the first to arrive among equal times, as the table's
    // upsert (a strictly newer time_ms replaces) would leave it.
    auto& health = batch_.health;
    const std::size_t health_before = health.size();
    std::stable_sort(health.begin(), health.end(),
                     [](const ReceivedHealth& a, const ReceivedHealth& b) {
                         if (a.node != b.node) return a.node < b.node;
                         return a.time_ms > b.time_ms;
                     });
    const auto health_last = std::unique(
        health.begin(), health.end(),
        [](const ReceivedHealth& a, const ReceivedHealth& b) { return a.node == b.node; });
    health.erase(health_last, health.end());
    batch_.health_superseded = health_before - health.size();
    // Tallies: the highest count of each (the table keeps the highest too).
    auto& late = batch_.late;
    std::stable_sort(late.begin(), late.end(), [](const ReceivedLate& a, const ReceivedLate& b) {
        const int order = compare_tally(a, b);
        if (order != 0) return order < 0;
        return a.too_late > b.too_late;
    });
    late.erase(std::unique(late.begin(), late.end(),
                           [](const ReceivedLate& a, const ReceivedLate& b) {
                               return compare_tally(a, b) == 0;
                           }),
               late.end());
    SinkBatch out = std::move(batch_);
    batch_ = SinkBatch{};
    return out;
}

}  // namespace tidemark::core
