// tidemark replay: any config over the retained log, read-only, beside the running service.
#include <spdlog/spdlog.h>
#include <cstdio>
#include <fstream>
#include <iostream>

#include "adapters/codec/record.h"
#include "adapters/config/config.h"
#include "adapters/log/log_reader.h"
#include "core/time_text.h"
#include "firmware/adapter_options.h"
#include "firmware/commands/command_replay.h"
#include "firmware/service/processor.h"

namespace tidemark::firmware {

namespace {

// Writes each result as one JSON line, exactly the record the live run sends upstream.
class LineSink : public ProcessorSink {
  public:
    LineSink(const config::Config& config, std::ostream& out)
        : out_(out), encoders_(result_encoders(config)) {}
    void emit(const core::Emission& e) override {
        line_.clear();
        encoders_[e.pipeline].encode(e, line_);
        line_.push_back('\n');
        out_.write(line_.data(), static_cast<std::streamsize>(line_.size()));
        ++results;
    }
    void side_output(const core::SideOutput&) override { ++side; }
    void malformed(uint32_t, const log::Record&, std::string_view) override { ++malformed_count; }
    uint64_t results = 0, side = 0, malformed_count = 0;

  private:
    std::ostream& out_;
    std::vector<codec::ResultEncoder> encoders_;  // by pipeline
    std::string line_;
};

}  // namespace

std::optional<int64_t> parse_time_ms(const std::string& text) {
    if (text.empty()) return std::nullopt;
    char* end = nullptr;
    const long long v = std::strtoll(text.c_str(), &end, 10);
    if (end && *end == '\0') return static_cast<int64_t>(v);
    // The parser the config's backfill.from and the payload codec use.
    auto t = core::parse_rfc3339_ms(text);
    if (t) return *t;
    return std::nullopt;
}

int replay_command(const ReplayOptions& options) {
    auto loaded = config::load_config_file(options.config_path);
    if (!loaded) {
        std::cerr << config::format_errors(loaded.error());
        return 2;
    }
    config::Config cfg = std::move(*loaded);
    if (!options.pipeline.empty()) {
        std::erase_if(cfg.pipelines, [&](const config::PipelineConfig& p) {
            return p.spec.name != options.pipeline;
        });
        if (cfg.pipelines.empty()) {
            std::cerr << "tidemark replay: the config has no pipeline named '" << options.pipeline
                      << "'\n";
            return 2;
        }
    }
    auto processor = Processor::create(cfg);
    if (!processor) {
        std::cerr << "tidemark replay: " << processor.error().message << "\n";
        return 2;
    }
    const std::string dir = options.log_dir.empty() ? log_dir(cfg.data_dir) : options.log_dir;
    auto reader = log::LogReader::open(dir);
    if (!reader) {
        std::cerr << "tidemark replay: " << reader.error().message << "\n";
        return 1;
    }
    std::ofstream file;
    std::ostream* out = &std::cout;
    if (options.out != "-") {
        file.open(options.out, std::ios::binary | std::ios::trunc);
        if (!file) {
            std::cerr << "tidemark replay: cannot write " << options.out << "\n";
            return 1;
        }
        out = &file;
    }
    LineSink sink(cfg, *out);
    const FeedFilter range{.from_ingest_ms = options.from_ms.value_or(INT64_MIN),
                           .to_ingest_ms = options.to_ms};
    const FeedResult fed = (*processor)->feed_until(**reader, UINT64_MAX, SIZE_MAX, sink, range);
    if (!fed.status) {
        std::cerr << "tidemark replay: " << fed.status.error().message << "\n";
        return 1;
    }
    const uint64_t records = fed.records_fed;
    out->flush();
    std::cerr << "tidemark replay: " << records << " records, " << sink.results << " results, "
              << sink.side << " too late, " << sink.malformed_count << " malformed\n";
    return *out ? 0 : 1;
}

}  // namespace tidemark::firmware
