#include "firmware/service/processor.h"

#include <algorithm>
#include <optional>
#include <span>

#include "adapters/codec/decoder.h"
#include "adapters/codec/topic.h"
#include "core/bytes.h"
#include "firmware/adapter_options.h"

namespace tidemark::firmware {

namespace {
// Decode counters live beside the engine's state under their own prefix (the engine's keys all
// start with 0x01).
constexpr std::string_view live_counters_key =
    "\x02"
    "decode_counters";
}  // namespace

std::vector<std::vector<std::string>> aggregate_names(const config::Config& config) {
    std::vector<std::vector<std::string>> out;
    for (const config::PipelineConfig& p : config.pipelines) {
        std::vector<std::string> names;
        for (const core::AggregateSpec& a : p.spec.aggregates)
            names.push_back(a.name);
        out.push_back(std::move(names));
    }
    return out;
}

std::vector<codec::ResultEncoder> result_encoders(const config::Config& config) {
    const std::vector<std::vector<std::string>> names = aggregate_names(config);
    std::vector<codec::ResultEncoder> out;
    for (size_t i = 0; i < config.pipelines.size(); ++i) {
        const core::PipelineSpec& spec = config.pipelines[i].spec;
        out.emplace_back(config.node_id, spec.name, names[i], spec.version);
    }
    return out;
}

struct Processor::Impl {
    std::vector<codec::Decoder> decoders;
    // One parse per record, read by every pipeline that matches it (issue 31); its memory is
    // bounded after a large payload (codec::payload_retained_bytes_max).
    codec::PayloadParser parser;

    // Pipelines whose decoders make the same event but for its fields (Decoder::same_event_as:
    // the same topic filter, key, partition and timestamp) form a group: the topic is matched
    // and the key and time decoded once per record for the group, and each pipeline after the
    // first reads only its fields. The results are those of a full decode per pipeline.
    struct Group {
        codec::DecodedEvent scratch;
        uint64_t record_serial = 0;  // the record matched and decoded below (0: none yet)
        bool matched = false;
        bool decoded = false;
        codec::DecodeStatus status = codec::DecodeStatus::ok;
        // Its pipelines: when there are several, the engine is told which key they are about
        // to process (Engine::prefetch), so that their state loads side by side.
        std::vector<uint32_t> members;
    };
    // Members of a group that read the same fields (Decoder::same_fields_as) read them once
    // per record: the first to decode them keeps them here, the others take them from there.
    struct SharedFields {
        std::vector<double> values;
        uint32_t missing = 0;
        uint64_t record_serial = 0;  // the record they are of (0: none yet)
    };
    std::vector<uint32_t> group_of;  // per pipeline
    // Per pipeline: the SharedFields it reads (those of the first pipeline of its group with
    // the same fields), or none when no other pipeline of its group reads the same.
    std::vector<std::optional<uint32_t>> shared_fields_of;
    std::vector<SharedFields> shared_fields;  // indexed by pipeline
    std::unique_ptr<Group[]> groups;          // at most one per pipeline (Group cannot move)
    uint64_t record_serial = 0;

