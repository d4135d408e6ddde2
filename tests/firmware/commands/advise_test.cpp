// tidemark advise recovers a generated lag distribution and recommends a delay that meets the
// target on the generated disorder.
#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "adapters/config/config.h"
#include "firmware/commands/command_advise.h"
#include "tests/firmware/command_test_support.h"
#include "tests/support/broker.h"

using namespace tidemark;

namespace {

constexpr int64_t start_ms = 1764547200000;
constexpr int partitions = 5;
constexpr int events_per_partition = 20'000;

const char* pipeline_json = R"([{"name": "temp_1m", "topic": "sensors/+/telemetry",
    "key": "topic:1", "timestamp": {"pointer": "/ts", "format": "epoch_ms"},
    "fields": {"temp": "/temp"}, "window": {"type": "tumbling", "size": "1m"},
    "watermark": {"delay": "5s"}, "late": {"allowed_lateness": "1m"},
    "aggregates": {"n": {"fn": "count"}},
    "limits": {"max_keys": 100, "max_open_windows": 10000}}])";

struct Event {
    int64_t ingest_ms;
    int64_t event_ms;
    int partition;
};

struct Generated {
    test::TempDir dir{"tidemark-advise"};
    std::string config_path = dir.path() + "/config.json";
    std::vector<Event> events;  // in ingest (log) order
    config::Config config;
};

// Each partition stamps an event every 100 ms; it reaches the gateway after a log-normal lag
// (median 500 ms, sigma 1: p99 about 5 s, a long tail), so events overtake each other.
void generate(Generated& g) {
    test::write_file(g.config_path, test::config_text(g.dir.path(), pipeline_json));
    auto loaded = config::load_config_file(g.config_path);
    REQUIRE(loaded);
    g.config = std::move(*loaded);
    std::mt19937_64 rng(42);
    std::lognormal_distribution<double> lag(std::log(500.0), 1.0);
    for (int p = 0; p < partitions; ++p)
        for (int i = 0; i < events_per_partition; ++i) {
            const int64_t event_ms = start_ms + int64_t{i} * 100 + p * 7;
            g.events.push_back({event_ms + static_cast<int64_t>(lag(rng)), event_ms, p});
        }
    std::stable_sort(g.events.begin(), g.events.end(),
                     [](const Event& a, const Event& b) { return a.ingest_ms < b.ingest_ms; });
    auto writer = test::open_log(g.dir.path() + "/log");
    int64_t last_tick_ms = start_ms;
    for (const Event& e : g.events) {
        for (; last_tick_ms + 1'000 < e.ingest_ms; last_tick_ms += 1'000)
            test::append(*writer, log::RecordType::tick, last_tick_ms);
        const nlohmann::json payload{{"ts", e.event_ms}, {"temp", 20.5}};
        test::append(*writer, log::RecordType::message, e.ingest_ms,
                     "sensors/p" + std::to_string(e.partition) + "/telemetry", payload.dump());
    }
    // Noise the advisor must skip: another topic, and a payload that does not decode.
    test::append(*writer, log::RecordType::message, last_tick_ms + 5'000, "other/x", "{}");
    test::append(*writer, log::RecordType::message, last_tick_ms + 5'000, "sensors/p0/telemetry",
                 "not json");
    REQUIRE(writer->sync());
}

// Late events under a delay, computed independently: max event time seen so far in the
// partition minus the event's time, over the delay.
uint64_t late_under(const std::vector<Event>& events, int64_t delay_ms) {
    std::map<int, int64_t> newest;
    uint64_t late = 0;
    for (const Event& e : events) {
        auto [it, fresh] = newest.try_emplace(e.partition, e.event_ms);
        if (!fresh && it->second - e.event_ms > delay_ms) ++late;
        it->second = std::max(it->second, e.event_ms);
    }
    return late;
}

}  // namespace

TEST_CASE("advise reports lag quantiles within the sketch's stated relative error") {
    Generated g;
    generate(g);
    auto report = firmware::advise_log(g.config.pipelines[0], g.dir.path() + "/log", 99.9);
    REQUIRE(report);
    CHECK(report->events == g.events.size());
    CHECK(report->malformed == 1);
    CHECK(report->partitions == partitions);

    std::vector<int64_t> lags;
    for (const Event& e : g.events)
        lags.push_back(e.ingest_ms - e.event_ms);
    std::sort(lags.begin(), lags.end());
    REQUIRE(report->quantiles.size() == 5);
    for (const firmware::LagQuantile& q : report->quantiles) {
        // The sketch's rank convention: the value at sorted position floor(q * (n - 1)).
        const auto rank =
            static_cast<size_t>(std::floor(q.q * static_cast<double>(lags.size() - 1)));
        const double exact = static_cast<double>(lags[rank]);
        INFO("q " << q.q << " exact " << exact << " reported " << q.lag_ms);
        CHECK(std::fabs(q.lag_ms - exact) <= report->relative_error * exact + 1e-9);
    }
    CHECK(report->lag_min_ms == lags.front());
    CHECK(report->lag_max_ms == lags.back());
    uint64_t histogram_total = 0;
    for (const auto& b : report->histogram)
        histogram_total += b.count;
    CHECK(histogram_total == g.events.size());
}

