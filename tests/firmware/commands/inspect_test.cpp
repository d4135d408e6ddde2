// tidemark inspect, read-only beside the service: figures of the log, the checkpoint, the
// restored pipelines, the outbox and the side output.
#include <nlohmann/json.hpp>

#include "adapters/config/config.h"
#include "adapters/lmdb/store.h"
#include "adapters/log/log_reader.h"
#include "firmware/clock.h"
#include "firmware/commands/command_inspect.h"
#include "firmware/service/processor.h"
#include "tests/firmware/command_test_support.h"
#include "tests/support/broker.h"

using namespace tidemark;
using nlohmann::json;

namespace {

constexpr int64_t start_ms = 1764547200000;
// The checkpoints below are in the past by the host clock: inspect shows their age by it.
const firmware::SystemClock system_clock;

const char* pipeline_json = R"([{"name": "temp_1m", "topic": "sensors/+/telemetry",
    "key": "topic:1", "timestamp": {"pointer": "/ts", "format": "epoch_ms"},
    "fields": {"temp": "/temp"}, "window": {"type": "tumbling", "size": "1m"},
    "watermark": {"delay": "5s", "idle_timeout": "10m"}, "late": {"too_late": "side_output"},
    "aggregates": {"n": {"fn": "count"}, "avg": {"fn": "mean", "field": "temp"}},
    "limits": {"max_keys": 100, "max_open_windows": 10000}}])";

// Emissions as outbox rows, too-late events and undecodable records as side rows: what the
// service's own sink stores.
class CollectSink : public firmware::ProcessorSink {
  public:
    void emit(const core::Emission& e) override {
        lmdb::OutboxRow row;
        row.id = e.id;
        row.pipeline = "temp_1m";
        row.key = e.key;
        row.window_start_ms = e.start_ms;
        row.window_end_ms = e.end_ms;
        row.revision = e.revision;
        row.kind = e.kind;
        row.payload = "{}";
        rows.push_back(std::move(row));
    }
    void side_output(const core::SideOutput& out) override {
        side.emplace_back(out.order, next_ordinal(out.order),
                          R"({"pipeline": "temp_1m", "reason": "too_late", "key": "dev-0"})",
                          "temp_1m", out.key);
    }
    void malformed(uint32_t, const log::Record& record, std::string_view reason) override {
        side.emplace_back(record.offset, next_ordinal(record.offset),
                          json{{"pipeline", "temp_1m"}, {"malformed", std::string(reason)}}.dump(),
                          "temp_1m", "");
    }
    std::vector<lmdb::OutboxRow> rows;
    std::vector<lmdb::SideRecord> side;

  private:
    // Side records of one log record are numbered 0, 1, ... (the store skips repeats by position).
    uint32_t next_ordinal(uint64_t offset) {
        if (offset != last_offset_) ordinal_ = 0;
        last_offset_ = offset;
        return ordinal_++;
    }
    uint64_t last_offset_ = UINT64_MAX;
    uint32_t ordinal_ = 0;
};

struct Written {
    uint64_t messages = 0, ticks = 0, malformed_payloads = 0;
};

// 4 devices, one message a second each for 10 minutes, a tick every second, one payload that is
// not JSON and one event far too late.
Written write_log(const std::string& dir) {
    auto writer = test::open_log(dir);
    Written w;
    for (int64_t s = 0; s < 600; ++s) {
        const int64_t t = start_ms + s * 1'000;
        for (int d = 0; d < 4; ++d) {
            const json payload{{"ts", t - 200}, {"temp", 20 + d}};
            test::append(*writer, log::RecordType::message, t + d,
                         "sensors/dev-" + std::to_string(d) + "/telemetry", payload.dump());
            ++w.messages;
        }
        test::append(*writer, log::RecordType::tick, t + 500);
        ++w.ticks;
    }
    test::append(*writer, log::RecordType::message, start_ms + 600'000, "sensors/dev-0/telemetry",
                 "{\"ts\": ");
    ++w.messages;
    ++w.malformed_payloads;
    test::append(*writer, log::RecordType::message, start_ms + 600'001, "sensors/dev-0/telemetry",
                 json{{"ts", start_ms}, {"temp", 1}}.dump());
    ++w.messages;
    REQUIRE(writer->sync());
    return w;
}

