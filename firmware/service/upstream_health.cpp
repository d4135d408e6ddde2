#include "firmware/service/upstream_health.h"

#include <spdlog/spdlog.h>

#include "core/hash.h"

namespace tidemark::firmware {

lmdb::OutboxRow health_outbox_row(std::string_view node, uint64_t seq_next, std::string record,
                                  int64_t now_wall_ms) {
    namespace hash = core::hash;
    lmdb::OutboxRow row;
    uint64_t h = hash::fnv1a_str(hash::fnv_offset, "health-record");
    h = hash::fnv1a_str(h, node);
    row.id = hash::mix(hash::fnv1a_le(h, seq_next, 8));
    row.health_record = true;
    row.enqueued_ms = now_wall_ms;
    row.payload = std::move(record);
    return row;
}

UpstreamHealth::UpstreamHealth(const config::Config& config, const core::Clock& clock)
    : config_(config), clock_(clock) {}

bool UpstreamHealth::due(bool alarms_changed) const {
    if (!config_.health.upstream || !config_.upstream) return false;
    return alarms_changed || !offered_ms_ ||
           clock_.steady_ms() - *offered_ms_ >= config_.health.interval_ms;
}

bool UpstreamHealth::offer(lmdb::Store& store, const std::string& record, bool alarms_changed) {
    if (!due(alarms_changed)) return false;
    offered_ms_ = clock_.steady_ms();
    auto fail = [&](const std::string& why) {
        ++skipped_;
        if (!failing_) spdlog::warn("health.upstream: {} (tried again every health interval)", why);
        failing_ = true;
        return false;
    };
    auto stats = store.outbox_stats();
    if (!stats) return fail("the outbox cannot be read: " + stats.error().message);
    // The row replacing the health row waiting frees that row's bytes; counted as if it did
    // not, the test is stricter than the store's and never lets health push the outbox over.
    const uint64_t max_bytes = config_.upstream->outbox.max_bytes;
    if (stats->rows > 0 && stats->bytes + record.size() > max_bytes)
        return fail("the outbox is at upstream.outbox.max_bytes (" + std::to_string(stats->bytes) +
                    " bytes): the health record is not queued, results keep their room");
    const lmdb::OutboxRow row =
        health_outbox_row(config_.node_id, stats->seq_next, record, clock_.wall_ms());
    auto appended = store.outbox_append(std::span<const lmdb::OutboxRow>(&row, 1));
    if (!appended) return fail("appending to the outbox: " + appended.error().message);
    if (failing_) spdlog::info("health.upstream: the health record is queued again");
    failing_ = false;
    ++queued_;
    return true;
}

}  // namespace tidemark::firmware
