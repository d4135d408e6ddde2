// The engine's state entries: read back in key order at restore, dropped by pipeline prefix.
// They are written only through a CheckpointTxn (checkpoint.cpp).
#include <lmdb.h>

#include "adapters/lmdb/store.h"
#include "adapters/lmdb/store_internal.h"

namespace tidemark::lmdb {

using namespace detail;

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

StoreResult<size_t> Store::drop_prefix(std::string_view prefix) {
    TM_WRITABLE();
    return impl_->write<size_t>("dropping state", [&](MDB_txn* txn) -> StoreResult<size_t> {
        MDB_cursor* cur;
        if (int rc = mdb_cursor_open(txn, impl_->state, &cur); rc != 0)
            return std::unexpected(impl_->error(rc, "dropping state"));
        MDB_val k = val(prefix), v;
        size_t n = 0;
        int rc = prefix.empty() ? mdb_cursor_get(cur, &k, &v, MDB_FIRST)
                                : mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
        while (rc == 0 && view(k).starts_with(prefix)) {
            if ((rc = mdb_cursor_del(cur, 0)) != 0) break;
            ++n;
            // Seek again rather than rely on where a delete leaves the cursor.
            k = val(prefix);
            rc = prefix.empty() ? mdb_cursor_get(cur, &k, &v, MDB_FIRST)
                                : mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
        }
        mdb_cursor_close(cur);
        if (rc != 0 && rc != MDB_NOTFOUND)
            return std::unexpected(impl_->error(rc, "dropping state"));
        return n;
    });
}

}  // namespace tidemark::lmdb
