// Every decoder of bytes the appliance reads back from its LMDB store, over damaged values (LMDB
// keeps no checksum of its data pages: a flipped bit on the SD card reaches these decoders).
// The first byte picks the decoder:
//   0  engine state (core::Engine::restore_entry / restore_finish): a checkpoint written by the
//      real engine for three pipelines (tumbling + retract, hopping with partition scope and a
//      quantile, sessions), from events the input seeds, then values damaged as the input says
//      (bit flips, bytes set, cuts, extensions, 8- and 4-byte fields overwritten with edge
//      values, a record lost, a value replaced by input bytes);
//   1  an outbox row, 2 the checkpoint meta, 3 a side row, 4 a side position
//      (adapters/lmdb/row_codec.h): the rest of the input as the stored value.
//
// Invariants: never a crash, an assertion or an out-of-bounds read. Row codecs: damaged bytes
// are refused, or decode to a row that encodes back to the same bytes (their formats are
// canonical; an outbox row of format 1 encodes as format 2, with enqueued_ms 0 appended).
// Engine state (not canonical: any non-zero byte is true): a refusal has a message; a store the
// engine accepts lets it run on (events, every window fired, results of the pipeline's shape,
// which the firmware's result encoder asserts) and the store its next checkpoint leaves is
// accepted again; an undamaged store restores an engine that emits what the uncut engine emits.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "adapters/lmdb/row_codec.h"
#include "core/engine.h"
#include "fuzz_input.h"

