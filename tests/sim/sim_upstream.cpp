#include "tests/sim/sim_upstream.h"

namespace tidemark::sim {

void Upstream::attach(lmdb::Store* store) {
    store_ = store;
    next_seq_ = 0;  // a new forwarder starts at the oldest row
    acknowledged_.clear();
}

void Upstream::detach() {
    store_ = nullptr;
    acknowledged_.clear();  // their deletes die with the process: those rows go again
}

void Upstream::set_up(bool up) {
    if (up_ && !up) next_seq_ = 0;  // unacknowledged rows are sent again on the next link
    up_ = up;
}

Result<void> Upstream::flush_deletes() {
    if (acknowledged_.empty() || !store_) return {};
    auto deleted = store_->outbox_delete(acknowledged_);
    if (!deleted) return fail("upstream: outbox_delete: " + deleted.error().message);
    acknowledged_.clear();
    return {};
}

Result<void> Upstream::pump(Rng& rng, size_t batch_max) {
    if (!up_ || !store_) return {};
    const size_t batch = 1 + rng.below(batch_max);
    auto rows = store_->outbox_peek(next_seq_, batch);
    if (!rows) return fail("upstream: outbox_peek: " + rows.error().message);
    // The link may drop after the broker took some of the batch and before their PUBACKs.
    const size_t acked = rng.chance(0.05) ? rng.below(rows->size() + 1) : rows->size();
    for (size_t i = 0; i < rows->size(); ++i) {
        const lmdb::OutboxRow& row = (*rows)[i];
        // Too-late tallies (late.report) travel with the results; the checker judges results
        // and version records (tests/core/late_report_test.cpp holds the tallies to a cut run).
        if (!row.late_record)
            received_.push_back({row.version_record, row.pipeline, row.id, row.payload, row.seq});
        if (i < acked) acknowledged_.push_back(row.seq);
    }
    if (acked < rows->size()) {
        set_up(false);
        set_up(true);
    } else if (!rows->empty()) {
        next_seq_ = rows->back().seq + 1;
    }
    if (rng.chance(0.6)) return flush_deletes();
    return {};
}

Result<void> Upstream::drain(Rng& rng) {
    set_up(true);
    for (int i = 0; i < 100'000; ++i) {
        auto stats = store_->outbox_stats();
        if (!stats) return fail("upstream: outbox_stats: " + stats.error().message);
        if (stats->rows == 0) return {};
        if (auto ok = pump(rng, 256); !ok) return ok;
        if (auto ok = flush_deletes(); !ok) return ok;
    }
    return fail("upstream: the outbox did not drain");
}

}  // namespace tidemark::sim
