// The one log pump (Processor::feed_until) that the live step, recovery, a backfill and
// `tidemark replay` share (README: "one code path ... byte-identical results"): a log fed in
// steps of any size gives the bytes one pass gives, a step stops at its record bound and at the
// end offset it is given, and an ingest-time range feeds only what is in it.
#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <vector>

#include "adapters/codec/record.h"
#include "adapters/config/config.h"
#include "adapters/log/log_reader.h"
#include "adapters/log/log_writer.h"
#include "firmware/service/processor.h"
#include "tests/support/broker.h"

using namespace tidemark;
using tidemark::test::TempDir;

namespace {

constexpr int64_t t0_ms = 1764400000000;
constexpr int messages = 300;

config::Config load() {
    const std::string json = R"({"node_id": "gw", "data_dir": "/tmp",
      "source": {"uri": "tcp://127.0.0.1:1883"},
      "pipelines": [{"name": "p", "topic": "t/+", "key": "topic:1",
        "timestamp": {"pointer": "/ts", "format": "epoch_ms"}, "fields": {"v": "/v"},
        "window": {"type": "tumbling", "size": "10s"},
        "watermark": {"delay": "1s", "idle_timeout": "1m"},
        "aggregates": {"n": {"fn": "count"}, "max": {"fn": "max", "field": "v"}}}]})";
    auto c = config::parse_config(json, "/tmp");
    INFO((c ? std::string() : config::format_errors(c.error())));
    REQUIRE(c);
    return *c;
}

// The results as the bytes the live run sends upstream, in order.
class Lines : public firmware::ProcessorSink {
  public:
    explicit Lines(const config::Config& c) : config_(c), names_(firmware::aggregate_names(c)) {}
    void emit(const core::Emission& e) override {
        std::string line;
        codec::encode_result(config_.node_id, config_.pipelines[e.pipeline].spec.name,
                             names_[e.pipeline], e, line);
        lines.push_back(std::move(line));
    }
    void side_output(const core::SideOutput& s) override {
        lines.push_back("side " + std::to_string(s.pipeline) + " " + s.key + " " + s.reason);
    }
    void malformed(uint32_t pipeline, const log::Record& r, std::string_view reason) override {
        lines.push_back("malformed " + std::to_string(pipeline) + " " + std::to_string(r.offset) +
                        " " + std::string(reason));
    }
    std::vector<std::string> lines;

  private:
    const config::Config& config_;
    std::vector<std::vector<std::string>> names_;
};

// One message a second on two devices, ingest time = event time; returns each record's offset
// and, last, the log's end.
std::vector<uint64_t> write_log(const std::string& dir) {
    log::LogOptions lo;
    lo.dir = dir;
    lo.fsync = log::FsyncPolicy::never;
    auto writer = log::LogWriter::open(lo);
    REQUIRE(writer);
    std::vector<uint64_t> offsets;
    for (int i = 0; i < messages; ++i) {
        const int64_t ts = t0_ms + i * 1000;
        const std::string payload =
            R"({"ts": )" + std::to_string(ts) + R"(, "v": )" + std::to_string(i % 17) + "}";
        auto offset =
            (*writer)->append(log::RecordType::message, ts, i % 2 ? "t/a" : "t/b", payload);
        REQUIRE(offset);
        offsets.push_back(*offset);
    }
    offsets.push_back((*writer)->end_offset());
    return offsets;
}

// The whole log fed in steps of `step_records` records.
std::vector<std::string> feed_in_steps(const config::Config& c, const std::string& dir,
                                       size_t step_records) {
    auto processor = firmware::Processor::create(c);
    REQUIRE(processor);
    auto reader = log::LogReader::open(dir);
    REQUIRE(reader);
    Lines sink(c);
    for (;;) {
        const firmware::FeedResult fed =
            (*processor)->feed_until(**reader, UINT64_MAX, step_records, sink);
        REQUIRE(fed.status);
        if (fed.records_read < step_records) break;
    }
    return sink.lines;
}

}  // namespace

