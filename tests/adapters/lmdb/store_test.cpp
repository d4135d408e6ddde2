// The LMDB store's checkpoint, open-time checks, stale readers, MAP_FULL and read-only mode.
#include <lmdb.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "adapters/lmdb/store.h"
#include "raw_lmdb.h"
#include "tests/adapters/lmdb/lmdb_test_support.h"

using namespace tidemark::lmdb;
using tidemark::lmdb::test::le64;
using tidemark::lmdb::test::raw_put;
using tidemark::lmdb::test::read_file;
using tidemark::lmdb::test::TempDir;

namespace {

std::unique_ptr<Store> open_store(const std::string& dir, uint64_t map_size_bytes = 1 << 24,
                                  bool read_only = false) {
    StoreOptions o;
    o.dir = dir;
    o.map_size_bytes = map_size_bytes;
    o.read_only = read_only;
    auto s = Store::open(o);
    if (!s) FAIL("open: " << s.error().message);
    return std::move(*s);
}

std::map<std::string, std::string> state_of(Store& s) {
    std::map<std::string, std::string> out;
    std::string last;
    auto r =
        s.for_each_state([&](std::string_view k, std::string_view v) -> tidemark::Result<void> {
            CHECK((out.empty() || std::string(k) > last));  // key order
            last = k;
            out.emplace(k, v);
            return {};
        });
    REQUIRE(r);
    return out;
}

CheckpointMeta meta_at(uint64_t log_offset) {
    CheckpointMeta m;
    m.log_offset = log_offset;
    m.outbox_seq_next = 1;
    m.checkpoint_ms = 1764400000000 + static_cast<int64_t>(log_offset);
    m.node_id = "gw-" + std::to_string(log_offset);
    return m;
}

}  // namespace

TEST_CASE("checkpoint round trip with erase, and reopen keeps it", "[lmdb]") {
    TempDir tmp;
    {
        auto s = open_store(tmp.store());
        auto none = s->load_checkpoint();
        REQUIRE(none);
        CHECK(!none->has_value());
        auto txn = s->begin_checkpoint();
        REQUIRE(txn);
        (*txn)->put("p1/w/0002", "two");
        (*txn)->put("p1/w/0001", "one");
        (*txn)->put("p1/w/0003", "three");
        REQUIRE((*txn)->commit(meta_at(100)));

        auto txn2 = s->begin_checkpoint();
        REQUIRE(txn2);
        (*txn2)->erase("p1/w/0002");
        (*txn2)->erase("p1/w/never-written");  // fine
        (*txn2)->put("p1/w/0003", "three'");
        REQUIRE((*txn2)->commit(meta_at(200)));
    }
    auto s = open_store(tmp.store());
    auto m = s->load_checkpoint();
    REQUIRE(m);
    REQUIRE(m->has_value());
    CHECK((*m)->log_offset == 200);
    CHECK((*m)->node_id == "gw-200");
    CHECK((*m)->checkpoint_ms == 1764400000200);
    CHECK(state_of(*s) ==
          std::map<std::string, std::string>{{"p1/w/0001", "one"}, {"p1/w/0003", "three'"}});
}

TEST_CASE("an uncommitted checkpoint leaves the previous one", "[lmdb]") {
    TempDir tmp;
    {
        auto s = open_store(tmp.store());
        auto txn = s->begin_checkpoint();
        REQUIRE(txn);
        (*txn)->put("k1", "v1");
        REQUIRE((*txn)->commit(meta_at(10)));
        auto dropped = s->begin_checkpoint();
        REQUIRE(dropped);
        (*dropped)->put("k2", "v2");
        (*dropped)->erase("k1");
        // destroyed without commit
    }
    auto s = open_store(tmp.store());
    CHECK(s->load_checkpoint()->value().log_offset == 10);
    CHECK(state_of(*s) == std::map<std::string, std::string>{{"k1", "v1"}});
    // The store's write lock was released: another checkpoint works.
    auto txn = s->begin_checkpoint();
    REQUIRE(txn);
    REQUIRE((*txn)->commit(meta_at(11)));
}

