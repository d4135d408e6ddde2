// appliance_sim: the whole appliance, simulated, in one process (issue 24), in the spirit of
// FoundationDB's simulator and TigerBeetle's VOPR.
//
// Operation. From a seed, a scenario (sim_generator.cpp, sim_families.cpp): devices and their
// messages, the configs the gateway is reloaded or restarted with, and the events it lives
// through. The simulation (sim_world.cpp, sim_faults.cpp) runs the REAL engine host
// (firmware/service/engine_host.h: log, processor, versions, backfill, switch, checkpoint, reload)
// over the REAL LMDB store and log in a temporary directory (under /dev/shm when there is one, so
// fsync is cheap), on a manual clock, tick by tick (sim_types.h tick_ms). Every seed runs in a
// child process, so that an assertion of the code under test is a failure to report.
//
// What is simulated. Devices with skewed clocks (one minutes fast but under max_future), jitter
// and readings sent minutes late (out of order), silences long enough to be forgotten, churn,
// keys and partitions near and over their 256-byte limits, payloads without a timestamp or not
// JSON, messages on a topic no pipeline reads. The gateway broker: each message goes through
// the redelivery filter into the log; after a crash it sends the end of the last connection
// again, flagged DUP. The upstream (sim_upstream.cpp) reads the outbox only while it is up, as
// the forwarder does (peek, which claims; publish; delete on PUBACK, in batches); the link
// drops part way through a batch now and then. The gateway's life: reloads with changed,
// reverted, removed and re-added pipelines (so versions, backfills, abandoned backfills and
// switches), backfill.from, compaction on or off (a store option: it changes at restarts),
// crashes at any tick (every object dropped without a last checkpoint, then open and recover,
// with the same or another config), a checkpoint whose fdatasync fails (tests/support/
// fault_io), a reload whose checkpoint fails, a reload over a damaged state entry. Scope
// global and partition, tumbling, hopping and session windows, upsert and retract.
// Not simulated: retention moving the log's start, a full map or disk, power loss (a crash
// here keeps what was written), clock steps and ingest's resumed markers (the reference model
// has neither), side output content (only its count).
//
// What is checked (sim_checker.cpp, sim_checks_runs.cpp), from DESIGN.md's text and not from
// the code under test. Which version runs over which records comes from DESIGN's rules
// (sim_versions.cpp; the host's registry must agree after every plan); what each run should
// emit, from tests/core/reference_model.h over those records (sim_expect.cpp). Then: the
// consumer view a downstream builds from what reached the upstream (per pipeline, version, key
// and window the highest revision, a retract winning a tie; a retract has no value) equals the
// model's for every run (a version switched out: up to the switch; one switched in: all of
// it); every record is one the model computed; without compaction none is lost; with retract
// corrections finals + updates - retracts give each window's value; a late correction is
// inside the allowed lateness; an id names one record and one outbox row, and a version run
// again uses new ids; the downstream's version table names each pipeline's live version
// (switch_ms, previous, since_ms), its record comes after the results the switching version
// emitted before it, and it is cleared only for removed pipelines; the host's counters are the
// model's; in scope partition, turning the most skewed device (and one more) silent changes no
// other device's results; every checkpoint and reload without an injected fault succeeds; a
// reload that fails changes no version, no live state, and moves no backfill back; the log
// reads back as appended, each message once. docs/RELIABILITY.md section 6 has what it found.
//
// Replay a seed: build/tests/sim/appliance_sim --seed N --verbose (add --no-fork for a
// debugger). Many: --seeds COUNT [--first N]; for a time: --seconds S [--first N], whose last
// lines are sim.seeds and sim.failures. A failing seed prints its replay command.
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "tests/sim/sim_checker.h"
#include "tests/sim/sim_generator.h"
#include "tests/sim/sim_world.h"