TEST_CASE("a log fed in steps of any size gives the bytes of one pass", "[log_pump]") {
    TempDir dir("tm-pump");
    const config::Config c = load();
    write_log(dir.path());
    const std::vector<std::string> one_pass = feed_in_steps(c, dir.path(), SIZE_MAX);
    REQUIRE(one_pass.size() > 20);
    for (size_t step : {size_t{1}, size_t{7}, size_t{256}, size_t{4096}}) {
        INFO("step " << step);
        CHECK(feed_in_steps(c, dir.path(), step) == one_pass);
    }
}

TEST_CASE("a step stops at its record bound and at its end offset, and says where", "[log_pump]") {
    TempDir dir("tm-pump");
    const config::Config c = load();
    const std::vector<uint64_t> offsets = write_log(dir.path());
    auto processor = firmware::Processor::create(c);
    REQUIRE(processor);
    auto reader = log::LogReader::open(dir.path());
    REQUIRE(reader);
    Lines sink(c);

    firmware::FeedResult fed = (*processor)->feed_until(**reader, UINT64_MAX, 10, sink);
    REQUIRE(fed.status);
    CHECK(fed.records_read == 10);
    CHECK(fed.records_fed == 10);
    CHECK(fed.next_offset == offsets[10]);
    // The reader is there too, though feed_until reads in batches: the next step goes on from it.
    CHECK((*reader)->position() == offsets[10]);
    // Only records that start before the end offset (the durable end, a backfill's live
    // position).
    fed = (*processor)->feed_until(**reader, offsets[15], 100, sink);
    REQUIRE(fed.status);
    CHECK(fed.records_read == 5);
    CHECK(fed.next_offset == offsets[15]);
    fed = (*processor)->feed_until(**reader, offsets[15], 100, sink);
    REQUIRE(fed.status);
    CHECK(fed.records_read == 0);
    CHECK(fed.next_offset == 0);  // none read
    // The rest, to the end of what is written.
    fed = (*processor)->feed_until(**reader, UINT64_MAX, SIZE_MAX, sink);
    REQUIRE(fed.status);
    CHECK(fed.records_read == messages - 15);
    CHECK(fed.next_offset == offsets.back());
    CHECK_FALSE(fed.reached_to);
}