    // Records ahead (issue 31): feed_until reads the log in batches (batch_records) whose records
    // all stay valid (LogReader::next_batch), so that a record's key state is in memory when its
    // turn comes instead of being waited for by it. For each group whose key is a topic level
    // (known from the record's topic, before its payload is parsed), the record ahead_records after
    // the one fed starts to load the hash slot of its key; at each record fed after that, the next
    // of what that loads points to: the key state, its newest window and partition, the
    // window's quantile sketch and the partition's watermark leaf. Hints only: a wrong one (a
    // record the group does not match, a key the pipeline does not hold yet) costs a load, and
    // results never depend on them.
    static constexpr size_t batch_records = 128;
    static constexpr size_t ahead_records = 4;
    std::vector<log::Record> batch = std::vector<log::Record>(batch_records);
    std::vector<uint32_t> ahead_groups;  // groups whose key is a topic level
    std::vector<uint64_t> ahead_hashes;  // [record in batch][ahead group]; 0: no hint
};

Processor::Processor(config::Config config, std::unique_ptr<core::Engine> engine,
                     std::unique_ptr<Impl> impl)
    : config_(std::move(config)), engine_(std::move(engine)), impl_(std::move(impl)) {
    counters_.resize(config_.pipelines.size());
    min_event_ms_.assign(config_.pipelines.size(), INT64_MAX);
}

Processor::~Processor() = default;

std::string Processor::counters_key_for(std::string_view state_tag) {
    std::string key(live_counters_key);
    // Appended piecewise: GCC 12 at -O3 reports a false -Wrestrict on "@" + std::string(...).
    if (!state_tag.empty()) key.append(1, '@').append(state_tag);
    return key;
}

Result<std::unique_ptr<Processor>> Processor::create(const config::Config& config,
                                                     std::string_view state_tag) {
    std::vector<core::PipelineSpec> specs;
    auto impl = std::make_unique<Impl>();
    uint32_t groups = 0;
    for (const config::PipelineConfig& p : config.pipelines) {
        specs.push_back(p.spec);
        impl->decoders.emplace_back(decoder_spec(p));
        const codec::Decoder& decoder = impl->decoders.back();
        uint32_t group = groups;  // a new one, unless an earlier decoder makes the same event
        for (size_t j = 0; j + 1 < impl->decoders.size(); ++j) {
            if (decoder.same_event_as(impl->decoders[j])) {
                group = impl->group_of[j];
                break;
            }
        }
        if (group == groups) ++groups;
        impl->group_of.push_back(group);
    }
    impl->groups = std::make_unique<Impl::Group[]>(groups);
    for (uint32_t i = 0; i < impl->group_of.size(); ++i)
        impl->groups[impl->group_of[i]].members.push_back(i);
    for (uint32_t g = 0; g < groups; ++g)
        if (impl->decoders[impl->groups[g].members.front()].key_is_topic_level())
            impl->ahead_groups.push_back(g);
    impl->ahead_hashes.resize(Impl::batch_records * impl->ahead_groups.size());
    impl->shared_fields_of.resize(impl->decoders.size());
    impl->shared_fields.resize(impl->decoders.size());
    for (uint32_t i = 0; i < impl->decoders.size(); ++i) {
        for (const uint32_t j : impl->groups[impl->group_of[i]].members) {
            if (j != i && impl->decoders[i].same_fields_as(impl->decoders[j])) {
                impl->shared_fields_of[i] = std::min(i, j);
                break;
            }
        }
    }
    auto engine = core::Engine::create(config.node_id, std::move(specs));
    if (!engine) return std::unexpected(engine.error());
    std::unique_ptr<Processor> processor(
        new Processor(config, std::move(*engine), std::move(impl)));
    processor->counters_key_ = counters_key_for(state_tag);
    return processor;
}

FeedResult Processor::feed_until(log::LogReader& reader, uint64_t end_offset, size_t records_max,
                                 ProcessorSink& sink, const FeedFilter& filter) {
    FeedResult result;
    Impl& d = *impl_;
    while (result.records_read < records_max) {
        // No more than records_max: the caller goes on from the reader's position.
        const size_t want = std::min(d.batch.size(), records_max - result.records_read);
        auto got = reader.next_batch(std::span(d.batch.data(), want), end_offset);
        if (!got) {
            result.status = std::unexpected(got.error());
            break;
        }
        if (*got == 0) break;
        const size_t n = *got;
        for (size_t j = 0; j < std::min(n, Impl::ahead_records); ++j)
            prefetch_ahead(j);
        for (size_t j = 0; j < n; ++j) {
            const log::Record& rec = d.batch[j];
            if (filter.to_ingest_ms && rec.ingest_ms >= *filter.to_ingest_ms) {
                result.reached_to = true;
                return result;
            }
            result.next_offset = rec.next_offset;
            ++result.records_read;
            if (j + Impl::ahead_records < n) prefetch_ahead(j + Impl::ahead_records);
            if (rec.ingest_ms < filter.from_ingest_ms) continue;
            feed(rec, sink);
            ++result.records_fed;
        }
    }
    return result;
}

// Record `j` of the batch gets its key's hash and the first round (its hash slots); the three
// records before it the rounds after (see Impl).
void Processor::prefetch_ahead(size_t j) {
    Impl& d = *impl_;
    const size_t groups = d.ahead_groups.size();
    if (groups == 0) return;
    const log::Record& rec = d.batch[j];
    uint64_t* hashes = &d.ahead_hashes[j * groups];
    const auto before = [&](size_t back, size_t i) {
        return j >= back ? d.ahead_hashes[(j - back) * groups + i] : 0;
    };
    for (size_t i = 0; i < groups; ++i) {
        const Impl::Group& group = d.groups[d.ahead_groups[i]];
        const codec::Decoder& decoder = d.decoders[group.members.front()];
        hashes[i] = 0;
        // With one group, a record it does not match costs a wasted load; with several, each
        // loads only for the records it matches.
        if (rec.type == log::RecordType::message && (groups == 1 || decoder.matches(rec.topic))) {
            const std::optional<std::string_view> key = decoder.key_of_topic(rec.topic);
            if (key && !key->empty()) hashes[i] = core::Engine::key_hash(*key);
        }
        engine_->prefetch_ahead(group.members,
                                {hashes[i], before(1, i), before(2, i), before(3, i)});
    }
}

void Processor::feed(const log::Record& record, ProcessorSink& sink) {
    // Time up to the record that says the clock is not trusted still counts; from the record
    // that says it is trusted again on, time counts afresh (Engine::set_clock).
    if (record.type == log::RecordType::tick && record.topic == clock_synchronised_tick)
        engine_->set_clock(true, record.ingest_ms);
    if (record.type == log::RecordType::tick && record.topic == ingest_resumed_tick)
        engine_->resume(record.ingest_ms);
    engine_->advance(record.ingest_ms, sink);
    if (record.type == log::RecordType::tick && record.topic == clock_unsynchronised_tick)
        engine_->set_clock(false, record.ingest_ms);
    if (record.type == log::RecordType::tick) return;
    if (record.type == log::RecordType::malformed) {
        ++malformed_records_;
        for (uint32_t i = 0; i < impl_->decoders.size(); ++i) {
            if (!impl_->decoders[i].matches(record.topic)) continue;
            ++counters_[i].malformed;
            sink.malformed(i, record, record.reason);
        }
        return;
    }
    Impl& d = *impl_;
    const uint64_t serial = ++d.record_serial;
    bool parsed = false;
    for (uint32_t i = 0; i < d.decoders.size(); ++i) {
        const codec::Decoder& decoder = d.decoders[i];
        Impl::Group& group = d.groups[d.group_of[i]];
        if (group.record_serial != serial) {
            group.record_serial = serial;
            group.matched = decoder.matches(record.topic);
            group.decoded = false;
        }
        if (!group.matched) continue;
        // Parsed at the first pipeline that wants it: a record no pipeline matches costs no parse.
        if (!parsed) {
            d.parser.parse(record.payload);
            parsed = true;
        }
        codec::DecodedEvent& out = group.scratch;
        Impl::SharedFields* shared =
            d.shared_fields_of[i] ? &d.shared_fields[*d.shared_fields_of[i]] : nullptr;
        bool fields_decoded = true;
        if (!group.decoded) {
            group.status =
                decoder.decode(d.parser, record.topic, record.ingest_ms, record.offset, out);
            group.decoded = true;
            if (group.status == codec::DecodeStatus::ok && group.members.size() > 1)
                engine_->prefetch(group.members, out.event.key, out.event.partition);
        } else if (group.status == codec::DecodeStatus::ok) {
            if (shared && shared->record_serial == serial) {
                out.event.fields = shared->values;
                out.fields_missing = shared->missing;
                fields_decoded = false;
            } else {
                decoder.decode_fields(d.parser, out);
            }
        }
        if (shared && fields_decoded && group.status == codec::DecodeStatus::ok) {
            shared->values.assign(out.event.fields.begin(), out.event.fields.end());
            shared->missing = out.fields_missing;
            shared->record_serial = serial;
        }
        if (group.status != codec::DecodeStatus::ok) {
            ++counters_[i].malformed;
            sink.malformed(i, record, out.reason);
            continue;
        }
        if (out.fields_missing) ++counters_[i].fields_missing;
        min_event_ms_[i] = std::min(min_event_ms_[i], out.event.event_ms);
        engine_->process(i, out.event, sink);
    }
    // Events hold no view into the parsed document: a large one's parser goes now, not at the
    // next record.
    if (parsed) d.parser.release();
}

uint64_t Processor::payload_parses() const {
    return impl_->parser.parses();
}

size_t Processor::parser_capacity_bytes() const {
    return impl_->parser.capacity_bytes();
}

void Processor::checkpoint(core::StateWriter& writer) {
    engine_->checkpoint(writer);
    std::string value;
    core::bytes::put_u64(value, malformed_records_);
    core::bytes::put_u32(value, static_cast<uint32_t>(counters_.size()));
    for (size_t i = 0; i < counters_.size(); ++i) {
        core::bytes::put_str(value, config_.pipelines[i].spec.name);
        core::bytes::put_u64(value, counters_[i].malformed);
        core::bytes::put_u64(value, counters_[i].fields_missing);
    }
    writer.put(counters_key_, value);
}

Result<void> Processor::restore_entry(std::string_view key, std::string_view value) {
    if (key != counters_key_) return engine_->restore_entry(key, value);
    uint32_t n;
    if (!core::bytes::get_u64(value, malformed_records_) || !core::bytes::get_u32(value, n))
        return fail("the stored decode counters are damaged");
    for (uint32_t i = 0; i < n; ++i) {
        std::string_view name;
        DecodeCounters c;
        if (!core::bytes::get_str(value, name) || !core::bytes::get_u64(value, c.malformed) ||
            !core::bytes::get_u64(value, c.fields_missing))
            return fail("the stored decode counters are damaged");
        const int index = engine_->find_pipeline(name);
        if (index >= 0) counters_[static_cast<size_t>(index)] = c;
    }
    return {};
}

Result<void> Processor::restore_finish() {
    return engine_->restore_finish();
}

int64_t Processor::newest_ingest_ms() const {
    int64_t newest = 0;
    for (uint32_t i = 0; i < engine_->pipelines().size(); ++i)
        newest = std::max(newest, engine_->stats(i).ingest_ms);
    return newest;
}

}  // namespace tidemark::firmware
