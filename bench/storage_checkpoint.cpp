// storage.checkpoint_ms: one incremental checkpoint (1% of the windows dirty) over a store that
// already holds 1k, 100k or 1M windows of ~120 bytes under 24-byte keys. The claim under test:
// its cost follows the dirty windows, not the total (a B+tree update touches log(n) pages).
// Runs on /var/tmp (a real disk, not tmpfs): every checkpoint commit is fully fsynced.
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "adapters/lmdb/store.h"

using namespace tidemark::lmdb;

namespace {

constexpr int checkpoints_per_size = 5;
constexpr size_t value_bytes = 120;
constexpr size_t load_batch_windows = 100000;

// 24 bytes: an 8-byte pipeline prefix, the window's big-endian index, an 8-byte key suffix.
std::string window_key(uint64_t i) {
    std::string k = "pipe0001";
    for (int b = 7; b >= 0; --b)
        k.push_back(static_cast<char>(i >> (8 * b)));
    k += "dev-0000";
    return k;
}

std::string value_for(uint64_t i, uint64_t round) {
    std::string v(value_bytes, '\0');
    for (size_t b = 0; b < v.size(); ++b)
        v[b] = static_cast<char>((i * 31 + round * 7 + b) & 0xff);
    return v;
}

void die(const std::string& what) {
    std::fprintf(stderr, "bench_storage_checkpoint: %s\n", what.c_str());
    std::exit(1);
}

// Returns the median checkpoint time in ms.
double run(uint64_t windows) {
    std::string tmpl = "/var/tmp/tm-bench-checkpoint-XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) die("cannot create a directory under /var/tmp");
    StoreOptions o;
    o.dir = tmpl + "/store";
    o.map_size_bytes = uint64_t{4} << 30;
    double median_ms = 0;
    {
        auto store = Store::open(o);
        if (!store) die(store.error().message);
        Store& s = **store;
        CheckpointMeta meta;
        for (uint64_t first = 0; first < windows; first += load_batch_windows) {
            auto txn = s.begin_checkpoint();
            if (!txn) die(txn.error().message);
            for (uint64_t i = first; i < std::min(windows, first + load_batch_windows); ++i)
                (*txn)->put(window_key(i), value_for(i, 0));
            if (auto c = (*txn)->commit(meta); !c) die(c.error().message);
        }
        const uint64_t dirty = std::max<uint64_t>(1, windows / 100);
        std::mt19937_64 rng(windows);
        std::uniform_int_distribution<uint64_t> pick(0, windows - 1);
        std::vector<double> ms;
        for (int round = 1; round <= checkpoints_per_size; ++round) {
            std::vector<uint64_t> changed(dirty);
            for (uint64_t& i : changed)
                i = pick(rng);
            std::sort(changed.begin(), changed.end());  // the engine writes in key order too
            const auto t0 = std::chrono::steady_clock::now();
            auto txn = s.begin_checkpoint();
            if (!txn) die(txn.error().message);
            for (uint64_t i : changed)
                (*txn)->put(window_key(i), value_for(i, round));
            meta.log_offset = round;
            if (auto c = (*txn)->commit(meta); !c) die(c.error().message);
            ms.push_back(
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                    .count());
        }
        std::sort(ms.begin(), ms.end());
        median_ms = ms[ms.size() / 2];
        std::fprintf(
            stderr, "%llu windows, %llu dirty: checkpoints %.2f..%.2f ms, map used %.1f MiB\n",
            static_cast<unsigned long long>(windows), static_cast<unsigned long long>(dirty),
            ms.front(), ms.back(), static_cast<double>(s.map_used_bytes().value_or(0)) / (1 << 20));
    }
    std::error_code ec;
    std::filesystem::remove_all(tmpl, ec);
    return median_ms;
}

}  // namespace

int main() {
    struct Size {
        const char* name;
        uint64_t windows;
        double ms = 0;
    };
    Size sizes[] = {{"1k", 1000}, {"100k", 100000}, {"1m", 1000000}};
    for (Size& z : sizes)
        z.ms = run(z.windows);
    for (const Size& z : sizes)
        std::printf("storage.checkpoint_ms_%s: %.2f ms\n", z.name, z.ms);
    for (const Size& z : sizes)
        std::printf("storage.checkpoint_ms_per_dirty_window_%s: %.4f ms\n", z.name,
                    z.ms / static_cast<double>(std::max<uint64_t>(1, z.windows / 100)));
    return 0;
}
