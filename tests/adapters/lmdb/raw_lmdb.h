// Straight LMDB access for the tests that plant what the store itself never writes (a future or
// older format, a damaged row, a foreign store) and read back the bytes it wrote.
#pragma once

#include <lmdb.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <optional>
#include <string>

namespace tidemark::lmdb::test {

// Opens the store in dir (closed first), runs `body` in one write transaction on the named
// database `db` (opened with `open_flags`) and commits.
template <class Body>
void raw_write(const std::string& dir, const char* db, unsigned open_flags, Body body) {
    MDB_env* env;
    REQUIRE(mdb_env_create(&env) == 0);
    REQUIRE(mdb_env_set_maxdbs(env, 16) == 0);
    REQUIRE(mdb_env_open(env, dir.c_str(), 0, 0640) == 0);
    MDB_txn* txn;
    REQUIRE(mdb_txn_begin(env, nullptr, 0, &txn) == 0);
    MDB_dbi dbi;
    REQUIRE(mdb_dbi_open(txn, db, open_flags, &dbi) == 0);
    body(txn, dbi);
    REQUIRE(mdb_txn_commit(txn) == 0);
    mdb_env_close(env);
}

inline void raw_put(const std::string& dir, const char* db, const std::string& key,
                    const std::string& value) {
    raw_write(dir, db, MDB_CREATE, [&](MDB_txn* txn, MDB_dbi dbi) {
        MDB_val k{key.size(), const_cast<char*>(key.data())};
        MDB_val v{value.size(), const_cast<char*>(value.data())};
        REQUIRE(mdb_put(txn, dbi, &k, &v, 0) == 0);
    });
}

/// Empties one named database of the store in dir (closed first).
inline void raw_clear(const std::string& dir, const char* db) {
    raw_write(dir, db, 0, [](MDB_txn* txn, MDB_dbi dbi) { REQUIRE(mdb_drop(txn, dbi, 0) == 0); });
}

/// A read-only transaction on one named database of the store in dir (closed first).
class RawRead {
  public:
    RawRead(const std::string& dir, const char* db) {
        REQUIRE(mdb_env_create(&env_) == 0);
        REQUIRE(mdb_env_set_maxdbs(env_, 16) == 0);
        REQUIRE(mdb_env_open(env_, dir.c_str(), MDB_RDONLY, 0640) == 0);
        REQUIRE(mdb_txn_begin(env_, nullptr, MDB_RDONLY, &txn_) == 0);
        REQUIRE(mdb_dbi_open(txn_, db, 0, &dbi_) == 0);
    }
    ~RawRead() {
        if (txn_ != nullptr) mdb_txn_abort(txn_);
        mdb_env_close(env_);
    }
    RawRead(const RawRead&) = delete;
    RawRead& operator=(const RawRead&) = delete;
    MDB_txn* txn() const { return txn_; }
    MDB_dbi dbi() const { return dbi_; }

  private:
    MDB_env* env_ = nullptr;
    MDB_txn* txn_ = nullptr;
    MDB_dbi dbi_ = 0;
};

/// The value under key in db, read-only; nullopt when missing.
inline std::optional<std::string> raw_get(const std::string& dir, const char* db,
                                          const std::string& key) {
    RawRead read(dir, db);
    MDB_val k{key.size(), const_cast<char*>(key.data())}, v;
    std::optional<std::string> out;
    if (mdb_get(read.txn(), read.dbi(), &k, &v) == 0)
        out.emplace(static_cast<const char*>(v.mv_data), v.mv_size);
    return out;
}

/// Meta counters and the format version: 8 bytes little-endian.
inline std::string le64(uint64_t v) {
    std::string s(8, '\0');
    for (int i = 0; i < 8; ++i)
        s[static_cast<size_t>(i)] = static_cast<char>(v >> (8 * i));
    return s;
}

/// Seq and id keys: 8 bytes big-endian.
inline std::string be64(uint64_t v) {
    std::string s(8, '\0');
    for (int i = 0; i < 8; ++i)
        s[static_cast<size_t>(i)] = static_cast<char>(v >> (56 - 8 * i));
    return s;
}

/// Entries of one named database, read with LMDB directly (the store closed first).
inline size_t raw_entries(const std::string& dir, const char* db) {
    RawRead read(dir, db);
    MDB_stat st;
    REQUIRE(mdb_stat(read.txn(), read.dbi(), &st) == 0);
    return st.ms_entries;
}

}  // namespace tidemark::lmdb::test
