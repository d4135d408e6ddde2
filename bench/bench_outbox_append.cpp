// outbox_append of a backfill's results (issue 31): rows shaped like bench_backfill's pipeline B
// (10 k devices, 5 m windows, one row per device and window, a ~190-byte JSON payload) in
// batches of 4096, each drained (peek + delete) as the forwarder does, so the outbox stays
// small as in a backfill beside a forwarder. Prints what the appends wrote (/proc/self/io
// wchar: LMDB's page writes and its meta) and their time, per row; batch 0 warms up and is not
// counted. For instructions per row run it under callgrind, collecting in append_batch only:
//   valgrind --tool=callgrind --toggle-collect='*append_batch*' bench_outbox_append --batches 20
// (the figure is then Ir / ((batches + 1) * 4096): the warm-up batch is collected too).
//
// bench_outbox_append [--batches N (default 50)] [--compact 0|1 (default 0)] [--dir D]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "adapters/lmdb/store.h"
#include "bench/proc_io.h"

namespace {

using namespace tidemark::lmdb;

void die(const std::string& message) {
    std::fprintf(stderr, "bench_outbox_append: %s\n", message.c_str());
    std::exit(1);
}

uint64_t bytes_passed_to_write() {
    return tidemark::bench::read_proc_io().wchar;
}

// Not inlined: callgrind's --toggle-collect names it.
__attribute__((noinline)) StoreResult<AppendResult> append_batch(Store& s,
                                                                 std::span<const OutboxRow> rows) {
    return s.outbox_append(rows);
}

}  // namespace

int main(int argc, char** argv) {
    int batches = 50;
    bool compact = false;
    std::string base = "/var/tmp";
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        const bool has = i + 1 < argc;
        if (a == "--batches" && has)
            batches = std::atoi(argv[++i]);
        else if (a == "--compact" && has)
            compact = std::atoi(argv[++i]) != 0;
        else if (a == "--dir" && has)
            base = argv[++i];
        else
            die("usage: bench_outbox_append [--batches N] [--compact 0|1] [--dir D]");
    }
    if (batches <= 0) die("--batches must be positive");
    std::string tmpl = base + "/tidemark-bench-outbox.XXXXXX";
    if (!mkdtemp(tmpl.data())) die("cannot create a temp dir under " + base);
    const std::string dir = tmpl;
    StoreOptions o;
    o.dir = dir + "/state";
    o.map_size_bytes = uint64_t{1} << 32;
    o.compact_superseded = compact;
    auto opened = Store::open(o);
    if (!opened) die(opened.error().message);
    Store& s = **opened;

    constexpr size_t batch = 4096, devices = 10'000;
    constexpr int64_t window_ms = 300'000, t0_ms = 1'700'000'000'000;
    std::vector<OutboxRow> rows(batch);
    std::vector<uint64_t> seqs;
    uint64_t n = 0, appended = 0, written = 0;
    double seconds = 0;
    for (int b = 0; b <= batches; ++b) {
        for (OutboxRow& r : rows) {
            const uint64_t device = n % devices, window = n / devices;
            r.id = (n + 1) * 0x9E3779B97F4A7C15ull;  // emission ids are hashes
            r.pipeline = "dev_5m_p95";
            r.version = "3f9a1c2e";
            r.key = "dev-" + std::to_string(device);
            r.window_start_ms = t0_ms + static_cast<int64_t>(window) * window_ms;
            r.window_end_ms = r.window_start_ms + window_ms;
            r.enqueued_ms = t0_ms;
            r.payload = R"({"pipeline":"dev_5m_p95","version":"3f9a1c2e","key":")" + r.key +
                        R"(","window":{"start":1700000000000,"end":1700000300000},)"
                        R"("kind":"final","revision":0,"n":30,"avg":22.41,"p95":29.2,)"
                        R"("id":"0123456789abcdef"})";
            ++n;
        }
        const uint64_t w0 = bytes_passed_to_write();
        const auto c0 = std::chrono::steady_clock::now();
        auto a = append_batch(s, rows);
        const auto c1 = std::chrono::steady_clock::now();
        if (!a) die(a.error().message);
        if (b > 0) {
            appended += a->appended;
            written += bytes_passed_to_write() - w0;
            seconds += std::chrono::duration<double>(c1 - c0).count();
        }
        auto peeked = s.outbox_peek(0, 1 << 20);
        if (!peeked) die(peeked.error().message);
        seqs.clear();
        for (const OutboxRow& r : *peeked)
            seqs.push_back(r.seq);
        if (auto d = s.outbox_delete(seqs); !d) die(d.error().message);
    }
    opened->reset();
    std::filesystem::remove_all(dir);
    std::printf("outbox_append.rows: %llu\n", static_cast<unsigned long long>(appended));
    std::printf("outbox_append.bytes_written_per_row: %.0f bytes\n",
                static_cast<double>(written) / static_cast<double>(appended));
    std::printf("outbox_append.us_per_row: %.2f us\n",
                seconds * 1e6 / static_cast<double>(appended));
    return 0;
}
