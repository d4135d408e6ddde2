// tidemark inspect --drop-pipeline: the way out of "the stored state was written under another
// definition": the pipeline starts afresh from the checkpoint. Needs the service stopped (its
// lock on data_dir).
#include <iostream>

#include "adapters/lmdb/store.h"
#include "core/engine.h"
#include "firmware/adapter_options.h"
#include "firmware/commands/command_inspect.h"
#include "firmware/dir_lock.h"
#include "firmware/service/processor.h"
#include "firmware/service/versions.h"

namespace tidemark::firmware {

namespace {

// The pipeline's state, its backfill's, and its entry in the version registry, in one
// transaction that keeps the checkpoint as it was; returns state records dropped.
Result<uint64_t> drop_versions(lmdb::Store& store, const std::string& name) {
    auto cp = store.load_checkpoint();
    if (!cp) return fail(cp.error().message);
    if (!*cp) {  // nothing checkpointed: no registry either
        auto n = store.drop_prefix(core::Engine::state_prefix(name));
        if (!n) return fail(n.error().message);
        return *n;
    }
    auto read = read_registry(store);
    if (!read) return std::unexpected(read.error());
    std::optional<VersionRegistry>& registry = *read;
    auto txn = store.begin_checkpoint();
    if (!txn) return fail(txn.error().message);
    const uint64_t erased_before = (*txn)->erases();
    (*txn)->erase_prefix(core::Engine::state_prefix(name));
    if (registry) {
        if (const VersionEntry* e = registry->find(name); e && !e->backfill_version.empty()) {
            const std::string state_name = backfill_state_name(name, e->backfill_version);
            (*txn)->erase_prefix(core::Engine::state_prefix(state_name));
            (*txn)->erase(Processor::counters_key_for(state_name));
        }
        registry->remove(name);
        (*txn)->put(versions_key, registry->encode());
    }
    const uint64_t erased = (*txn)->erases() - erased_before;
    if (auto ok = (*txn)->commit(**cp); !ok) return fail(ok.error().message);
    return erased;
}

}  // namespace

int drop_pipeline(const std::string& data_dir, const std::optional<config::Config>& config,
                  const std::string& name) {
    auto lock = DirLock::take(data_dir);
    if (!lock) {
        std::cerr << "tidemark inspect --drop-pipeline: " << lock.error().message << "\n";
        return 1;
    }
    const lmdb::StoreOptions so =
        command_store_options(data_dir, config ? &*config : nullptr, /*read_only=*/false);
    auto store = lmdb::Store::open(so);
    if (!store) {
        std::cerr << "tidemark inspect --drop-pipeline: " << store.error().message << "\n";
        return 1;
    }
    auto dropped = drop_versions(**store, name);
    if (!dropped) {
        std::cerr << "tidemark inspect --drop-pipeline: " << dropped.error().message << "\n";
        return 1;
    }
    std::cout << "dropped " << *dropped << " state records of pipeline '" << name
              << "'; its outbox rows stay and are sent; on the next start its version "
                 "backfills from the log as a new pipeline's\n";
    return 0;
}

}  // namespace tidemark::firmware