TEST_CASE("a poisoned checkpoint commits nothing and reports its first error", "[lmdb]") {
    TempDir tmp;
    auto s = open_store(tmp.store());
    {
        auto txn = s->begin_checkpoint();
        REQUIRE(txn);
        (*txn)->put("k1", "v1");
        REQUIRE((*txn)->commit(meta_at(1)));
    }
    auto txn = s->begin_checkpoint();
    REQUIRE(txn);
    (*txn)->put("k2", "v2");
    (*txn)->put(std::string(Store::max_key_bytes + 1, 'x'), "too long a key");
    (*txn)->put("k3", "v3");
    (*txn)->erase("k1");
    REQUIRE((*txn)->error().has_value());
    auto c = (*txn)->commit(meta_at(2));
    REQUIRE(!c);
    CHECK(c.error().code == errc::invalid);
    CHECK(c.error().message.find("512 bytes") != std::string::npos);
    txn->reset();
    CHECK(s->load_checkpoint()->value().log_offset == 1);
    CHECK(state_of(*s) == std::map<std::string, std::string>{{"k1", "v1"}});
}

TEST_CASE("drop_prefix removes one pipeline's state only", "[lmdb]") {
    TempDir tmp;
    auto s = open_store(tmp.store());
    {
        auto txn = s->begin_checkpoint();
        REQUIRE(txn);
        for (int i = 0; i < 2000; ++i) {
            char k[32];
            std::snprintf(k, sizeof k, "%05d", i);
            (*txn)->put(std::string("a/") + k, std::string(100, 'a'));
            (*txn)->put(std::string("b/") + k, "b");
        }
        (*txn)->put("a", "not under a/");
        REQUIRE((*txn)->commit(meta_at(1)));
    }
    auto n = s->drop_prefix("a/");
    REQUIRE(n);
    CHECK(*n == 2000);
    auto st = state_of(*s);
    CHECK(st.size() == 2001);
    CHECK(st.begin()->first == "a");
    CHECK(st.rbegin()->first == "b/01999");
}

TEST_CASE("for_each_state stops at the callback's error", "[lmdb]") {
    TempDir tmp;
    auto s = open_store(tmp.store());
    auto txn = s->begin_checkpoint();
    (*txn)->put("a", "1");
    (*txn)->put("b", "2");
    REQUIRE((*txn)->commit(meta_at(1)));
    int calls = 0;
    auto r = s->for_each_state([&](std::string_view, std::string_view) -> tidemark::Result<void> {
        ++calls;
        return tidemark::fail("pipeline x no longer exists");
    });
    REQUIRE(!r);
    CHECK(r.error().code == errc::callback);
    CHECK(r.error().message == "pipeline x no longer exists");
    CHECK(calls == 1);
}

TEST_CASE("a store of a future format version is refused and left untouched", "[lmdb]") {
    TempDir tmp;
    { open_store(tmp.store()); }
    raw_put(tmp.store(), "meta", "format_version", le64(Store::format_version + 1));
    const std::string before = read_file(tmp.store() + "/data.mdb");
    StoreOptions o;
    o.dir = tmp.store();
    auto s = Store::open(o);
    REQUIRE(!s);
    CHECK(s.error().code == errc::version);
    CHECK(s.error().message.find(tmp.store()) != std::string::npos);
    CHECK(s.error().message.find("newer tidemark") != std::string::npos);
    CHECK(read_file(tmp.store() + "/data.mdb") == before);
}