namespace {

using namespace tidemark;

struct Outcome {
    std::vector<std::string> failures;
    std::string summary;
};

std::string temp_dir() {
    struct stat st {};
    const std::string base = stat("/dev/shm", &st) == 0 && access("/dev/shm", W_OK) == 0
                                 ? "/dev/shm"
                                 : std::filesystem::temp_directory_path().string();
    std::string path = base + "/tidemark-sim-XXXXXX";
    if (!mkdtemp(path.data())) return {};
    return path;
}

// One seed, here: the failures in the order found, and what was compared.
Outcome run_seed(uint64_t seed, bool verbose, const std::function<void(const std::string&)>& emit,
                 const std::string& dir) {
    Outcome o;
    spdlog::set_level(verbose ? spdlog::level::info : spdlog::level::off);
    const sim::Scenario s = sim::generate(seed);
    if (verbose) std::printf("%s", sim::describe(s).c_str());
    const auto fail = [&](const std::string& f) {
        o.failures.push_back(f);
        emit("F" + f);
    };
    const auto note = [&](const std::string& n) { std::printf("  %s\n", n.c_str()); };
    sim::World world(s, dir, fail, verbose ? sim::Reporter(note) : sim::Reporter());
    const sim::Recording rec = world.run();
    if (rec.finished)
        for (const std::string& f : sim::check(s, rec, &o.summary))
            fail(f);
    if (verbose) {
        for (const sim::Run& r : rec.versions.runs())
            std::printf("  run %d: '%s' %s [%llu, %llu): %s\n", r.index, r.pipeline.c_str(),
                        r.version.c_str(), static_cast<unsigned long long>(r.start_offset),
                        static_cast<unsigned long long>(r.end_offset), r.how.c_str());
        std::printf("  %s\n", o.summary.c_str());
    }
    emit("S" + o.summary);
    return o;
}

// The seed in a child process; its lines come through a pipe as they are found, so that a
// crash of the code under test still reports what came before it.
Outcome run_in_child(uint64_t seed, bool verbose) {
    const std::string dir = temp_dir();
    if (dir.empty()) return {{"cannot create a temporary directory"}, {}};
    int fds[2];
    if (pipe(fds) != 0) return {{"pipe failed"}, {}};
    std::fflush(stdout);
    const pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        const auto emit = [&](const std::string& line) {
            const std::string framed = line + '\0';
            for (size_t off = 0; off < framed.size();) {
                const ssize_t n = write(fds[1], framed.data() + off, framed.size() - off);
                if (n <= 0) break;
                off += static_cast<size_t>(n);
            }
        };
        try {
            run_seed(seed, verbose, emit, dir);
        } catch (const std::exception& e) {
            emit(std::string("F[exception] ") + e.what());
        }
        std::fflush(stdout);
        _exit(0);
    }
    close(fds[1]);
    std::string all;
    char buf[65536];
    for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;)
        all.append(buf, static_cast<size_t>(n));
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    std::filesystem::remove_all(dir);
    Outcome o;
    for (size_t at = 0; at < all.size();) {
        const size_t end = all.find('\0', at);
        const std::string line = all.substr(at, end - at);
        if (line[0] == 'F') o.failures.push_back(line.substr(1));
        if (line[0] == 'S') o.summary = line.substr(1);
        at = end == std::string::npos ? all.size() : end + 1;
    }
    if (WIFSIGNALED(status))
        o.failures.push_back("[crash] the simulated appliance died of signal " +
                             std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) +
                             ")");
    return o;
}

void usage() {
    std::fprintf(stderr,
                 "usage: appliance_sim --seed N [--verbose] [--no-fork]\n"
                 "       appliance_sim --seeds COUNT [--first N]\n"
                 "       appliance_sim --seconds S [--first N]\n");
}

}  // namespace

int main(int argc, char** argv) {
    uint64_t seed = 0, count = 0, first = 1;
    double seconds = 0;
    bool verbose = false, fork_seeds = true, one = false;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        const auto value = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
        if (a == "--seed") {
            seed = std::strtoull(value().c_str(), nullptr, 10);
            one = true;
        } else if (a == "--seeds") {
            count = std::strtoull(value().c_str(), nullptr, 10);
        } else if (a == "--first") {
            first = std::strtoull(value().c_str(), nullptr, 10);
        } else if (a == "--seconds") {
            seconds = std::strtod(value().c_str(), nullptr);
        } else if (a == "--verbose") {
            verbose = true;
        } else if (a == "--no-fork") {
            fork_seeds = false;
        } else {
            usage();
            return 2;
        }
    }
    if (!one && count == 0 && seconds <= 0) {
        usage();
        return 2;
    }
    const auto run = [&](uint64_t s) {
        if (fork_seeds) return run_in_child(s, verbose);
        const std::string dir = temp_dir();
        Outcome o = run_seed(
            s, verbose, [](const std::string&) {}, dir);
        std::filesystem::remove_all(dir);
        return o;
    };
    if (one) {
        const Outcome o = run(seed);
        for (const std::string& f : o.failures)
            std::printf("FAIL %s\n", f.c_str());
        std::printf("seed %llu: %s; %zu failures\n", static_cast<unsigned long long>(seed),
                    o.summary.c_str(), o.failures.size());
        return o.failures.empty() ? 0 : 1;
    }
    const auto t0 = std::chrono::steady_clock::now();
    const auto elapsed = [&] {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    if (count)
        std::printf("sim: seeds %llu..%llu\n", static_cast<unsigned long long>(first),
                    static_cast<unsigned long long>(first + count - 1));
    uint64_t seeds = 0, failing = 0;
    for (uint64_t s = first; count ? s < first + count : elapsed() < seconds; ++s) {
        ++seeds;
        const Outcome o = run(s);
        if (o.failures.empty()) continue;
        ++failing;
        std::printf("FAIL seed %llu (family %s): %zu failures; replay: %s --seed %llu --verbose\n",
                    static_cast<unsigned long long>(s), sim::generate(s).family.c_str(),
                    o.failures.size(), argv[0], static_cast<unsigned long long>(s));
        for (const std::string& f : o.failures)
            std::printf("  %s\n", f.c_str());
        std::fflush(stdout);
    }
    const double t = elapsed();
    std::printf(
        "sim.seconds: %.1f s\nsim.seeds_per_second: %.1f\nsim.seeds: %llu\nsim.failures: %llu\n", t,
        static_cast<double>(seeds) / std::max(t, 1e-9), static_cast<unsigned long long>(seeds),
        static_cast<unsigned long long>(failing));
    return failing == 0 ? 0 : 1;
}
