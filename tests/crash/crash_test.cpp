// Exactly-once inside the appliance (DESIGN.md section 5): crash_child is killed at every named
// crash point and at random moments, restarted until it finishes, and what it produced (the rows
// the simulated forwarder delivered plus those left in the outbox) must equal an uninterrupted
// run's: zero lost, zero duplicated by the appliance, identical values, and a log that holds
// every input record exactly once.
//
// Environment: TIDEMARK_CRASH_KILLS (default 50) kills in total, TIDEMARK_CRASH_SEED (default
// fixed, printed) for the stream and the kill schedule, TIDEMARK_CRASH_RECORDS (default 20000)
// messages per run, TIDEMARK_CRASH_KEEP=1 keeps the data directories.
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "adapters/lmdb/store.h"
#include "adapters/log/log_reader.h"
#include "tests/crash/crash_stream.h"

namespace {

namespace fs = std::filesystem;
using namespace tidemark;

constexpr uint64_t default_seed = 20240611;
constexpr uint64_t default_kills = 50;
constexpr uint64_t default_records = 20'000;
constexpr int child_runs_max = 20;             // restarts of one scenario before giving up
constexpr int64_t child_run_ms_max = 120'000;  // a run that takes longer is hung
constexpr int random_kills_per_scenario = 3;   // chained: each restart is killed again
constexpr int random_kill_ms_min = 5;
constexpr int random_kill_ms_max = 300;
constexpr int exit_crash_point = 137;  // crash_point()'s _exit code

uint64_t env_u64(const char* name, uint64_t fallback) {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') return fallback;
    return std::strtoull(v, nullptr, 10);
}

// On tmpfs when there is one: the kills are process kills (the page cache survives them), so
// the disk's fsync is not what is tested, and the runs are several times faster.
std::string make_base_dir() {
    std::error_code ec;
    const fs::path base =
        fs::is_directory("/dev/shm", ec) ? fs::path("/dev/shm") : fs::temp_directory_path();
    std::string tmpl = (base / "tm-crash-XXXXXX").string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    return tmpl;
}

struct Scenario {
    std::string name;
    std::string dir;
    std::string crash_at;  // TIDEMARK_CRASH_AT of the first run; empty for random kills
    std::string delivered() const { return dir + "/delivered.txt"; }
    std::string data_dir() const { return dir + "/data"; }
    std::string output() const { return dir + "/child.out"; }
};

struct RunOptions {
    uint64_t records = default_records;
    uint64_t seed = default_seed;
};

// Starts crash_child; its output goes to the scenario's file (spdlog would flood the test's).
pid_t spawn(const Scenario& s, const RunOptions& o, const std::string& crash_at) {
    std::vector<std::string> args = {TM_CRASH_CHILD,
                                     "--data-dir",
                                     s.data_dir(),
                                     "--records",
                                     std::to_string(o.records),
                                     "--seed",
                                     std::to_string(o.seed),
                                     "--delivered",
                                     s.delivered()};
    std::fflush(stdout);  // or the child's exit path could write the test's buffer twice
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        if (crash_at.empty())
            ::unsetenv("TIDEMARK_CRASH_AT");
        else
            ::setenv("TIDEMARK_CRASH_AT", crash_at.c_str(), 1);
        const int out = ::open(s.output().c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (out >= 0) {
            ::dup2(out, 1);
            ::dup2(out, 2);
        }
        std::vector<char*> argv;
        for (auto& a : args)
            argv.push_back(a.data());
        argv.push_back(nullptr);
        ::execv(argv[0], argv.data());
        ::_exit(127);
    }
    return pid;
}

// Waits for the child; kills it (and fails) if it hangs. Returns the wait status.
int wait_for(pid_t pid) {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(child_run_ms_max);
    int status = 0;
    for (;;) {
        pid_t r = ::waitpid(pid, &status, WNOHANG);
        REQUIRE(r >= 0);
        if (r == pid) return status;
        if (std::chrono::steady_clock::now() > deadline) {
            ::kill(pid, SIGKILL);
            ::waitpid(pid, &status, 0);
            FAIL("crash_child hung for " << child_run_ms_max << " ms");
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
}

std::string tail_of(const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    std::string text = ss.str();
    return text.size() > 2000 ? text.substr(text.size() - 2000) : text;
}

std::string describe(int status) {
    if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
    if (WIFSIGNALED(status)) return "signal " + std::to_string(WTERMSIG(status));
    return "status " + std::to_string(status);
}

// Restarts without a crash point until a run finishes. Returns the number of runs.
int run_to_completion(const Scenario& s, const RunOptions& o) {
    for (int run = 1; run <= child_runs_max; ++run) {
        int status = wait_for(spawn(s, o, ""));
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return run;
        INFO(s.name << ": crash_child output:\n" << tail_of(s.output()));
        FAIL(s.name << ": a restart without a crash point ended with " << describe(status));
    }
    FAIL(s.name << ": no run finished");
    return 0;
}

// What the receiver got plus what still waits in the outbox.
struct Outcome {
    std::map<uint64_t, std::string> rows;  // id -> payload
    uint64_t delivered_lines = 0;
    uint64_t outbox_rows = 0;
    uint64_t redelivered = 0;         // sent again after a kill between PUBACK and delete: allowed
    std::vector<std::string> errors;  // duplicates made by the appliance, differing payloads
    uint64_t log_records = 0;
    uint64_t outbox_duplicates_skipped = 0;  // regenerated on replay and recognised by id
};

void add_row(Outcome& out, uint64_t id, const std::string& payload, const char* where) {
    auto [it, inserted] = out.rows.emplace(id, payload);
    if (!inserted && it->second != payload && out.errors.size() < 20)
        out.errors.push_back(std::string(where) + ": id " + std::to_string(id) +
                             " came back with a different payload:\n  " + it->second + "\n  " +
                             payload);
}

void read_delivered(const Scenario& s, Outcome& out, std::set<uint64_t>& acknowledged) {
    std::ifstream in(s.delivered());
    std::string line;
    std::vector<uint64_t> batch;
    std::set<uint64_t> seen;
    while (std::getline(in, line)) {
        if (line == "C") {
            acknowledged.insert(batch.begin(), batch.end());
            batch.clear();
            continue;
        }
        REQUIRE(line.rfind("D ", 0) == 0);
        const size_t space = line.find(' ', 2);
        REQUIRE(space != std::string::npos);
        const uint64_t id = std::stoull(line.substr(2, space - 2));
        ++out.delivered_lines;
        if (acknowledged.count(id) && out.errors.size() < 20)
            out.errors.push_back("id " + std::to_string(id) +
                                 " was delivered again after the outbox had deleted it: the "
                                 "appliance duplicated it");
        else if (seen.count(id))
            ++out.redelivered;
        seen.insert(id);
        batch.push_back(id);
        add_row(out, id, line.substr(space + 1), "delivered");
    }
    // A final batch without "C": killed between PUBACK and delete; its rows are in the outbox.
}

Outcome collect(const Scenario& s, const RunOptions& o) {
    Outcome out;
    std::set<uint64_t> acknowledged;
    read_delivered(s, out, acknowledged);

    lmdb::StoreOptions so;
    so.dir = s.data_dir() + "/state";
    so.read_only = true;
    so.map_size_bytes = uint64_t{256} << 20;
    auto store = lmdb::Store::open(so);
    REQUIRE(store.has_value());
    std::set<uint64_t> outbox_ids;
    uint64_t from = 0;
    for (;;) {
        auto rows = (*store)->outbox_peek(from, 1000);
        REQUIRE(rows.has_value());
        if (rows->empty()) break;
        for (const auto& r : *rows) {
            ++out.outbox_rows;
            if (!outbox_ids.insert(r.id).second && out.errors.size() < 20)
                out.errors.push_back("id " + std::to_string(r.id) + " is twice in the outbox");
            if (acknowledged.count(r.id) && out.errors.size() < 20)
                out.errors.push_back("id " + std::to_string(r.id) +
                                     " is in the outbox again after it was delivered and "
                                     "deleted: the appliance duplicated it");
            else if (out.rows.count(r.id))
                ++out.redelivered;
            add_row(out, r.id, r.payload, "outbox");
            from = r.seq + 1;
        }
    }
    auto stats = (*store)->outbox_stats();
    REQUIRE(stats.has_value());
    out.outbox_duplicates_skipped = stats->duplicates_skipped;
    store->reset();

    // The log: every item of the stream exactly once, in order (a record appended twice or lost
    // across a kill shows up here).
    auto reader = log::LogReader::open(s.data_dir() + "/log");
    REQUIRE(reader.has_value());
    log::Record rec;
    const uint64_t items = crash_test::stream_items(o.records);
    for (;;) {
        auto next = (*reader)->next(rec);
        REQUIRE(next.has_value());
        if (!*next) break;
        const uint64_t k = out.log_records++;
        if (k >= items) continue;
        const crash_test::StreamItem want = crash_test::stream_item(o.seed, o.records, k);
        if ((rec.type != want.type || rec.ingest_ms != want.ingest_ms ||
             rec.payload != want.payload || rec.topic != want.topic) &&
            out.errors.size() < 20)
            out.errors.push_back("log record " + std::to_string(k) + " is not stream item " +
                                 std::to_string(k) + ": " + std::string(rec.payload) + " vs " +
                                 want.payload);
    }
    if (out.log_records != items)
        out.errors.push_back("the log holds " + std::to_string(out.log_records) +
                             " records, the stream " + std::to_string(items));
    return out;
}

// Zero lost, zero extra, identical values; returns the differences, at most a few.
std::vector<std::string> compare(const Outcome& reference, const Outcome& got) {
    std::vector<std::string> diffs;
    const size_t shown_max = 10;
    for (const auto& [id, payload] : reference.rows) {
        auto it = got.rows.find(id);
        if (it == got.rows.end()) {
            if (diffs.size() < shown_max) diffs.push_back("lost: " + payload);
        } else if (it->second != payload) {
            if (diffs.size() < shown_max)
                diffs.push_back("differs:\n    want " + payload + "\n    got  " + it->second);
        }
    }
    for (const auto& [id, payload] : got.rows)
        if (!reference.rows.count(id) && diffs.size() < shown_max)
            diffs.push_back("not in the reference: " + payload);
    return diffs;
}

struct Tally {
    uint64_t kills = 0;
    uint64_t scenarios = 0;
    uint64_t child_runs = 0;
    uint64_t redelivered = 0;
    uint64_t failed = 0;
};

void check_scenario(const Scenario& s, const RunOptions& o, const Outcome& reference, int runs,
                    uint64_t kills, Tally& tally) {
    const Outcome got = collect(s, o);
    const std::vector<std::string> diffs = compare(reference, got);
    ++tally.scenarios;
    tally.child_runs += static_cast<uint64_t>(runs);
    tally.kills += kills;
    tally.redelivered += got.redelivered;
    const bool ok = diffs.empty() && got.errors.empty();
    if (!ok) ++tally.failed;
    std::printf(
        "%-44s kills %llu runs %2d rows %zu (%llu delivered lines, %llu in outbox, "
        "%llu redelivered, %llu regenerated and skipped)%s\n",
        s.name.c_str(), static_cast<unsigned long long>(kills), runs, got.rows.size(),
        static_cast<unsigned long long>(got.delivered_lines),
        static_cast<unsigned long long>(got.outbox_rows),
        static_cast<unsigned long long>(got.redelivered),
        static_cast<unsigned long long>(got.outbox_duplicates_skipped), ok ? "" : "  FAILED");
    std::fflush(stdout);
    std::string report;
    for (const auto& e : got.errors)
        report += "\n  " + e;
    for (const auto& d : diffs)
        report += "\n  " + d;
    INFO(s.name << " (data in " << s.dir << "):" << report);
    CHECK(ok);
}

}  // namespace

TEST_CASE("a crash at any point loses and duplicates no result", "[crash][slow]") {
    RunOptions o;
    o.seed = env_u64("TIDEMARK_CRASH_SEED", default_seed);
    o.records = env_u64("TIDEMARK_CRASH_RECORDS", default_records);
    const uint64_t kills_min = env_u64("TIDEMARK_CRASH_KILLS", default_kills);
    std::printf(
        "crash test: seed %llu (TIDEMARK_CRASH_SEED), %llu messages, at least %llu "
        "kills (TIDEMARK_CRASH_KILLS)\n",
        static_cast<unsigned long long>(o.seed), static_cast<unsigned long long>(o.records),
        static_cast<unsigned long long>(kills_min));
    const std::string base = make_base_dir();
    int scenario_index = 0;
    auto make = [&](const std::string& name, const std::string& crash_at) {
        Scenario s{name, base + "/" + std::to_string(scenario_index++), crash_at};
        fs::create_directories(s.dir);
        return s;
    };

    // The reference: one run, never killed.
    const Scenario ref = make("reference", "");
    const auto t0 = std::chrono::steady_clock::now();
    REQUIRE(run_to_completion(ref, o) == 1);
    const auto reference_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
            .count();
    const Outcome reference = collect(ref, o);
    {
        INFO("the uninterrupted run must be clean");
        for (const auto& e : reference.errors)
            INFO(e);
        REQUIRE(reference.errors.empty());
        REQUIRE(reference.redelivered == 0);
        REQUIRE(reference.rows.size() >
                100);  // the stream makes windows fire, or nothing is tested
    }
    std::printf("reference: %zu result rows (%llu delivered, %llu left in the outbox) in %lld ms\n",
                reference.rows.size(), static_cast<unsigned long long>(reference.delivered_lines),
                static_cast<unsigned long long>(reference.outbox_rows),
                static_cast<long long>(reference_ms));

    Tally tally;
    // Each named point, at its first hit, an early one and later ones. The counts are reached
    // with the default stream (20 checkpoints, ~66 deliveries, hundreds of outbox appends).
    const std::vector<std::pair<std::string, std::vector<uint64_t>>> points = {
        {"after_log_append", {1, 3, 17, 9000, 19'990}},
        {"mid_checkpoint", {1, 3, 17}},
        {"after_checkpoint_commit", {1, 3, 17}},
        {"after_outbox_append", {1, 3, 17, 150}},
        {"after_outbox_delete", {1, 3, 17, 60}},
        // storage.log_compression zstd (crash_child's config): a seal at each checkpoint's sync.
        {"before_log_seal_write", {1, 3, 17}},
        {"after_log_seal_write", {1, 3, 17}},
    };
    for (const auto& [point, hits] : points) {
        for (uint64_t hit : hits) {
            const Scenario s =
                make(point + ":" + std::to_string(hit), point + ":" + std::to_string(hit));
            const int status = wait_for(spawn(s, o, s.crash_at));
            {
                INFO(s.name << ": crash_child output:\n" << tail_of(s.output()));
                REQUIRE(WIFEXITED(status));
                // A point reached fewer times than asked for runs to the end: no kill happened,
                // and the scenario would test nothing. Fail so the counts get fixed.
                REQUIRE(WEXITSTATUS(status) == exit_crash_point);
            }
            const int runs = 1 + run_to_completion(s, o);
            check_scenario(s, o, reference, runs, 1, tally);
        }
    }

    // Kills in a row, each in the run that recovered from the previous one: the second crash
    // restores what the first restart checkpointed, so state written after a restore is read
    // back too (a restored engine must also erase what it removes).
    const std::vector<std::vector<std::string>> chains = {
        {"after_checkpoint_commit:3", "after_checkpoint_commit:1"},
        {"mid_checkpoint:2", "after_checkpoint_commit:2", "after_log_append:2500"},
        {"after_outbox_append:40", "after_outbox_delete:10"},
    };
    for (const auto& chain : chains) {
        std::string name = "chain";
        for (const auto& at : chain)
            name += " " + at;
        const Scenario s = make(name, "");
        for (const auto& at : chain) {
            const int status = wait_for(spawn(s, o, at));
            INFO(s.name << ": crash_child output:\n" << tail_of(s.output()));
            REQUIRE(WIFEXITED(status));
            REQUIRE(WEXITSTATUS(status) == exit_crash_point);
        }
        const int runs = static_cast<int>(chain.size()) + run_to_completion(s, o);
        check_scenario(s, o, reference, runs, chain.size(), tally);
    }

    // Random SIGKILLs, chained: a restart is killed again before it may finish.
    std::mt19937_64 rng(o.seed);
    std::uniform_int_distribution<int> delay_ms(random_kill_ms_min, random_kill_ms_max);
    while (tally.kills < kills_min) {
        const Scenario s = make("random:" + std::to_string(scenario_index), "");
        uint64_t kills = 0;
        int runs = 0;
        bool finished = false;
        for (int k = 0; k < random_kills_per_scenario && !finished; ++k) {
            const pid_t pid = spawn(s, o, "");
            ++runs;
            const int sleep_ms = delay_ms(rng);
            std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
            int status = 0;
            const pid_t r = ::waitpid(pid, &status, WNOHANG);
            REQUIRE(r >= 0);
            if (r == pid) {
                INFO(s.name << ": crash_child output:\n" << tail_of(s.output()));
                REQUIRE(WIFEXITED(status));
                REQUIRE(WEXITSTATUS(status) == 0);
                finished = true;
                break;
            }
            ::kill(pid, SIGKILL);
            status = wait_for(pid);
            if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
                ++kills;
            else if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
                finished = true;
            else
                FAIL(s.name << ": crash_child ended with " << describe(status));
        }
        if (!finished) runs += run_to_completion(s, o);
        check_scenario(s, o, reference, runs, kills, tally);
        if (kills == 0 && scenario_index > 1000)
            FAIL("random kills never land: is the run too short?");
    }

    std::printf(
        "crash test: %llu kills in %llu scenarios (%llu child runs), %llu rows "
        "redelivered upstream after a kill between PUBACK and delete (allowed), "
        "%llu scenarios failed; seed %llu\n",
        static_cast<unsigned long long>(tally.kills),
        static_cast<unsigned long long>(tally.scenarios),
        static_cast<unsigned long long>(tally.child_runs),
        static_cast<unsigned long long>(tally.redelivered),
        static_cast<unsigned long long>(tally.failed), static_cast<unsigned long long>(o.seed));
    CHECK(tally.kills >= kills_min);
    if (tally.failed == 0 && env_u64("TIDEMARK_CRASH_KEEP", 0) == 0) {
        std::error_code ec;
        fs::remove_all(base, ec);
    } else {
        std::printf("data kept in %s\n", base.c_str());
    }
}