namespace {

using namespace tidemark;
namespace row = lmdb::detail;

std::vector<core::PipelineSpec> pipeline_specs() {
    using core::AggregateFn;
    std::vector<core::PipelineSpec> specs(3);
    auto& tumbling = specs[0];
    tumbling.name = "tumbling";
    tumbling.fields = {"v"};
    tumbling.window = {core::WindowType::tumbling, 1000, 250, 0, 0, 0};
    tumbling.watermark = {100, 5000, 600'000, core::WatermarkScope::global};
    tumbling.late = {2000, core::TooLate::side_output, core::Corrections::retract};
    tumbling.aggregates = {{"n", AggregateFn::count, -1, 0.5},
                           {"sum", AggregateFn::sum, 0, 0.5},
                           {"mean", AggregateFn::mean, 0, 0.5},
                           {"first", AggregateFn::first, 0, 0.5},
                           {"last", AggregateFn::last, 0, 0.5}};
    auto& hopping = specs[1];
    hopping.name = "hopping";
    hopping.fields = {"v"};
    hopping.window = {core::WindowType::hopping, 3000, 0, 1000, 0, 0};
    hopping.watermark = {0, 2000, 600'000, core::WatermarkScope::partition};
    hopping.late = {1000, core::TooLate::drop, core::Corrections::upsert};
    hopping.aggregates = {{"min", AggregateFn::min, 0, 0.5},
                          {"max", AggregateFn::max, 0, 0.5},
                          {"sd", AggregateFn::stddev, 0, 0.5},
                          {"p90", AggregateFn::quantile, 0, 0.9}};
    hopping.quantile = {0.05, 8};
    auto& session = specs[2];
    session.name = "session";
    session.fields = {"v"};
    session.window = {core::WindowType::session, 0, 0, 0, 500, 4000};
    session.watermark = {200, 3000, 600'000, core::WatermarkScope::global};
    session.late = {1500, core::TooLate::side_output, core::Corrections::retract};
    session.aggregates = {{"n", AggregateFn::count, -1, 0.5},
                          {"var", AggregateFn::variance, 0, 0.5},
                          {"p50", AggregateFn::quantile, 0, 0.5}};
    session.quantile = {0.01, 16};
    for (auto& s : specs)
        s.limits = {16, 256};
    return specs;
}

class MapStore : public core::StateWriter {
  public:
    std::map<std::string, std::string> data;
    void put(std::string_view k, std::string_view v) override { data[std::string(k)] = v; }
    void erase(std::string_view k) override { data.erase(std::string(k)); }
};

// Results as text, checked for the shape the firmware's encoder requires.
class Sink : public core::EmissionSink {
  public:
    explicit Sink(const std::vector<core::PipelineSpec>& specs) : specs_(specs) {}
    std::string text;
    void emit(const core::Emission& e) override {
        TM_FUZZ_CHECK(e.pipeline < specs_.size());
        // codec::encode_result asserts one value per aggregate name.
        TM_FUZZ_CHECK(e.values.size() == specs_[e.pipeline].aggregates.size());
        text += std::to_string(e.pipeline) + " " + std::to_string(e.id) + " " + e.key + " " +
                std::to_string(e.start_ms) + " " + std::to_string(e.end_ms) + " " +
                std::to_string(e.revision) + ":";
        for (const auto& v : e.values) {
            uint64_t bits = 0;
            if (v) std::memcpy(&bits, &*v, sizeof bits);
            text += v ? " " + std::to_string(bits) : " null";
        }
        text += "\n";
    }
    void side_output(const core::SideOutput& s) override {
        text += "side " + std::to_string(s.pipeline) + " " + s.key + " " + s.reason + "\n";
    }

  private:
    const std::vector<core::PipelineSpec>& specs_;
};

// A deterministic stream of records from a 32-bit seed (xorshift).
class Events {
  public:
    explicit Events(uint32_t seed) : state_(seed | 1) {}
    // One record: every pipeline gets it; about one in eight is late for some window.
    void step(core::Engine& engine, core::EmissionSink& sink) {
        ingest_ms_ += next() % 400;
        engine.advance(ingest_ms_, sink);
        const std::string key = "k" + std::to_string(next() % 5);
        const std::string partition = "p" + std::to_string(next() % 3);
        const int64_t event_ms =
            ingest_ms_ - static_cast<int64_t>(next() % 600) - (next() % 8 == 0 ? 2500 : 0);
        const double value = static_cast<double>(next() % 2001) / 8.0 - 125.0;
        core::Event e;
        e.key = key;
        e.partition = partition;
        e.event_ms = event_ms;
        e.ingest_ms = ingest_ms_;
        e.order = ++order_;
        e.fields = std::span<const double>(&value, 1);
        for (uint32_t p = 0; p < 3; ++p)
            engine.process(p, e, sink);
    }
    // Long silence, then more: every partition goes idle and every window fires and purges.
    void drain(core::Engine& engine, core::EmissionSink& sink) {
        for (int i = 0; i < 4; ++i) {
            ingest_ms_ += 20'000;
            engine.advance(ingest_ms_, sink);
        }
    }

  private:
    uint32_t next() {
        state_ ^= state_ << 13;
        state_ ^= state_ >> 17;
        state_ ^= state_ << 5;
        return state_;
    }
    uint32_t state_;
    int64_t ingest_ms_ = 1'764'400'000'000;
    uint64_t order_ = 0;
};

std::unique_ptr<core::Engine> new_engine() {
    auto engine = core::Engine::create("node-1", pipeline_specs());
    TM_FUZZ_CHECK(engine.has_value());
    return std::move(*engine);
}

// TIDEMARK_FUZZ_VERBOSE=1: say why each store was refused, and show the stores (when triaging
// an input).
const bool verbose = std::getenv("TIDEMARK_FUZZ_VERBOSE") != nullptr;

void refused(const std::string& message) {
    TM_FUZZ_CHECK(!message.empty());
    if (verbose) std::fprintf(stderr, "refused: %s\n", message.c_str());
}

void show(const char* title, const std::map<std::string, std::string>& store) {
    if (!verbose) return;
    std::fprintf(stderr, "%s:\n", title);
    for (const auto& [key, value] : store) {
        std::string line;
        for (char c : key)
            line += c >= 0x20 && c < 0x7f ? std::string(1, c) : "\\x" + std::to_string(c & 0xff);
        line += " =";
        for (char c : value)
            line += " " + std::to_string(c & 0xff);
        std::fprintf(stderr, "  %s\n", line.c_str());
    }
}

// Restores `store` into a fresh engine: the engine, or nullptr after a refusal with a message.
std::unique_ptr<core::Engine> restore(const std::map<std::string, std::string>& store) {
    auto engine = new_engine();
    for (const auto& [key, value] : store) {
        if (auto ok = engine->restore_entry(key, value); !ok) {
            refused(ok.error().message);
            return nullptr;
        }
    }
    if (auto ok = engine->restore_finish(); !ok) {
        refused(ok.error().message);
        return nullptr;
    }
    return engine;
}

constexpr int64_t edge_i64[] = {
    0, 1, -1, INT64_MIN, INT64_MAX, INT64_MIN + 1, INT64_MAX - 1, 1'764'400'000'000, 1000, 250};
constexpr uint32_t edge_u32[] = {0, 1, 2, 3, 5, 0x7fffffff, 0xffffffff, 100'000, 100'001};

// Damages one value (or loses one record) as the input says.
void damage(tidemark::fuzz::Input& in, std::map<std::string, std::string>& store) {
    if (store.empty()) return;
    auto it = store.begin();
    std::advance(it, in.below(static_cast<uint32_t>(store.size())));
    std::string& v = it->second;
    const uint8_t op = in.byte() % 8;
    const uint32_t pos = v.empty() ? 0 : in.u32() % v.size();
    switch (op) {
        case 0:
            if (!v.empty()) v[pos] = static_cast<char>(v[pos] ^ (1 << in.below(8)));
            break;
        case 1:
            if (!v.empty()) v[pos] = static_cast<char>(in.byte());
            break;
        case 2:
            v.resize(pos);
            break;
        case 3:
            v += in.bytes(16);
            break;
        case 4:
            if (v.size() >= 8) {
                std::string b;
                core::bytes::put_i64(b, edge_i64[in.below(std::size(edge_i64))]);
                v.replace(std::min<size_t>(pos, v.size() - 8), 8, b);
            }
            break;
        case 5:
            if (v.size() >= 4) {
                std::string b;
                core::bytes::put_u32(b, edge_u32[in.below(std::size(edge_u32))]);
                v.replace(std::min<size_t>(pos, v.size() - 4), 4, b);
            }
            break;
        case 6:
            store.erase(it);
            break;
        default:
            v = in.bytes(96);
            break;
    }
}

void engine_state(tidemark::fuzz::Input& in) {
    const std::vector<core::PipelineSpec> specs = pipeline_specs();
    const uint32_t seed = in.u32();
    const uint32_t before = 10 + in.below(50);
    const uint32_t between = in.below(30);
    // The uncut run: a full checkpoint, more records, an incremental one, then the tail.
    auto engine = new_engine();
    Events events(seed);
    Sink sink(specs);
    MapStore store;
    for (uint32_t i = 0; i < before; ++i)
        events.step(*engine, sink);
    engine->checkpoint(store);
    for (uint32_t i = 0; i < between; ++i)
        events.step(*engine, sink);
    engine->checkpoint(store);
    const Events tail_events = events;
    Sink tail(specs);
    for (int i = 0; i < 12; ++i)
        events.step(*engine, tail);
    events.drain(*engine, tail);

    std::map<std::string, std::string> damaged = store.data;
    for (int ops = 0; ops < 8 && !in.empty(); ++ops)
        damage(in, damaged);

    show("stored", store.data);
    show("damaged", damaged);
    auto restored = restore(damaged);
    if (damaged == store.data) TM_FUZZ_CHECK(restored != nullptr);
    if (!restored) return;
    Events again = tail_events;
    Sink after(specs);
    for (int i = 0; i < 12; ++i)
        again.step(*restored, after);
    again.drain(*restored, after);
    if (damaged == store.data) TM_FUZZ_CHECK(after.text == tail.text);
    // What the restored engine writes on top of the store it accepted is accepted in turn.
    MapStore next;
    next.data = std::move(damaged);
    restored->checkpoint(next);
    show("checkpointed after the restore", next.data);
    TM_FUZZ_CHECK(restore(next.data) != nullptr);
}

void outbox_row(std::string_view value) {
    lmdb::OutboxRow r;
    if (!row::decode_outbox_row(value, 7, r)) return;
    TM_FUZZ_CHECK(r.seq == 7);
    (void)row::window_key(r);
    const std::string encoded = row::encode_outbox_row(r);
    if (encoded == value) return;
    // Older formats end early and are written in the current one: format 1 without
    // enqueued_ms (read as 0), formats up to 6 without the version and flags (read as empty,
    // written as a 4-byte empty length and a zero byte).
    TM_FUZZ_CHECK(r.version.empty() && !r.after_retract &&
                  std::string_view(encoded).substr(0, value.size()) == value);
    const size_t added = encoded.size() - value.size();
    TM_FUZZ_CHECK(added == 5 || (added == 13 && r.enqueued_ms == 0));
}

void checkpoint_meta(std::string_view value) {
    lmdb::CheckpointMeta m;
    if (!row::decode_checkpoint(value, m)) return;
    TM_FUZZ_CHECK(row::encode_checkpoint(m) == value);
}

void side_row(std::string_view value) {
    lmdb::SideRow r;
    if (!row::decode_side_row(value, 9, r)) {
        TM_FUZZ_CHECK(!value.empty() && value.front() == '\0');  // only a row with columns
        return;
    }
    TM_FUZZ_CHECK(r.seq == 9);
    if (r.columns_known) {
        TM_FUZZ_CHECK(row::encode_side_row(r.pipeline, r.key, r.record) == value);
    } else {
        TM_FUZZ_CHECK(r.pipeline.empty() && r.key.empty() && r.record == value);
        std::string out;
        TM_FUZZ_CHECK(row::encode_side_row_without_columns(r.record, out) && out == value);
    }
}

void side_position(std::string_view value) {
    row::SidePosition p;
    if (!row::decode_side_position(value, p)) return;
    TM_FUZZ_CHECK(row::encode_side_position(p) == value);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    tidemark::fuzz::Input in(data, size);
    const uint8_t which = in.byte() % 5;
    // Exactly sized, so that a read past the end of a value is caught by ASan.
    const std::string_view rest = in.rest();
    const std::unique_ptr<char[]> copy(new char[rest.size()]);
    std::memcpy(copy.get(), rest.data(), rest.size());
    const std::string_view value(copy.get(), rest.size());
    switch (which) {
        case 0:
            engine_state(in);
            break;
        case 1:
            outbox_row(value);
            break;
        case 2:
            checkpoint_meta(value);
            break;
        case 3:
            side_row(value);
            break;
        default:
            side_position(value);
            break;
    }
    return 0;
}