TEST_CASE("a damaged store is refused and left untouched", "[lmdb]") {
    TempDir tmp;
    StoreOptions o;
    o.dir = tmp.store();
    SECTION("garbled meta pages") {
        {
            auto s = open_store(tmp.store());
            auto txn = s->begin_checkpoint();
            (*txn)->put("k", "v");
            REQUIRE((*txn)->commit(meta_at(1)));
        }
        {
            std::fstream f(tmp.store() + "/data.mdb",
                           std::ios::in | std::ios::out | std::ios::binary);
            const std::string garbage(8192, '\xA5');
            f.write(garbage.data(), static_cast<std::streamsize>(garbage.size()));
        }
    }
    SECTION("an LMDB file that is not a tidemark store") {
        std::filesystem::create_directories(tmp.store());
        raw_put(tmp.store(), "something_else", "k", "v");
    }
    SECTION("format_version garbled") {
        { open_store(tmp.store()); }
        raw_put(tmp.store(), "meta", "format_version", "v1");
    }
    SECTION("a data file of random bytes") {
        std::filesystem::create_directories(tmp.store());
        std::ofstream f(tmp.store() + "/data.mdb", std::ios::binary);
        std::string junk(64 * 1024, '\0');
        for (size_t i = 0; i < junk.size(); ++i)
            junk[i] = static_cast<char>(i * 2654435761u >> 13);
        f << junk;
    }
    const std::string before = read_file(tmp.store() + "/data.mdb");
    REQUIRE(!before.empty());
    for (bool read_only : {false, true}) {
        o.read_only = read_only;
        auto s = Store::open(o);
        REQUIRE(!s);
        CHECK(s.error().code == errc::corrupt);
        CHECK(s.error().message.find(tmp.store()) != std::string::npos);
        CHECK(s.error().message.find("untouched") != std::string::npos);
    }
    CHECK(read_file(tmp.store() + "/data.mdb") == before);
}

TEST_CASE("read-only open of a missing store says so", "[lmdb]") {
    TempDir tmp;
    StoreOptions o;
    o.dir = tmp.store();
    o.read_only = true;
    auto s = Store::open(o);
    REQUIRE(!s);
    CHECK(s.error().code == errc::not_found);
    CHECK(!std::filesystem::exists(tmp.store()));
}

namespace {
// A child that opens the environment directly, begins a read txn (taking a reader slot), tells
// the parent through `ready` and then waits to be killed.
pid_t fork_reader(const std::string& dir, int ready_fd, bool hold_txn) {
    pid_t pid = fork();
    if (pid != 0) return pid;
    MDB_env* env;
    MDB_txn* txn;
    if (mdb_env_create(&env) != 0 || mdb_env_set_maxdbs(env, 16) != 0 ||
        mdb_env_open(env, dir.c_str(), MDB_RDONLY | MDB_NOTLS, 0640) != 0)
        _exit(2);
    if (hold_txn && mdb_txn_begin(env, nullptr, MDB_RDONLY, &txn) != 0) _exit(3);
    char c = 'r';
    if (write(ready_fd, &c, 1) != 1) _exit(4);
    for (;;)
        pause();
}
}  // namespace

TEST_CASE("reader slots of killed processes are cleared and counted", "[lmdb]") {
    TempDir tmp;
    { open_store(tmp.store()); }
    int fds[2];
    REQUIRE(pipe(fds) == 0);
    // A live process keeps the lock file in use (as the running service would); otherwise the
    // next opener re-initialises the reader table and there is nothing stale to count.
    pid_t holder = fork_reader(tmp.store(), fds[1], false);
    pid_t killed[2];
    for (pid_t& k : killed)
        k = fork_reader(tmp.store(), fds[1], true);
    char c;
    for (int i = 0; i < 3; ++i)
        REQUIRE(read(fds[0], &c, 1) == 1);
    for (pid_t k : killed) {
        kill(k, SIGKILL);
        REQUIRE(waitpid(k, nullptr, 0) == k);
    }
    {
        auto s = open_store(tmp.store());
        CHECK(s->stale_readers_cleared() == 2);
        auto again = s->check_stale_readers();
        REQUIRE(again);
        CHECK(*again == 0);
    }
    kill(holder, SIGKILL);
    waitpid(holder, nullptr, 0);
    close(fds[0]);
    close(fds[1]);
}

