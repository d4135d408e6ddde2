// Any bytes as the config file: the reader and checker never crash or hang, every refusal
// says something, and a config that passes (what `check-config` runs) starts: every pipeline's
// engine and decoder are built and take a record.
#include <cstdint>
#include <string_view>

#include "adapters/config/config.h"
#include "adapters/log/record.h"
#include "firmware/service/processor.h"
#include "fuzz_input.h"

namespace {

using namespace tidemark;

class DiscardSink : public firmware::ProcessorSink {
  public:
    void emit(const core::Emission&) override {}
    void side_output(const core::SideOutput&) override {}
    void malformed(uint32_t, const log::Record&, std::string_view) override {}
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    // Relative file names (password_file, TLS files) resolve below a directory that does not
    // exist: the fuzzer must not read the host's files.
    auto loaded = config::parse_config(text, "/nonexistent/tidemark-fuzz");
    if (!loaded) {
        TM_FUZZ_CHECK(!loaded.error().empty());
        TM_FUZZ_CHECK(!config::format_errors(loaded.error()).empty());
        return 0;
    }
    auto processor = firmware::Processor::create(*loaded);
    TM_FUZZ_CHECK(processor.has_value());
    DiscardSink sink;
    log::Record record;
    record.type = log::RecordType::message;
    record.ingest_ms = 1'700'000'000'000;
    record.topic = "sensors/a/temp";
    record.payload = R"({"ts":1700000000000,"value":1.5,"device":"a"})";
    (*processor)->feed(record, sink);
    record.type = log::RecordType::tick;
    record.ingest_ms += 3'600'000;
    record.topic = {};
    record.payload = {};
    (*processor)->feed(record, sink);
    return 0;
}