TEST_CASE("an ingest-time range feeds only its records; earlier ones are read and passed over",
          "[log_pump]") {
    TempDir dir("tm-pump");
    const config::Config c = load();
    const std::vector<uint64_t> offsets = write_log(dir.path());
    auto processor = firmware::Processor::create(c);
    REQUIRE(processor);
    auto reader = log::LogReader::open(dir.path());
    REQUIRE(reader);
    Lines sink(c);
    const firmware::FeedFilter range{.from_ingest_ms = t0_ms + 50'000,
                                     .to_ingest_ms = t0_ms + 200'000};
    const firmware::FeedResult fed =
        (*processor)->feed_until(**reader, UINT64_MAX, SIZE_MAX, sink, range);
    REQUIRE(fed.status);
    CHECK(fed.reached_to);
    CHECK(fed.records_read == 200);  // 50 passed over, 150 fed; the 201st ended the feed
    CHECK(fed.records_fed == 150);
    CHECK(fed.next_offset == offsets[200]);
    // The results are those of the range's events alone: windows of 10 s from t0 + 50 s on.
    REQUIRE_FALSE(sink.lines.empty());
    CHECK(sink.lines.front().find(R"("start":)" + std::to_string(t0_ms + 50'000)) !=
          std::string::npos);
}

TEST_CASE("records read ahead give the results of records fed one by one", "[log_pump]") {
    // feed_until reads the log in batches and starts loading the state of the records ahead of
    // the one it feeds (issue 31): hints that must change nothing. Against Processor::feed
    // record by record, over pipelines of every kind of key: a topic level (two groups of
    // different topic filters, one of two pipelines), a JSON pointer, a composite key, a
    // partition watermark with and without a partition of its own; over keys created, forgotten
    // and created again; malformed records and side output included.
    TempDir dir("tm-pump");
    // One pipeline's JSON: what differs, then what all five share.
    const auto pipeline = [](const std::string& head, const std::string& window,
                             const std::string& watermark, const std::string& aggregates) {
        return "{" + head + R"(, "timestamp": {"pointer": "/ts", "format": "epoch_ms"},
            "fields": {"v": "/v"}, "window": )" +
               window + R"(, "watermark": )" + watermark + R"(, "aggregates": )" + aggregates +
               R"(, "limits": {"max_keys": 1000, "max_open_windows": 10000}})";
    };
    const std::string wm = R"({"delay": "1s", "idle_timeout": "1m"})";
    const std::string tumbling = R"({"type": "tumbling", "size": "10s"})";
    const std::string json =
        R"({"node_id": "gw", "data_dir": "/tmp", "source": {"uri": "tcp://127.0.0.1:1883"},
            "pipelines": [)" +
        pipeline(R"("name": "a", "topic": "t/+", "key": "topic:1")", tumbling, wm,
                 R"({"n": {"fn": "count"}, "p": {"fn": "quantile", "field": "v", "q": 0.95}})") +
        "," +
        pipeline(R"("name": "b", "topic": "t/+", "key": "topic:1")",
                 R"({"type": "session", "gap": "5s"})", wm,
                 R"({"max": {"fn": "max", "field": "v"}})") +
        "," +
        pipeline(R"("name": "c", "topic": "u/+/x", "key": "topic:1")",
                 R"({"type": "hopping", "size": "20s", "advance": "5s"})",
                 R"({"delay": "2s", "idle_timeout": "1m"})", R"({"n": {"fn": "count"}})") +
        "," +
        pipeline(R"("name": "d", "topic": "#", "key": "/dev")", tumbling, wm,
                 R"({"sum": {"fn": "sum", "field": "v"}})") +
        "," +
        pipeline(R"("name": "e", "topic": "t/+", "key": ["topic:0", "topic:1"],
                    "partition": "topic:1")",
                 tumbling, R"({"delay": "1s", "idle_timeout": "1m", "scope": "partition"})",
                 R"({"n": {"fn": "count"}})") +
        "," +
        pipeline(R"("name": "f", "topic": "t/+", "key": "topic:1")", tumbling,
                 R"({"delay": "1s", "idle_timeout": "1m", "scope": "partition"})",
                 R"({"n": {"fn": "count"}})") +
        "]}";
    auto c = config::parse_config(json, "/tmp");
    INFO((c ? std::string() : config::format_errors(c.error())));
    REQUIRE(c);
    {
        log::LogOptions lo;
        lo.dir = dir.path();
        lo.fsync = log::FsyncPolicy::never;
        auto writer = log::LogWriter::open(lo);
        REQUIRE(writer);
        for (int i = 0; i < 6000; ++i) {
            // 200 devices in a shuffled order; each goes quiet for a while now and then, so
            // that its key is forgotten and made again; a tick and a malformed record between.
            const int dev = (i * 7919) % 200;
            if ((i / 1000) % 2 == 1 && dev % 3 == 0) continue;
            const int64_t ts = t0_ms + i * 50;
            const std::string payload = R"({"ts": )" + std::to_string(ts) + R"(, "v": )" +
                                        std::to_string(i % 23) + R"(, "dev": "d)" +
                                        std::to_string(dev % 50) + R"("})";
            const std::string topic =
                dev % 4 == 0 ? "u/" + std::to_string(dev) + "/x" : "t/" + std::to_string(dev);
            REQUIRE((*writer)->append(log::RecordType::message, ts, topic, payload));
            if (i % 333 == 0) REQUIRE((*writer)->append(log::RecordType::tick, ts, "$tick", ""));
            if (i % 555 == 0) REQUIRE((*writer)->append_malformed(ts, "not json", "t/1", "{"));
        }
    }
    std::vector<std::string> one_by_one;
    {
        auto processor = firmware::Processor::create(*c);
        REQUIRE(processor);
        auto reader = log::LogReader::open(dir.path());
        REQUIRE(reader);
        Lines sink(*c);
        log::Record rec;
        while ((*reader)->next(rec).value())
            (*processor)->feed(rec, sink);
        one_by_one = std::move(sink.lines);
    }
    REQUIRE(one_by_one.size() > 1000);
    for (size_t step : {size_t{3}, size_t{100}, SIZE_MAX}) {
        INFO("step " << step);
        CHECK(feed_in_steps(*c, dir.path(), step) == one_by_one);
    }
}