TEST_CASE("a killed reader's slot is cleared while the store runs, and its pages are reused",
          "[lmdb]") {
    // A `tidemark inspect` killed inside its read txn: its snapshot keeps LMDB from reusing any
    // page freed after it, so every write takes new pages until the slot is cleared.
    TempDir tmp;
    auto s = open_store(tmp.store(), 1 << 26);
    std::atomic<bool> stop{false};
    std::atomic<int> read_failures{0};
    // The forwarder's thread reads all along: its own slots must never count as stale.
    std::thread forwarder([&] {
        while (!stop.load())
            if (!s->outbox_stats()) ++read_failures;
    });
    uint64_t id = 1;
    auto write_and_delete = [&](int cycles) {
        for (int i = 0; i < cycles; ++i) {
            OutboxRow row;
            row.id = id++;
            row.payload = std::string(3000, 'x');
            auto a = s->outbox_append(std::span<const OutboxRow>(&row, 1));
            REQUIRE(a);
            const uint64_t seq = s->outbox_stats()->seq_next - 1;
            REQUIRE(s->outbox_delete(std::span<const uint64_t>(&seq, 1)));
        }
        return s->map_used_bytes().value();
    };
    write_and_delete(20);
    int fds[2];
    REQUIRE(pipe(fds) == 0);
    pid_t reader = fork_reader(tmp.store(), fds[1], true);
    char c;
    REQUIRE(read(fds[0], &c, 1) == 1);
    kill(reader, SIGKILL);
    REQUIRE(waitpid(reader, nullptr, 0) == reader);

    const uint64_t pinned_before = s->map_used_bytes().value();
    const uint64_t pinned_after = write_and_delete(200);
    CHECK(pinned_after > pinned_before + 200 * 4096);  // each cycle took fresh pages

    auto cleared = s->check_stale_readers();
    REQUIRE(cleared);
    CHECK(*cleared == 1);
    CHECK(s->stale_readers_cleared() == 1);
    // The forwarder thread has read all along; it stops here, since its read txns pin a
    // snapshot for a moment and a write then takes fresh pages (under load, up to ~200 in 400
    // cycles): the reuse below is exact only without concurrent readers.
    stop = true;
    forwarder.join();
    const uint64_t settled = write_and_delete(20);
    CHECK(write_and_delete(400) == settled);  // freed pages are reused: the map stops growing
    CHECK(*s->check_stale_readers() == 0);

    CHECK(read_failures == 0);
    close(fds[0]);
    close(fds[1]);
}

TEST_CASE("a read-only store reads beside a writer in another process", "[lmdb]") {
    TempDir tmp;
    { open_store(tmp.store()); }
    int to_child[2], to_parent[2];
    REQUIRE(pipe(to_child) == 0);
    REQUIRE(pipe(to_parent) == 0);
    pid_t writer = fork();
    if (writer == 0) {
        StoreOptions o;
        o.dir = tmp.store();
        o.map_size_bytes = 1 << 24;
        auto s = Store::open(o);
        if (!s) _exit(2);
        char c;
        for (int round = 0; round < 2; ++round) {
            std::vector<OutboxRow> rows(3);
            for (size_t i = 0; i < rows.size(); ++i) {
                rows[i].id = round * 10 + i + 1;
                rows[i].payload = "{}";
            }
            if (!(*s)->outbox_append(rows)) _exit(3);
            auto txn = (*s)->begin_checkpoint();
            if (!txn) _exit(4);
            (**txn).put("k" + std::to_string(round), "v");
            CheckpointMeta m;
            m.log_offset = 100 + round;
            if (!(**txn).commit(m)) _exit(5);
            if (write(to_parent[1], "w", 1) != 1) _exit(6);
            if (read(to_child[0], &c, 1) != 1) _exit(7);
        }
        _exit(0);
    }
    char c;
    REQUIRE(read(to_parent[0], &c, 1) == 1);
    auto ro = open_store(tmp.store(), 1 << 24, true);
    CHECK(ro->read_only());
    CHECK(ro->load_checkpoint()->value().log_offset == 100);
    CHECK(ro->outbox_peek(0, 100)->size() == 3);
    OutboxRow row;
    row.id = 99;
    auto w = ro->outbox_append(std::span<const OutboxRow>(&row, 1));
    REQUIRE(!w);
    CHECK(w.error().code == errc::invalid);
    CHECK(!ro->begin_checkpoint());
    CHECK(!ro->side_append(std::vector<SideRecord>{{1, 0, "x", "p", "k"}}));

    REQUIRE(write(to_child[1], "n", 1) == 1);
    REQUIRE(read(to_parent[0], &c, 1) == 1);
    // A new read sees the writer's newer commits.
    CHECK(ro->load_checkpoint()->value().log_offset == 101);
    CHECK(ro->outbox_peek(0, 100)->size() == 6);
    CHECK(state_of(*ro).size() == 2);
    REQUIRE(write(to_child[1], "n", 1) == 1);
    int status = 0;
    REQUIRE(waitpid(writer, &status, 0) == writer);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    for (int fd : {to_child[0], to_child[1], to_parent[0], to_parent[1]})
        close(fd);
}

