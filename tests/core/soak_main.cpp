// scripts/soak's driver: the differential and restore properties over fresh seeds until the
// time is up. Prints every failure, then `soak.seeds: N` and `soak.failures: F` last.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "tests/core/scenario.h"

namespace {

// What the scenarios exercise, as the model sees it: a generator that never produces a case
// tests nothing there.
void print_coverage(uint64_t count) {
    using namespace tidemark;
    std::map<std::string, uint64_t> seen;
    for (uint64_t seed = 1; seed <= count; ++seed) {
        auto sc = model::generate_scenario(seed);
        auto m = model::run_model(sc.spec, sc.records);
        const auto& st = m.stats;
        auto add = [&](const std::string& name, uint64_t n) {
            seen[name] += n;
            if (n) ++seen["seeds_with." + name];
        };
        add("events", st.events_in);
        add("too_late", st.too_late);
        add("too_late_partial", st.too_late_partial);
        add("late_updated", st.late_updated);
        add("keys_refused", st.keys_refused);
        add("clamped", st.clamped);
        add("side_outputs", st.side_outputs);
        std::map<std::string, uint64_t> kinds;
        for (const auto& e : m.emissions)
            ++kinds[std::string(core::emission_kind_name(e.kind)) + "." +
                    std::string(core::closed_by_name(e.closed_by))];
        for (const auto& [k, n] : kinds)
            add(k, n);
        for (const auto& [k, n] : m.coverage)
            add(k, n);
    }
    for (const auto& [k, n] : seen)
        std::printf("%s: %llu\n", k.c_str(), static_cast<unsigned long long>(n));
}

}  // namespace

int main(int argc, char** argv) {
    using namespace tidemark;
    if (argc == 3 && std::string(argv[1]) == "coverage") {
        print_coverage(std::strtoull(argv[2], nullptr, 10));
        return 0;
    }
    if (argc == 3 && std::string(argv[1]) == "spec") {
        auto sc = model::generate_scenario(std::strtoull(argv[2], nullptr, 10));
        std::printf("family %s, %zu records\n%s", sc.family.c_str(), sc.records.size(),
                    model::spec_code(sc.spec).c_str());
        return 0;
    }
    if (argc < 3) {
        std::fprintf(stderr, "usage: core_soak SECONDS FIRST_SEED | coverage SEEDS | spec SEED\n");
        return 2;
    }
    const double seconds = std::strtod(argv[1], nullptr);
    const uint64_t first = std::strtoull(argv[2], nullptr, 10);
    // The wall clock only decides when to stop; every seed is deterministic.
    const auto until = std::chrono::steady_clock::now() +
                       std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                           std::chrono::duration<double>(seconds));
    uint64_t seeds = 0, failures = 0;
    for (uint64_t seed = first; std::chrono::steady_clock::now() < until; ++seed) {
        ++seeds;
        for (auto failure : {model::differential_failure(seed), model::restore_failure(seed, false),
                             model::restore_failure(seed, true)}) {
            if (!failure) continue;
            ++failures;
            std::printf("FAIL %s\n", failure->c_str());
            break;
        }
        std::fflush(stdout);
    }
    std::printf("soak.seeds: %llu\nsoak.failures: %llu\n", static_cast<unsigned long long>(seeds),
                static_cast<unsigned long long>(failures));
    return failures == 0 ? 0 : 1;
}