TEST_CASE("advise recommends the smallest candidate delay that meets the target") {
    Generated g;
    generate(g);
    for (double target : {99.0, 99.9}) {
        auto report = firmware::advise_log(g.config.pipelines[0], g.dir.path() + "/log", target);
        REQUIRE(report);
        REQUIRE(report->recommended);
        const auto allowed = static_cast<double>(g.events.size()) * (100 - target) / 100;
        for (size_t i = 0; i < report->candidates.size(); ++i) {
            const firmware::DelayCandidate& c = report->candidates[i];
            INFO("target " << target << " delay " << c.delay_ms);
            // The advisor's disorder is exact: it agrees with the independent count.
            CHECK(c.late_events == late_under(g.events, c.delay_ms));
            CHECK(c.added_latency_ms == c.delay_ms);
            if (i > 0) CHECK(c.windows_per_key >= report->candidates[i - 1].windows_per_key);
            if (i < *report->recommended) CHECK(static_cast<double>(c.late_events) > allowed);
        }
        const firmware::DelayCandidate& chosen = report->candidates[*report->recommended];
        CHECK(static_cast<double>(late_under(g.events, chosen.delay_ms)) <= allowed);
        CHECK(chosen.on_time_percent >= target);
        // The lag quantiles are candidates too.
        const bool has_quantile = std::any_of(report->candidates.begin(), report->candidates.end(),
                                              [](const auto& c) { return !c.origin.empty(); });
        CHECK(has_quantile);
    }
}

TEST_CASE("advise gives the same answer when the disorders do not fit in memory") {
    Generated g;
    generate(g);
    auto one_pass = firmware::advise_log(g.config.pipelines[0], g.dir.path() + "/log", 99.9);
    firmware::AdviseLimits small;
    small.disorder_values_max = 10;
    auto two_pass = firmware::advise_log(g.config.pipelines[0], g.dir.path() + "/log", 99.9, small);
    REQUIRE(one_pass);
    REQUIRE(two_pass);
    CHECK(!one_pass->second_pass);
    CHECK(two_pass->second_pass);
    REQUIRE(one_pass->candidates.size() == two_pass->candidates.size());
    for (size_t i = 0; i < one_pass->candidates.size(); ++i) {
        CHECK(one_pass->candidates[i].delay_ms == two_pass->candidates[i].delay_ms);
        CHECK(one_pass->candidates[i].late_events == two_pass->candidates[i].late_events);
    }
    CHECK(one_pass->recommended == two_pass->recommended);
}

TEST_CASE("advise prints the quantiles, a histogram and the recommendation") {
    Generated g;
    generate(g);
    auto report = firmware::advise_log(g.config.pipelines[0], g.dir.path() + "/log", 99.9);
    REQUIRE(report);
    const std::string text = firmware::format_advise_report(*report, 60);
    CHECK(text.find("p99.99") != std::string::npos);
    CHECK(text.find("recommended: ") != std::string::npos);
    CHECK(text.find(std::string(60, '#')) != std::string::npos);  // the peak bucket's full bar
    CHECK(text.find(std::string(61, '#')) == std::string::npos);

    firmware::AdviseOptions options;
    options.config_path = g.config_path;
    options.pipeline = "temp_1m";
    test::CaptureStdout capture;
    CHECK(firmware::advise_command(options) == 0);
    CHECK(capture.text() == text);
}

TEST_CASE("advise labels its buckets in round units and folds empty ones into a line") {
    Generated g;
    generate(g);
    auto report = firmware::advise_log(g.config.pipelines[0], g.dir.path() + "/log", 99.9);
    REQUIRE(report);
    // The generated lags reach about a minute at most; put a few events far beyond them, so that
    // the buckets between hold nothing.
    REQUIRE(report->histogram.size() > 3);
    auto far = std::find_if(report->histogram.begin(), report->histogram.end(),
                            [](const firmware::LagBucket& b) { return b.lower_ms >= 3'600'000; });
    REQUIRE(far != report->histogram.end());
    REQUIRE(far->count == 0);
    far->count = 3;
    const std::string text = firmware::format_advise_report(*report, 60);
    INFO(text);
    const std::string histogram = text.substr(text.find("lag distribution"));
    // Round labels: "2s .. 5s", "1h .. 2h"; never a fraction of a unit.
    CHECK(histogram.find("200ms .. 500ms") != std::string::npos);
    CHECK(histogram.find("2s .. 5s") != std::string::npos);
    CHECK(histogram.find("1h .. 2h") != std::string::npos);
    size_t lines = 0, empty_lines = 0;
    for (size_t at = 0, end; (end = histogram.find('\n', at)) != std::string::npos; at = end + 1) {
        const std::string line = histogram.substr(at, end - at);
        if (line.find(" |") == std::string::npos) continue;
        ++lines;
        CHECK(line.find('.') == line.find(".."));  // no decimal point in the label
        if (line.find(" 0 (0 %)") != std::string::npos) ++empty_lines;
    }
    // The empty buckets between the generated lags and the far ones are one line, from where
    // the lags end to one hour.
    CHECK(empty_lines == 1);
    CHECK(histogram.find(" .. 1h ") != std::string::npos);
    CHECK(lines < 20);
}

TEST_CASE("advise says so when the log holds no events of the pipeline") {
    test::TempDir dir("tidemark-advise-empty");
    const std::string config_path = dir.path() + "/config.json";
    test::write_file(config_path, test::config_text(dir.path(), pipeline_json));
    {
        auto writer = test::open_log(dir.path() + "/log");
        test::append(*writer, log::RecordType::tick, start_ms);
        test::append(*writer, log::RecordType::message, start_ms, "other/topic", "{}");
    }
    firmware::AdviseOptions options;
    options.config_path = config_path;
    options.pipeline = "temp_1m";
    test::CaptureStdout capture;
    CHECK(firmware::advise_command(options) == 1);
    options.pipeline = "nope";
    CHECK(firmware::advise_command(options) == 2);
}