TEST_CASE("a full map refuses the write whole and the store stays usable", "[lmdb]") {
    TempDir tmp;
    const uint64_t map_bytes = 256 * 1024;
    StoreOptions o;
    o.dir = tmp.store();
    o.map_size_bytes = map_bytes;
    o.outbox_bytes_max = uint64_t{1} << 30;  // the map, not the outbox bound, must stop it
    auto opened = Store::open(o);
    REQUIRE(opened);
    auto& s = *opened;
    {
        auto txn = s->begin_checkpoint();
        (*txn)->put("k", "v");
        REQUIRE((*txn)->commit(meta_at(7)));
    }
    std::vector<uint64_t> appended;
    StoreError last;
    for (uint64_t id = 1; id < 1000; ++id) {
        OutboxRow row;
        row.id = id;
        row.pipeline = "p";
        row.key = "k" + std::to_string(id);
        row.payload = std::string(1500, 'x');
        auto r = s->outbox_append(std::span<const OutboxRow>(&row, 1));
        if (!r) {
            last = r.error();
            break;
        }
        appended.push_back(id);
    }
    REQUIRE(last.code == errc::map_full);
    CHECK(last.message.find("storage.map_size") != std::string::npos);
    REQUIRE(appended.size() > 10);
    auto rows = s->outbox_peek(0, 10000);
    REQUIRE(rows);
    CHECK(rows->size() == appended.size());
    CHECK(s->outbox_stats()->rows == appended.size());

    // A checkpoint too big for the map fails whole; the previous one stays.
    {
        auto txn = s->begin_checkpoint();
        for (int i = 0; i < 200; ++i)
            (*txn)->put("big" + std::to_string(i), std::string(2000, 'b'));
        auto c = (*txn)->commit(meta_at(8));
        REQUIRE(!c);
        CHECK(c.error().code == errc::map_full);
    }
    CHECK(s->load_checkpoint()->value().log_offset == 7);

    // Deleting rows frees pages; then appends work again.
    std::vector<uint64_t> seqs;
    for (size_t i = 0; i < rows->size() / 2; ++i)
        seqs.push_back((*rows)[i].seq);
    auto d = s->outbox_delete(seqs);
    REQUIRE(d);
    OutboxRow row;
    row.id = 5000;
    row.payload = std::string(1500, 'y');
    auto again = s->outbox_append(std::span<const OutboxRow>(&row, 1));
    REQUIRE(again);
    CHECK(again->appended == 1);
    CHECK(s->outbox_stats()->rows == appended.size() - seqs.size() + 1);
    auto used = s->map_used_bytes();
    REQUIRE(used);
    CHECK(*used <= s->map_size_bytes());

    // And all of it is still there after a reopen.
    s.reset();
    auto reopened = open_store(tmp.store(), map_bytes);
    CHECK(reopened->outbox_stats()->rows == appended.size() - seqs.size() + 1);
    CHECK(reopened->load_checkpoint()->value().log_offset == 7);
}