// The service's path over the whole log; returns the offset after the last record.
uint64_t feed_log(firmware::Processor& processor, const std::string& log_dir, CollectSink& sink) {
    auto reader = log::LogReader::open(log_dir);
    REQUIRE(reader);
    log::Record rec;
    uint64_t end_offset = 0;
    for (;;) {
        auto next = (*reader)->next(rec);
        REQUIRE(next);
        if (!*next) break;
        processor.feed(rec, sink);
        end_offset = rec.next_offset;
    }
    return end_offset;
}

json inspect_json(const firmware::InspectOptions& options, int expected_rc) {
    test::CaptureStdout capture;
    REQUIRE(firmware::inspect_command(options, system_clock) == expected_rc);
    return json::parse(capture.text());
}

}  // namespace

TEST_CASE("inspect --json shows the log, checkpoint, pipelines, outbox and side output") {
    test::TempDir dir("tidemark-inspect");
    const std::string config_path = dir.path() + "/config.json";
    test::write_file(config_path, test::config_text(dir.path(), pipeline_json));
    auto config = config::load_config_file(config_path);
    REQUIRE(config);
    const Written written = write_log(dir.path() + "/log");

    // The service's path: the processor over the log, then one checkpoint at its end.
    auto processor = firmware::Processor::create(*config);
    REQUIRE(processor);
    CollectSink sink;
    const uint64_t end_offset = feed_log(**processor, dir.path() + "/log", sink);
    const core::PipelineStats live = (*processor)->engine().stats(0);
    REQUIRE(live.open_windows > 0);
    REQUIRE(sink.side.size() == 2);
    {
        lmdb::StoreOptions so;
        so.dir = dir.path() + "/state";
        auto store = lmdb::Store::open(so);
        REQUIRE(store);
        REQUIRE((*store)->outbox_append(sink.rows));
        REQUIRE((*store)->side_append(sink.side));
        auto txn = (*store)->begin_checkpoint();
        REQUIRE(txn);
        (*processor)->checkpoint(**txn);
        lmdb::CheckpointMeta meta;
        meta.log_offset = end_offset;
        meta.outbox_seq_next = sink.rows.size() + 1;
        meta.checkpoint_ms = start_ms + 700'000;
        auto stats = (*store)->outbox_stats();
        REQUIRE(stats);
        meta.outbox_seq_next = stats->seq_next;
        REQUIRE((*txn)->commit(meta));
    }

    firmware::InspectOptions options;
    options.config_path = config_path;
    options.json = true;
    const json j = inspect_json(options, 0);

    const json& l = j["log"];
    CHECK(l["records"]["message"] == written.messages);
    CHECK(l["records"]["tick"] == written.ticks);
    CHECK(l["records"]["malformed"] == 0);
    CHECK(l["end_offset"] == end_offset);
    CHECK(l["oldest_ingest_ms"] == start_ms);
    CHECK(l["newest_ingest_ms"] == start_ms + 600'001);

    const json& c = j["store"]["checkpoint"];
    CHECK(c["log_offset"] == end_offset);
    CHECK(c["behind_bytes"] == 0);
    CHECK(c["behind_records"] == 0);
    CHECK(c["age_ms"].get<int64_t>() > 0);

    REQUIRE(j["pipelines"]["list"].size() == 1);
    const json& p = j["pipelines"]["list"][0];
    CHECK(p["name"] == "temp_1m");
    CHECK(p["keys"] == 4);
    CHECK(p["open_windows"] == live.open_windows);
    CHECK(p["watermark_ms"] == live.watermark_ms);
    CHECK(p["events_in"] == live.events_in);
    CHECK(p["too_late"] == 1);
    CHECK(p["malformed"] == written.malformed_payloads);
    CHECK(p["emitted"]["final"] == live.emitted_final);

    CHECK(j["outbox"]["rows"] == sink.rows.size());
    REQUIRE(j["outbox"]["first_rows"].size() == 5);
    CHECK(j["outbox"]["first_rows"][0]["kind"] == "final");
    CHECK(j["outbox"]["first_rows"][0]["window"]["start"] == sink.rows[0].window_start_ms);
    CHECK(j["side"]["rows"] == 2);
    REQUIRE(j["side"]["latest"].size() == 2);
    CHECK(j["side"]["latest"][1]["reason"] == "too_late");

    // Without the config: everything that does not need it.
    firmware::InspectOptions bare;
    bare.data_dir = dir.path();
    bare.json = true;
    const json b = inspect_json(bare, 0);
    CHECK(!b.contains("pipelines"));
    CHECK(b["log"]["records"]["total"] == written.messages + written.ticks);
    CHECK(b["outbox"]["rows"] == sink.rows.size());
    CHECK(b["store"]["state_entries"].get<uint64_t>() > 0);

    // The text form says the same.
    options.json = false;
    test::CaptureStdout capture;
    REQUIRE(firmware::inspect_command(options, system_clock) == 0);
    CHECK(capture.text().find("pipeline temp_1m:") != std::string::npos);
    CHECK(capture.text().find("open windows " + std::to_string(live.open_windows)) !=
          std::string::npos);
}

TEST_CASE("inspect says so and exits 1 for a missing data_dir or an empty store") {
    test::TempDir dir("tidemark-inspect-empty");
    firmware::InspectOptions options;
    options.data_dir = dir.path() + "/nothing-here";
    CHECK(firmware::inspect_command(options, system_clock) == 1);

    options.data_dir = dir.path();
    options.json = true;
    const json no_store = inspect_json(options, 1);
    CHECK(no_store["empty"].get<std::string>().find("no state store") != std::string::npos);

    {
        lmdb::StoreOptions so;
        so.dir = dir.path() + "/state";
        REQUIRE(lmdb::Store::open(so));
    }
    const json empty = inspect_json(options, 1);
    CHECK(empty["empty"].get<std::string>().find("empty") != std::string::npos);

    firmware::InspectOptions neither;
    CHECK(firmware::inspect_command(neither, system_clock) == 2);
}

TEST_CASE("inspect shows no watermark lag while a pipeline has no watermark yet") {
    // Only ticks so far: the watermark is at its minimum, and ingest minus it does not fit an
    // int64 (it overflowed in inspect, which lacked the guard health had).
    test::TempDir dir("tidemark-inspect");
    const std::string config_path = dir.path() + "/config.json";
    test::write_file(config_path, test::config_text(dir.path(), pipeline_json));
    auto config = config::load_config_file(config_path);
    REQUIRE(config);
    {
        auto writer = test::open_log(dir.path() + "/log");
        for (int64_t s = 0; s < 5; ++s)
            test::append(*writer, log::RecordType::tick, start_ms + s * 1'000);
        REQUIRE(writer->sync());
    }
    auto processor = firmware::Processor::create(*config);
    REQUIRE(processor);
    CollectSink sink;
    const uint64_t end_offset = feed_log(**processor, dir.path() + "/log", sink);
    {
        lmdb::StoreOptions so;
        so.dir = dir.path() + "/state";
        auto store = lmdb::Store::open(so);
        REQUIRE(store);
        auto txn = (*store)->begin_checkpoint();
        REQUIRE(txn);
        (*processor)->checkpoint(**txn);
        lmdb::CheckpointMeta meta;
        meta.log_offset = end_offset;
        meta.checkpoint_ms = start_ms + 5'000;
        REQUIRE((*txn)->commit(meta));
    }
    firmware::InspectOptions options;
    options.config_path = config_path;
    options.json = true;
    const json j = inspect_json(options, 0);
    REQUIRE(j["pipelines"]["list"].size() == 1);
    CHECK(j["pipelines"]["list"][0]["watermark_lag_ms"].is_null());
}
