// The engine's state entries: read back in key order at restore, dropped by pipeline prefix.
// They are written only through a CheckpointTxn (checkpoint.cpp).
#include <lmdb.h>

#include "adapters/lmdb/store.h"
#include "adapters/lmdb/store_internal.h"

namespace tidemark::lmdb {

using namespace detail;

namespace {

// Deletes every state entry under `prefix` in `txn`; with `moved`, keeps a copy of each (key
// without the prefix, value) first. Returns how many.
StoreResult<size_t> delete_under(Store::Impl& impl, MDB_txn* txn, std::string_view prefix,
                                 std::vector<std::pair<std::string, std::string>>* moved,
                                 std::string_view what) {
    MDB_cursor* cur;
    if (int rc = mdb_cursor_open(txn, impl.state, &cur); rc != 0)
        return std::unexpected(impl.error(rc, what));
    MDB_val k = val(prefix), v;
    size_t n = 0;
    int rc = prefix.empty() ? mdb_cursor_get(cur, &k, &v, MDB_FIRST)
                            : mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
    while (rc == 0 && view(k).starts_with(prefix)) {
        if (moved) moved->emplace_back(view(k).substr(prefix.size()), view(v));
        if ((rc = mdb_cursor_del(cur, 0)) != 0) break;
        ++n;
        // Seek again rather than rely on where a delete leaves the cursor.
        k = val(prefix);
        rc = prefix.empty() ? mdb_cursor_get(cur, &k, &v, MDB_FIRST)
                            : mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
    }
    mdb_cursor_close(cur);
    if (rc != 0 && rc != MDB_NOTFOUND) return std::unexpected(impl.error(rc, what));
    return n;
}

}  // namespace

StoreResult<void> Store::for_each_state(
    const std::function<Result<void>(std::string_view key, std::string_view value)>& fn) {
    return impl_->read<void>("reading the state", [&](MDB_txn* txn) -> StoreResult<void> {
        MDB_cursor* cur;
        if (int rc = mdb_cursor_open(txn, impl_->state, &cur); rc != 0)
            return std::unexpected(impl_->error(rc, "reading the state"));
        MDB_val k, v;
        int rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
        StoreResult<void> out;
        for (; rc == 0; rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
            if (auto r = fn(view(k), view(v)); !r) {
                out = std::unexpected(StoreError{errc::callback, r.error().message});
                break;
            }
        }
        mdb_cursor_close(cur);
        if (out && rc != MDB_NOTFOUND)
            return std::unexpected(impl_->error(rc, "reading the state"));
        return out;
    });
}

StoreResult<std::optional<std::string>> Store::get_state(std::string_view key) {
    return impl_->read<std::optional<std::string>>(
        "reading the state", [&](MDB_txn* txn) -> StoreResult<std::optional<std::string>> {
            auto v = impl_->get(txn, impl_->state, key, "reading the state");
            if (!v) return std::unexpected(v.error());
            if (!*v) return std::optional<std::string>{};
            return std::optional<std::string>{std::string(**v)};
        });
}

StoreResult<size_t> Store::drop_prefix(std::string_view prefix) {
    TM_WRITABLE();
    return impl_->write<size_t>("dropping state", [&](MDB_txn* txn) -> StoreResult<size_t> {
        return delete_under(*impl_, txn, prefix, nullptr, "dropping state");
    });
}

void CheckpointTxn::erase_prefix(std::string_view prefix) {
    if (error_ || txn_ == nullptr) return;
    auto n = delete_under(*store_.impl_, static_cast<MDB_txn*>(txn_), prefix, nullptr,
                          "erasing a version's state");
    if (!n) error_ = n.error();
    if (n) erases_ += *n;
}

void CheckpointTxn::rename_prefix(std::string_view from, std::string_view to) {
    if (error_ || txn_ == nullptr) return;
    std::vector<std::pair<std::string, std::string>> moved;
    auto n = delete_under(*store_.impl_, static_cast<MDB_txn*>(txn_), from, &moved,
                          "renaming a version's state");
    if (!n) {
        error_ = n.error();
        return;
    }
    for (const auto& [rest, value] : moved)
        put(std::string(to) + rest, value);
}

}  // namespace tidemark::lmdb