namespace {
// Scattered ids and keys: deletes touch pages all over the id and window indexes, as they do
// when results of many keys interleave.
OutboxRow scattered_row(uint64_t n, size_t payload_bytes) {
    OutboxRow row;
    row.id = n * 0x9E3779B97F4A7C15ull;
    row.pipeline = "p";
    row.key = "k" + std::to_string(row.id % 100'000);
    row.window_start_ms = static_cast<int64_t>(n % 7) * 60'000;
    row.window_end_ms = row.window_start_ms + 60'000;
    row.payload = std::string(payload_bytes, 'x');
    return row;
}
}  // namespace

TEST_CASE("a map filled to MAP_FULL can still be emptied: deletes, id pruning, side deletes",
          "[lmdb]") {
    const size_t payload_bytes = GENERATE(40, 300, 1500, 5000);
    INFO("payload " << payload_bytes);
    TempDir tmp;
    StoreOptions o;
    o.dir = tmp.store();
    o.map_size_bytes = 1 << 20;
    o.outbox_bytes_max = uint64_t{1} << 30;  // the map, not the outbox bound, must stop it
    o.side_bytes_max = uint64_t{1} << 30;
    auto opened = Store::open(o);
    REQUIRE(opened);
    auto& s = *opened;
    std::vector<SideRecord> side;
    for (int i = 0; i < 40; ++i)
        side.emplace_back(uint64_t(i), 0,
                          "side " + std::string(payload_bytes, 's') + std::to_string(i), "p", "k");
    REQUIRE(s->side_append(side));
    // Batches first, then single rows: the map ends as full as appends can make it.
    uint64_t n = 1;
    for (size_t batch_rows : {64, 8, 1}) {
        for (;;) {
            std::vector<OutboxRow> batch;
            for (size_t i = 0; i < batch_rows; ++i)
                batch.push_back(scattered_row(n + i, payload_bytes));
            auto r = s->outbox_append(batch);
            if (!r) {
                REQUIRE(r.error().code == errc::map_full);
                break;
            }
            n += batch_rows;
        }
    }
    for (uint64_t offset = side.size();; ++offset) {
        const SideRecord more(offset, 0, side.front().record, "p", "k");
        auto r = s->side_append(std::span<const SideRecord>(&more, 1));
        if (!r) {
            REQUIRE(r.error().code == errc::map_full);
            break;
        }
    }
    const auto full = s->outbox_stats().value();
    REQUIRE(full.rows > 20);

    // Each of them works from the full map; the firmware trims with whichever applies.
    auto delete_outbox = [&] {
        std::vector<uint64_t> seqs;
        const std::vector<OutboxRow> rows = s->outbox_peek(0, 1 << 20).value();
        for (const OutboxRow& r : rows)
            seqs.push_back(r.seq);
        REQUIRE(seqs.size() == full.rows);
        auto deleted = s->outbox_delete(seqs);
        INFO((deleted ? "" : deleted.error().message));
        REQUIRE(deleted);
        CHECK(s->outbox_stats()->rows == 0);
        CHECK(s->outbox_stats()->bytes == 0);
    };
    auto prune_ids = [&] {
        auto pruned = s->prune_ids(full.seq_next);
        INFO((pruned ? "" : pruned.error().message));
        REQUIRE(pruned);
        CHECK(*pruned == full.seq_next - 1);
    };
    auto delete_side = [&] {
        std::vector<uint64_t> side_seqs;
        const std::vector<SideRow> side_rows = s->side_peek(0, 1 << 20).value();
        for (const SideRow& r : side_rows)
            side_seqs.push_back(r.seq);
        auto side_deleted = s->side_delete(side_seqs);
        INFO((side_deleted ? "" : side_deleted.error().message));
        REQUIRE(side_deleted);
        CHECK(s->side_stats()->rows == 0);
    };
    SECTION("outbox_delete first") {
        delete_outbox();
        prune_ids();
        delete_side();
    }
    SECTION("prune_ids first") {
        prune_ids();
        delete_side();
        delete_outbox();
    }
    SECTION("side_delete first") {
        delete_side();
        delete_outbox();
        prune_ids();
    }

    // The space is usable again.
    auto side_again = s->side_append(side);
    INFO((side_again ? "" : side_again.error().message));
    REQUIRE(side_again);
    for (uint64_t i = 0; i < full.rows / 2; ++i) {
        auto row = scattered_row(n + i, payload_bytes);
        auto r = s->outbox_append(std::span<const OutboxRow>(&row, 1));
        INFO("row " << i << ": " << (r ? "" : r.error().message));
        REQUIRE(r);
    }
}
