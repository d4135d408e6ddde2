// The processor parses a record's payload once for all its pipelines (issue 31), gives each
// pipeline exactly the results it gives alone, and keeps no large parser after a large payload
// (issue 25, finding 5).
#include "firmware/service/processor.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <string>
#include <vector>

#include "adapters/codec/decoder.h"
#include "adapters/codec/record.h"

using namespace tidemark;

namespace {

std::string pipeline_json(const std::string& name, const std::string& topic,
                          const std::string& window, const std::string& field = "/temp",
                          const std::string& key = "topic:1") {
    return R"({"name": ")" + name + R"(", "topic": ")" + topic + R"(", "key": ")" + key +
           R"(", "timestamp": {"pointer": "/ts", "format": "epoch_ms"}, "fields": {"v": ")" +
           field + R"("}, "window": )" + window +
           R"(, "watermark": {"delay": "1s", "idle_timeout": "1m"},
      "aggregates": {"n": {"fn": "count"}, "max": {"fn": "max", "field": "v"}},
      "limits": {"max_keys": 100, "max_open_windows": 10000}})";
}

// Five pipelines on one topic that make the same event but for their field (1m, 5m, 1h,
// hopping, session; "hum" is in half of the messages), one on that topic with another key
// (absent from most messages), and one on another topic.
const std::vector<std::string> pipelines = {
    pipeline_json("p1m", "sensors/+/telemetry", R"({"type": "tumbling", "size": "1m"})"),
    pipeline_json("p5m", "sensors/+/telemetry", R"({"type": "tumbling", "size": "5m"})"),
    pipeline_json("by_site", "sensors/+/telemetry", R"({"type": "tumbling", "size": "1m"})",
                  "/temp", "/site"),
    pipeline_json("p1h", "sensors/+/telemetry", R"({"type": "tumbling", "size": "1h"})", "/hum"),
    pipeline_json("hop", "sensors/+/telemetry",
                  R"({"type": "hopping", "size": "10m", "advance": "1m"})", "/hum"),
    pipeline_json("session", "sensors/+/telemetry", R"({"type": "session", "gap": "2m"})"),
    pipeline_json("other", "plant/+/telemetry", R"({"type": "tumbling", "size": "1m"})"),
};

config::Config config_of(const std::vector<std::string>& list) {
    std::string text = R"({"node_id": "gw-test", "data_dir": "/tmp",
      "source": {"uri": "tcp://127.0.0.1:1883"}, "pipelines": [)";
    for (size_t i = 0; i < list.size(); ++i)
        text += (i ? "," : "") + list[i];
    text += "]}";
    auto parsed = config::parse_config(text, "/tmp");
    INFO((parsed ? std::string() : config::format_errors(parsed.error())));
    REQUIRE(parsed);
    return *parsed;
}

// Each pipeline's results as the bytes the live run sends, and its refused records.
class CollectSink : public firmware::ProcessorSink {
  public:
    explicit CollectSink(const config::Config& c)
        : config_(c), names_(firmware::aggregate_names(c)) {}
    void emit(const core::Emission& e) override {
        const config::PipelineConfig& p = config_.pipelines[e.pipeline];
        codec::encode_result(config_.node_id, p.spec.name, names_[e.pipeline], e, line_,
                             p.spec.version);
        results[p.spec.name].push_back(line_);
    }
    void side_output(const core::SideOutput&) override {}
    void malformed(uint32_t pipeline, const log::Record& record, std::string_view reason) override {
        refused[config_.pipelines[pipeline].spec.name].push_back(std::to_string(record.offset) +
                                                                 " " + std::string(reason));
    }
    std::map<std::string, std::vector<std::string>> results, refused;

  private:
    const config::Config& config_;
    std::vector<std::vector<std::string>> names_;
    std::string line_;
};

struct OwnedRecord {
    log::RecordType type;
    int64_t ingest_ms;
    std::string topic, payload;
};

// Two hours of 4 devices, a tick now and then, a payload that is not JSON, a message on the
// other pipeline's topic and one no pipeline matches.
std::vector<OwnedRecord> traffic(const std::string& large_payload = {}) {
    std::vector<OwnedRecord> out;
    const int64_t start_ms = 1764547200000;
    for (int i = 0; i < 2400; ++i) {
        const int64_t ingest_ms = start_ms + i * 3000;
        const std::string device = "dev-" + std::to_string(i % 4);
        std::string payload = R"({"ts": )" + std::to_string(ingest_ms - (i * 7) % 2500) +
                              R"(, "temp": )" + std::to_string(15 + (i * 13) % 20);
        if (i % 2 == 0) payload += R"(, "hum": )" + std::to_string(40 + i % 30);
        if (i % 3 == 0) payload += R"(, "site": "north")";
        payload += "}";
        if (i == 700 && !large_payload.empty()) payload = large_payload;
        if (i == 100) payload = "not json";
        const std::string topic = i % 50 == 3   ? "plant/" + device + "/telemetry"
                                  : i % 50 == 4 ? "lobby/" + device + "/status"
                                                : "sensors/" + device + "/telemetry";
        out.push_back({log::RecordType::message, ingest_ms, topic, payload});
        if (i % 10 == 9) out.push_back({log::RecordType::tick, ingest_ms + 1, "", ""});
    }
    out.push_back({log::RecordType::tick, start_ms + 4 * 3'600'000, "", ""});
    return out;
}

