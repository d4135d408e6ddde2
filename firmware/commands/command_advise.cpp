// tidemark advise: lag quantiles from the retained log, and what each watermark delay would cost
// (the analysis in command_advise_analysis.cpp, its text in command_advise_text.cpp).
#include <iostream>

#include "adapters/config/config.h"
#include "firmware/adapter_options.h"
#include "firmware/commands/command_advise.h"

namespace tidemark::firmware {

int advise_command(const AdviseOptions& options) {
    auto loaded = config::load_config_file(options.config_path);
    if (!loaded) {
        std::cerr << config::format_errors(loaded.error());
        return 2;
    }
    if (!(options.target_percent > 0 && options.target_percent <= 100)) {
        std::cerr << "tidemark advise: --target " << options.target_percent
                  << " is not a percentage in (0, 100]\n";
        return 2;
    }
    const config::PipelineConfig* pipeline = nullptr;
    for (const auto& p : loaded->pipelines)
        if (p.spec.name == options.pipeline) pipeline = &p;
    if (!pipeline) {
        std::cerr << "tidemark advise: " << options.config_path << " has no pipeline named '"
                  << options.pipeline << "' (it has:";
        for (const auto& p : loaded->pipelines)
            std::cerr << " " << p.spec.name;
        std::cerr << ")\n";
        return 2;
    }
    const std::string dir = options.log_dir.empty() ? log_dir(loaded->data_dir) : options.log_dir;
    auto report = advise_log(*pipeline, dir, options.target_percent);
    if (!report) {
        std::cerr << "tidemark advise: " << report.error().message << "\n";
        return 1;
    }
    std::cout << format_advise_report(*report);
    if (report->events == 0) {
        std::cerr << "tidemark advise: no events of pipeline '" << options.pipeline << "' (topic "
                  << pipeline->topic_filter << ") in the log at " << dir
                  << ": nothing to advise on yet\n";
        return 1;
    }
    return 0;
}

}  // namespace tidemark::firmware
