#include "firmware/service/backfill.h"

#include <algorithm>

#include "firmware/service/versions.h"

namespace tidemark::firmware {

namespace {
// The steady clock is read once per this many records: a record costs about a microsecond, so
// a deadline is overrun by well under a millisecond.
constexpr size_t deadline_check_records = 256;
}  // namespace

Result<std::unique_ptr<BackfillRun>> BackfillRun::create(const config::Config& base,
                                                         const config::PipelineConfig& pipeline,
                                                         const std::string& log_dir,
                                                         uint64_t offset, int64_t from_ms) {
    std::unique_ptr<BackfillRun> run(new BackfillRun());
    run->pipeline_ = pipeline;
    run->config_.node_id = base.node_id;
    run->config_.pipelines.push_back(pipeline);
    const std::string state_name = backfill_state_name(pipeline.spec.name, pipeline.spec.version);
    run->config_.pipelines[0].spec.state_name = state_name;
    auto processor = Processor::create(run->config_, state_name);
    if (!processor) return std::unexpected(processor.error());
    run->processor_ = std::move(*processor);
    run->sink_ = std::make_unique<BatchSink>(run->config_);
    auto reader = log::LogReader::open(log_dir);
    if (!reader) return std::unexpected(reader.error());
    run->reader_ = std::move(*reader);
    if (auto ok = run->reader_->seek(offset); !ok) return std::unexpected(ok.error());
    run->offset_ = offset;
    run->first_offset_ = offset;
    run->from_ms_ = from_ms;
    return run;
}

Result<size_t> BackfillRun::step(uint64_t end, size_t records_max, int64_t deadline_ms,
                                 const core::Clock& clock) {
    const int64_t t0 = clock.steady_ms();
    const FeedFilter from{.from_ingest_ms = from_ms_, .to_ingest_ms = std::nullopt};
    size_t n = 0;
    while (n < records_max && offset_ < end) {
        // The clock is read before every record n with n % deadline_check_records ==
        // deadline_check_records - 1, and the records between two reads go in one feed.
        if (n % deadline_check_records == deadline_check_records - 1 &&
            clock.steady_ms() >= deadline_ms)
            break;
        const size_t chunk =
            std::min(records_max - n, deadline_check_records - (n + 1) % deadline_check_records);
        const FeedResult fed = processor_->feed_until(*reader_, end, chunk, *sink_, from);
        if (fed.records_read > 0) offset_ = fed.next_offset;
        n += fed.records_read;
        if (!fed.status) return std::unexpected(fed.status.error());
        if (fed.records_read < chunk) break;  // the end of what is written
    }
    since_ms_ = std::min(since_ms_, processor_->min_event_ms(0));
    if (started_ms_ == 0) started_ms_ = t0;
    records_ += n;
    return n;
}

}  // namespace tidemark::firmware
