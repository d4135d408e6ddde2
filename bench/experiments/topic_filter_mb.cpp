// Issue 31, session 25: TopicFilter::matches against the byte-by-byte topic_matches it replaced
// (copied below as old_matches), 10 k device topics against "sensors/+/telemetry", 300 passes,
// 5 rounds. A measurement program, not part of the build:
//
//   g++ -O2 -std=c++23 -I. bench/experiments/topic_filter_mb.cpp adapters/codec/topic.cpp \
//       adapters/codec/utf8.cpp -lsimdjson -o /var/tmp/topic_filter_mb && /var/tmp/topic_filter_mb
//
// This VM's speed moves between two levels within seconds: compare the lowest of several rounds.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>
#include "adapters/codec/topic.h"
// old implementation (copied from base) for timing
static bool old_matches(std::string_view filter, std::string_view topic) noexcept {
    if (!topic.empty() && topic[0] == '$' && !filter.empty() &&
        (filter[0] == '+' || filter[0] == '#'))
        return false;
    const size_t filter_size = filter.size();
    const size_t topic_size = topic.size();
    size_t f = 0, t = 0;
    while (true) {
        const bool whole_level =
            f + 1 == filter_size || (f + 1 < filter_size && filter[f + 1] == '/');
        if (f < filter_size && filter[f] == '#' && whole_level) return true;
        if (f < filter_size && filter[f] == '+' && whole_level) {
            while (t < topic_size && topic[t] != '/')
                ++t;
            ++f;
        } else {
            for (; f < filter_size && filter[f] != '/'; ++f, ++t) {
                if (t == topic_size || topic[t] != filter[f]) return false;
            }
            if (t < topic_size && topic[t] != '/') return false;
        }
        const bool filter_done = f == filter_size;
        const bool topic_done = t == topic_size;
        if (filter_done) return topic_done;
        if (topic_done) return filter.substr(f + 1) == "#";
        ++f;
        ++t;
    }
}
int main() {
    std::vector<std::string> topics;
    for (int i = 0; i < 10000; ++i)
        topics.push_back("sensors/dev-" + std::to_string(i) + "/telemetry");
    const std::string filter = "sensors/+/telemetry";
    tidemark::codec::TopicFilter tf(filter);
    for (int round = 0; round < 5; ++round) {
        for (int which = 0; which < 2; ++which) {
            auto t0 = std::chrono::steady_clock::now();
            size_t m = 0;
            for (int rep = 0; rep < 300; ++rep)
                for (const auto& t : topics)
                    m += which ? tf.matches(t) : old_matches(filter, t);
            double ns =
                std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0)
                    .count() /
                (300.0 * topics.size());
            std::printf("%s %.2f ns/match (%zu)\n", which ? "TopicFilter" : "old", ns, m);
        }
    }
}
