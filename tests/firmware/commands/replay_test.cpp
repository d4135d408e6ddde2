// tidemark replay over a generated month: a backfill equals a direct computation of it.
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <tuple>

#include "firmware/commands/command_replay.h"
#include "tests/firmware/command_test_support.h"
#include "tests/support/broker.h"

using namespace tidemark;
using nlohmann::json;

namespace {

constexpr int64_t start_ms = 1764547200000;  // 2025-12-01T00:00:00Z, on the hour
constexpr int64_t hour_ms = 3'600'000;
constexpr int64_t day_ms = 24 * hour_ms;
constexpr int64_t slot_ms = 600'000;  // one message per device every 10 minutes of event time
constexpr int devices = 3;
constexpr int days = 30;

const char* hourly_pipeline = R"({"name": "hourly", "topic": "sensors/+/telemetry",
    "key": "topic:1", "timestamp": {"pointer": "/ts", "format": "epoch_ms"},
    "fields": {"temp": "/temp"}, "window": {"type": "tumbling", "size": "1h"},
    "watermark": {"delay": "10s", "idle_timeout": "1m"},
    "aggregates": {"sum": {"fn": "sum", "field": "temp"}, "n": {"fn": "count"}},
    "limits": {"max_keys": 100, "max_open_windows": 10000}})";
const char* daily_pipeline = R"({"name": "daily", "topic": "sensors/+/telemetry",
    "key": "topic:1", "timestamp": {"pointer": "/ts", "format": "epoch_ms"},
    "fields": {"temp": "/temp"}, "window": {"type": "tumbling", "size": "1d"},
    "watermark": {"delay": "10s", "idle_timeout": "1m"},
    "aggregates": {"n": {"fn": "count"}},
    "limits": {"max_keys": 100, "max_open_windows": 10000}})";

struct Message {
    int64_t ingest_ms;
    int64_t event_ms;
    int device;
    double temp;
};

// (key, window start) -> (sum, count)
using Hourly = std::map<std::pair<std::string, int64_t>, std::pair<double, uint64_t>>;

struct Month {
    std::vector<Message> messages;  // in ingest order
    int64_t end_ms = 0;             // the last record's ingest time
};

// A month of 3 devices, a message every 10 minutes of event time each, ingested 0-5 s later,
// with a tick every minute in between and two hours of ticks at the end (so that every window
// closes).
Month write_month(const std::string& log_dir) {
    auto writer = test::open_log(log_dir);
    std::mt19937_64 rng(7);
    std::uniform_int_distribution<int64_t> lag(0, 5'000);
    Month m;
    int64_t i = 0;
    for (int64_t slot = start_ms; slot < start_ms + days * day_ms; slot += slot_ms) {
        std::vector<Message> batch;
        for (int d = 0; d < devices; ++d) {
            const int64_t event_ms = slot + d * 1'000;
            batch.push_back(
                {event_ms + lag(rng), event_ms, d, 15.0 + static_cast<double>(i++ % 41) * 0.25});
        }
        std::sort(batch.begin(), batch.end(),
                  [](const Message& a, const Message& b) { return a.ingest_ms < b.ingest_ms; });
        for (const Message& msg : batch) {
            const std::string topic = "sensors/dev-" + std::to_string(msg.device) + "/telemetry";
            json payload{{"ts", msg.event_ms}, {"temp", msg.temp}};
            test::append(*writer, log::RecordType::message, msg.ingest_ms, topic, payload.dump());
            m.messages.push_back(msg);
        }
        for (int64_t t = slot + 60'000; t < slot + slot_ms; t += 60'000)
            test::append(*writer, log::RecordType::tick, t);
    }
    for (int64_t t = start_ms + days * day_ms; t <= start_ms + days * day_ms + 2 * hour_ms;
         t += 60'000) {
        test::append(*writer, log::RecordType::tick, t);
        m.end_ms = t;
    }
    REQUIRE(writer->sync());
    return m;
}

Hourly direct_hourly(const std::vector<Message>& messages, int64_t from_ms, int64_t to_ms) {
    Hourly h;
    for (const Message& msg : messages) {
        if (msg.ingest_ms < from_ms || msg.ingest_ms >= to_ms) continue;
        auto& [sum, n] = h[{"dev-" + std::to_string(msg.device), msg.event_ms / hour_ms * hour_ms}];
        sum += msg.temp;
        ++n;
    }
    return h;
}

std::vector<json> parse_lines(const std::string& text) {
    std::vector<json> out;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line))
        out.push_back(json::parse(line));
    return out;
}

