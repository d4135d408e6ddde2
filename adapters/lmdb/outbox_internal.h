// What the outbox's two files share: its durable counters in meta and the id index's two
// generations. outbox_append.cpp appends; outbox.cpp peeks, deletes, prunes and reports.
#pragma once

#include <lmdb.h>

#include <cstdint>

#include "adapters/lmdb/store_internal.h"

namespace tidemark::lmdb::detail {

struct OutboxCounters {
    uint64_t seq_next = 0, bytes = 0, dropped = 0, duplicates = 0, compacted = 0;
};

StoreResult<OutboxCounters> load_outbox_counters(Store::Impl& impl, MDB_txn* txn);
StoreResult<void> store_outbox_counters(Store::Impl& impl, MDB_txn* txn, const OutboxCounters& c);

// The id index's two generations (Store::prune_ids): new ids go into `current`; every id in
// `older` has a seq below `older_below` (0: older is empty).
struct IdGenerations {
    MDB_dbi current = 0, older = 0;
    uint64_t slot = 0;  // meta_outbox_ids_current: which of impl.ids is current
    uint64_t older_below = 0;
    uint64_t legacy_slots = 0;  // meta_outbox_ids_legacy_slots: bit s, impl.ids[s]
    bool legacy(bool current_one) const {
        const uint64_t s = current_one ? slot : 1 - slot;
        return (legacy_slots >> s & 1) != 0;
    }
};

StoreResult<IdGenerations> load_id_generations(Store::Impl& impl, MDB_txn* txn);

}  // namespace tidemark::lmdb::detail