int all_index(const config::Config& config, const std::string& name) {
    for (size_t i = 0; i < config.pipelines.size(); ++i)
        if (config.pipelines[i].spec.name == name) return static_cast<int>(i);
    FAIL("no pipeline " << name);
    return -1;
}

void feed_all(firmware::Processor& processor, const std::vector<OwnedRecord>& records,
              firmware::ProcessorSink& sink) {
    uint64_t offset = 0;
    for (const OwnedRecord& r : records) {
        log::Record record;
        record.offset = offset;
        record.next_offset = offset + 1;
        offset += 1;
        record.type = r.type;
        record.ingest_ms = r.ingest_ms;
        record.topic = r.topic;
        record.payload = r.payload;
        processor.feed(record, sink);
    }
}

}  // namespace

TEST_CASE("five pipelines on one topic parse each record once", "[processor]") {
    const config::Config config = config_of(pipelines);
    auto processor = firmware::Processor::create(config);
    REQUIRE(processor);
    CollectSink sink(config);
    const std::vector<OwnedRecord> records = traffic();
    feed_all(**processor, records, sink);

    uint64_t matched = 0;  // message records some pipeline's filter matches
    for (const OwnedRecord& r : records)
        if (r.type == log::RecordType::message && !r.topic.starts_with("lobby/")) ++matched;
    CHECK((*processor)->payload_parses() == matched);
    CHECK(matched > 2000);

    // The one payload that is not JSON is refused by each pipeline that matches it, alike.
    REQUIRE(sink.refused["p1m"].size() == 1);
    const std::string not_json = sink.refused["p1m"][0];
    for (const std::string name : {"p5m", "p1h", "hop", "session"}) {
        INFO(name);
        CHECK(sink.refused[name] == std::vector<std::string>{not_json});
    }
    const auto& by_site = sink.refused["by_site"];
    CHECK(std::find(by_site.begin(), by_site.end(), not_json) != by_site.end());
    CHECK(sink.refused["other"].empty());
    CHECK_THAT(sink.refused["p1m"][0], Catch::Contains("the payload is not valid JSON"));
}

TEST_CASE("each pipeline gives with the others exactly what it gives alone", "[processor]") {
    const config::Config all = config_of(pipelines);
    auto together = firmware::Processor::create(all);
    REQUIRE(together);
    CollectSink sink(all);
    const std::vector<OwnedRecord> records = traffic();
    feed_all(**together, records, sink);
    for (const std::string& p : pipelines) {
        const config::Config one = config_of({p});
        const std::string name = one.pipelines[0].spec.name;
        INFO(name);
        auto alone = firmware::Processor::create(one);
        REQUIRE(alone);
        CollectSink alone_sink(one);
        feed_all(**alone, records, alone_sink);
        CHECK(alone_sink.results[name].size() > 0);
        CHECK(alone_sink.results[name] == sink.results[name]);
        CHECK(alone_sink.refused[name] == sink.refused[name]);
        const int index = all_index(all, name);
        CHECK((*alone)->decode_counters()[0].malformed ==
              (*together)->decode_counters()[index].malformed);
        CHECK((*alone)->decode_counters()[0].fields_missing ==
              (*together)->decode_counters()[index].fields_missing);
    }
    // The cases the comparison covers: fields missing in half the messages, keys in a third.
    CHECK((*together)->decode_counters()[3].fields_missing > 1000);
    CHECK(sink.refused["by_site"].size() > 1000);
}

TEST_CASE("the processor keeps no large parser after a large payload", "[processor]") {
    const config::Config config = config_of(pipelines);
    auto processor = firmware::Processor::create(config);
    REQUIRE(processor);
    CollectSink sink(config);
    // A 1 MiB payload that decodes (a long array beside ts and temp), then small ones.
    std::string large = R"({"ts": 1764549300000, "temp": 30, "filler": [0)";
    while (large.size() < (1u << 20))
        large += ",0";
    large += "]}";
    feed_all(**processor, traffic(large), sink);
    CHECK((*processor)->parser_capacity_bytes() <= codec::payload_retained_bytes_max);
    CHECK((*processor)->parser_capacity_bytes() > 0);
    // Its event counted like the others: only the payload that is not JSON was refused.
    CHECK(sink.refused["p1m"].size() == 1);
}