Hourly results_of(const std::vector<json>& lines) {
    Hourly h;
    for (const json& r : lines) {
        REQUIRE(r["pipeline"] == "hourly");
        REQUIRE(r["kind"] == "final");
        REQUIRE(r["window"]["end"].get<int64_t>() - r["window"]["start"].get<int64_t>() == hour_ms);
        const auto key =
            std::make_pair(r["key"].get<std::string>(), r["window"]["start"].get<int64_t>());
        REQUIRE(!h.contains(key));  // one final result per window
        h[key] = {r["values"]["sum"].get<double>(), r["values"]["n"].get<uint64_t>()};
    }
    return h;
}

struct Fixture {
    test::TempDir dir{"tidemark-replay"};
    std::string config_path = dir.path() + "/config.json";
    std::string log_dir = dir.path() + "/log";
    Month month;
    Fixture(const std::string& pipelines) {
        test::write_file(config_path, test::config_text(dir.path(), pipelines));
        month = write_month(log_dir);
    }
    int replay(firmware::ReplayOptions options, const std::string& out) {
        options.config_path = config_path;
        options.out = out;
        return firmware::replay_command(options);
    }
};

}  // namespace

TEST_CASE("replay of a generated month equals a direct computation of its hourly sums") {
    Fixture f(std::string("[") + hourly_pipeline + "]");
    const std::string out = f.dir.path() + "/out.jsonl";
    REQUIRE(f.replay({}, out) == 0);
    const std::vector<json> lines = parse_lines(test::read_file(out));
    const Hourly expected = direct_hourly(f.month.messages, INT64_MIN, INT64_MAX);
    REQUIRE(expected.size() == size_t{devices} * days * 24);
    const Hourly got = results_of(lines);
    REQUIRE(got.size() == expected.size());
    CHECK(got == expected);
    CHECK(lines.front()["node"] == "gw-test");
}

TEST_CASE("replay twice gives byte-identical output") {
    Fixture f(std::string("[") + hourly_pipeline + ", " + daily_pipeline + "]");
    const std::string a = f.dir.path() + "/a.jsonl", b = f.dir.path() + "/b.jsonl";
    REQUIRE(f.replay({}, a) == 0);
    REQUIRE(f.replay({}, b) == 0);
    const std::string first = test::read_file(a);
    CHECK(first.size() > 100'000);
    CHECK(first == test::read_file(b));
}

TEST_CASE("replay --from/--to replays only the records ingested in that range") {
    Fixture f(std::string("[") + hourly_pipeline + "]");
    firmware::ReplayOptions options;
    options.from_ms = start_ms + 10 * day_ms;
    options.to_ms = start_ms + 11 * day_ms;
    const std::string out = f.dir.path() + "/day.jsonl";
    REQUIRE(f.replay(options, out) == 0);
    const Hourly got = results_of(parse_lines(test::read_file(out)));
    const Hourly expected = direct_hourly(f.month.messages, *options.from_ms, *options.to_ms);
    // Every window of that day but the last hour, which the watermark has not passed at --to.
    REQUIRE(got.size() == size_t{devices} * 23);
    for (const auto& [key, value] : got) {
        CHECK(key.second >= *options.from_ms);
        CHECK(key.second + hour_ms < *options.to_ms);
        REQUIRE(expected.contains(key));
        CHECK(expected.at(key) == value);
    }
}

TEST_CASE("replay --pipeline runs one pipeline of the config") {
    Fixture f(std::string("[") + hourly_pipeline + ", " + daily_pipeline + "]");
    const std::string all = f.dir.path() + "/all.jsonl", one = f.dir.path() + "/one.jsonl";
    REQUIRE(f.replay({}, all) == 0);
    firmware::ReplayOptions options;
    options.pipeline = "daily";
    REQUIRE(f.replay(options, one) == 0);
    const std::vector<json> all_lines = parse_lines(test::read_file(all));
    const std::vector<json> daily = parse_lines(test::read_file(one));
    REQUIRE(daily.size() == size_t{devices} * days);
    size_t daily_in_all = 0;
    for (const json& r : all_lines)
        daily_in_all += r["pipeline"] == "daily";
    CHECK(daily_in_all == daily.size());
    for (const json& r : daily) {
        CHECK(r["pipeline"] == "daily");
        CHECK(r["values"]["n"] == 24 * 6);
    }
    options.pipeline = "no_such_pipeline";
    CHECK(f.replay(options, f.dir.path() + "/none.jsonl") == 2);
}
