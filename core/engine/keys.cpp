#include <memory>

#include "core/engine/pipeline_run.h"

namespace tidemark::core::detail {

KeyState* PipelineRun::create_key(std::string_view key, Partition* p, Domain& d) {
    KeyState* k;
    if (free_keys_.empty()) {
        key_chunks_.push_back(std::make_unique<KeyState[]>(pool_chunk));
        for (size_t i = pool_chunk; i-- > 0;)
            free_keys_.push_back(&key_chunks_.back()[i]);
    }
    k = free_keys_.back();
    free_keys_.pop_back();
    k->key.assign(key);
    k->partition = nullptr;
    set_key_partition(*k, p);
    k->domain = &d;
    keys_.insert(k, hash_name(key));
    ++keys_changed_;
    return k;
}

void PipelineRun::remove_key(KeyState* k) {
    TM_ASSERT(k->units.empty() && k->fired.empty());
    timer_cancel(*k);
    if (tracking_ && k->meta_persisted) erased_.push_back(meta_key(k->key));
    keys_.erase(k->key, hash_name(k->key));
    ++keys_changed_;
    // Back to a fresh key's state, keeping the capacity of its vectors. Last: the
    // partition may be forgotten with it.
    k->domain = nullptr;
    k->fired_through_ms = time_min;
    k->due_ms = time_max;
    // k->dirty stays: listed, the object stays listed until the next checkpoint walks the
    // list, whichever key it holds by then (PipelineRun::dirty_keys_).
    k->meta_dirty = true;
    k->meta_persisted = false;
    free_keys_.push_back(k);
    set_key_partition(*k, nullptr);
}

// A key's partition: counted, so that a partition is forgotten only when no key is in it.
void PipelineRun::move_key_partition(KeyState& k, Partition* p) {
    Partition* old = k.partition;
    k.partition = p;
    // The key's meta record names its partition: a restore must see the move.
    k.meta_dirty = true;
    if (p) mark_dirty(k);
    if (p) ++p->keys;
    if (old) {
        TM_ASSERT(old->keys > 0);
        --old->keys;
        maybe_forget(old);
    }
}

}  // namespace tidemark::core::detail
