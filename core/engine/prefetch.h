// The engine's prefetch hints (internal): the definitions of PipelineRun's prefetch_* rounds,
// which Engine::prefetch and Engine::prefetch_ahead (core/engine.cpp, their only caller) run.
// None has an effect on results.
#pragma once

#include "core/engine/pipeline_run.h"

namespace tidemark::core::detail {

TM_HOT void PipelineRun::prefetch_slot(uint64_t hash) const {
    keys_.prefetch_slot(hash);
}

TM_HOT void PipelineRun::prefetch_key(uint64_t hash) const {
    const KeyState* k = keys_.probe_hash(hash);
    if (!k) return;
    __builtin_prefetch(k);
    __builtin_prefetch(reinterpret_cast<const char*>(k) + 64);
}

// The newest window and the partition of a key whose state is loaded.
TM_HOT void prefetch_newest_window(const KeyState& k) {
    if (!k.units.empty()) {
        // What an event touches of a unit is its first 64 bytes, maybe across two lines.
        const char* u = reinterpret_cast<const char*>(&k.units.back());
        __builtin_prefetch(u);
        __builtin_prefetch(u + 63);
    }
    if (k.partition) __builtin_prefetch(k.partition);
}

TM_HOT void PipelineRun::prefetch_window(std::string_view key, uint64_t hash) {
    KeyState* k = keys_.find(key, hash);
    prefound_ = {k, keys_changed_};
    if (k) prefetch_newest_window(*k);
}

TM_HOT void PipelineRun::prefetch_key_window(uint64_t hash) const {
    if (const KeyState* k = keys_.probe_hash(hash)) prefetch_newest_window(*k);
}

TM_HOT void PipelineRun::prefetch_key_state(uint64_t hash) const {
    const KeyState* k = keys_.probe_hash(hash);
    if (!k) return;
    if (!k->units.empty()) k->units.back().state.sketches.prefetch();
    if (k->partition) low_tree_.prefetch(k->partition->index);  // scope global only: see caller
}

}  // namespace tidemark::core::detail
