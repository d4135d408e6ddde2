// Issue 31, session 25: a result's text, ResultEncoder::encode (-DNEW) against encode_result as it
// was before (built from a tree before the encoder, where encode_result read node, pipeline,
// version and names on every call), 10 k results of three values, 50 passes, 7 rounds. A
// measurement program, not part of the build; from each tree's root:
//
//   g++ -O2 -std=c++23 -I. -DNDEBUG [-DNEW] bench/experiments/result_encoder_mb.cpp \
//       adapters/codec/record.cpp adapters/codec/json_text.cpp adapters/codec/utf8.cpp \
//       core/emission.cpp -lsimdjson -o /var/tmp/enc_X
//
// (before the encoder, the file comes from this tree). Compare the lowest of several rounds.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>
#include "adapters/codec/record.h"
using namespace tidemark;
int main() {
    std::vector<std::string> names = {"n", "avg", "p95"};
    std::vector<core::Emission> es(10000);
    for (int i = 0; i < 10000; ++i) {
        auto& e = es[i];
        e.id = 0x9e3779b97f4a7c15ULL * (i + 1);
        e.key = "dev-" + std::to_string(i);
        e.start_ms = 1764400000000 + i;
        e.end_ms = e.start_ms + 300000;
        e.watermark_ms = e.end_ms + 5000;
        e.values = {3.0, 21.4 + i * 0.001, 22.93 + i * 0.0007};
    }
#ifdef NEW
    codec::ResultEncoder enc("bench", "dev_5m_p95", names, "713df5f4");
#endif
    std::string out;
    out.reserve(512);
    for (int round = 0; round < 7; ++round) {
        auto t0 = std::chrono::steady_clock::now();
        size_t bytes = 0;
        for (int rep = 0; rep < 50; ++rep)
            for (const auto& e : es) {
#ifdef NEW
                enc.encode(e, out);
#else
                codec::encode_result("bench", "dev_5m_p95", names, e, out, "713df5f4");
#endif
                bytes += out.size();
            }
        double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0)
                        .count() /
                    (50.0 * es.size());
        std::printf("%s %.1f ns/result (%zu)\n",
#ifdef NEW
                    "new",
#else
                    "old",
#endif
                    ns, bytes);
    }
}
