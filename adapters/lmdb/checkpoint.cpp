// The checkpoint: one write transaction holding the engine's changed state and, committed last
// with it, the checkpoint meta (log offset, outbox seq); and reading that meta back.
#include <lmdb.h>

#include <string>
#include <thread>
#include <utility>

#include "adapters/lmdb/row_codec.h"
#include "adapters/lmdb/store.h"
#include "adapters/lmdb/store_internal.h"
#include "core/crash_point.h"

namespace tidemark::lmdb {

using namespace detail;
using core::crash_point;
using core::CrashPoint;

StoreResult<std::unique_ptr<CheckpointTxn>> Store::begin_checkpoint() {
    TM_WRITABLE();
    auto txn = impl_->begin(true, "beginning a checkpoint");
    if (!txn) return std::unexpected(txn.error());
    auto pages = impl_->tree_pages(*txn, "beginning a checkpoint");
    if (!pages) {
        mdb_txn_abort(*txn);
        return std::unexpected(pages.error());
    }
    checkpoint_owner_ = std::this_thread::get_id();
    auto checkpoint = std::unique_ptr<CheckpointTxn>(new CheckpointTxn(*this, *txn));
    checkpoint->tree_pages_before_ = *pages;
    return checkpoint;
}

CheckpointTxn::CheckpointTxn(Store& store, void* txn) : store_(store), txn_(txn) {}

CheckpointTxn::~CheckpointTxn() {
    abort();
}

void CheckpointTxn::abort() {
    if (txn_ == nullptr) return;
    mdb_txn_abort(static_cast<MDB_txn*>(txn_));
    txn_ = nullptr;
    store_.checkpoint_owner_ = std::thread::id{};
}

void CheckpointTxn::put(std::string_view key, std::string_view value) {
    if (error_ || txn_ == nullptr) return;
    if (key.empty() || key.size() > Store::max_key_bytes) {
        error_ = StoreError{errc::invalid, "LMDB store " + store_.dir() + ": a state key of " +
                                               std::to_string(key.size()) + " bytes (allowed 1.." +
                                               std::to_string(Store::max_key_bytes) + ")"};
        return;
    }
    auto r = store_.impl_->put(static_cast<MDB_txn*>(txn_), store_.impl_->state, key, value, 0,
                               "writing checkpoint state");
    if (!r) error_ = r.error();
    ++puts_;
}

void CheckpointTxn::erase(std::string_view key) {
    if (error_ || txn_ == nullptr) return;
    if (key.empty() || key.size() > Store::max_key_bytes) return;  // such a key was never stored
    auto r = store_.impl_->del(static_cast<MDB_txn*>(txn_), store_.impl_->state, key,
                               "erasing checkpoint state");
    if (!r) error_ = r.error();
    ++erases_;
}

StoreResult<void> CheckpointTxn::commit(const CheckpointMeta& meta) {
    TM_ASSERT(txn_ != nullptr);  // commit once
    auto fail = [&](StoreError e) -> StoreResult<void> {
        error_ = std::move(e);
        abort();
        return std::unexpected(*error_);
    };
    if (error_) return fail(*error_);
    auto* txn = static_cast<MDB_txn*>(txn_);
    Store::Impl& impl = *store_.impl_;
    auto seq_next = impl.get_u64(txn, meta_outbox_seq_next, "reading outbox_seq_next");
    if (!seq_next) return fail(seq_next.error());
    // A checkpoint cannot claim emissions that were never appended: prune_ids trusts it.
    TM_ASSERT(meta.outbox_seq_next <= *seq_next);
    if (auto p = impl.put(txn, impl.meta, meta_checkpoint, encode_checkpoint(meta), 0,
                          "writing the checkpoint meta");
        !p)
        return fail(p.error());
    if (auto c = impl.check_reserve(txn, tree_pages_before_, "committing the checkpoint"); !c)
        return fail(c.error());
    crash_point(CrashPoint::mid_checkpoint);
    txn_ = nullptr;
    store_.checkpoint_owner_ = std::thread::id{};
    if (auto c = impl.commit(txn, "committing the checkpoint"); !c) {
        error_ = c.error();
        return std::unexpected(*error_);
    }
    crash_point(CrashPoint::after_checkpoint_commit);
    return {};
}

StoreResult<std::optional<CheckpointMeta>> Store::load_checkpoint() {
    return impl_->read<std::optional<CheckpointMeta>>(
        "loading the checkpoint", [&](MDB_txn* txn) -> StoreResult<std::optional<CheckpointMeta>> {
            auto v = impl_->get(txn, impl_->meta, meta_checkpoint, "loading the checkpoint");
            if (!v) return std::unexpected(v.error());
            if (!*v) return std::optional<CheckpointMeta>{};
            CheckpointMeta m;
            if (!decode_checkpoint(**v, m))
                return std::unexpected(StoreError{
                    errc::corrupt, "LMDB store " + dir() +
                                       ": the checkpoint record is garbled. Move the directory "
                                       "aside (state is rebuilt from the log)"});
            // Paired with commit's check: a loaded checkpoint never points past the outbox.
            auto seq_next = impl_->get_u64(txn, meta_outbox_seq_next, "loading the checkpoint");
            if (!seq_next) return std::unexpected(seq_next.error());
            if (m.outbox_seq_next > *seq_next)
                return std::unexpected(StoreError{
                    errc::corrupt, "LMDB store " + dir() + ": the checkpoint's outbox seq " +
                                       std::to_string(m.outbox_seq_next) +
                                       " is past the outbox's " + std::to_string(*seq_next) +
                                       ". Move the directory aside"});
            return std::optional<CheckpointMeta>{std::move(m)};
        });
}

}  // namespace tidemark::lmdb
