// ServiceParts: a config read again on SIGHUP, and what of it applies without a restart.
#include <spdlog/spdlog.h>

#include "firmware/notify.h"
#include "firmware/service/service_parts_impl.h"

namespace tidemark::firmware {

// A config that fails check-config changes nothing; one that changes what only a restart can
// change (where data lives, which brokers) neither. Everything else applies now: log_level,
// backfill settings, and pipelines through versions (EngineHost::reconfigure).
bool ServiceParts::reload(const std::string& config_path, Notifier& notifier) {
    notifier.reloading();
    Impl& m = *impl_;
    ReloadFigures outcome;
    outcome.time_ms = m.clock.wall_ms();
    const auto refuse = [&](const std::string& status) {
        for (const std::string& e : outcome.errors)
            spdlog::error("reload refused, the running config stays: {}", e);
        notifier.status(status);
        notifier.ready();
        m.last_reload = std::move(outcome);
        return false;
    };
    auto loaded = config::load_config_file(config_path);
    if (!loaded) {
        for (const config::ConfigError& e : loaded.error())
            outcome.errors.push_back((e.pointer.empty() ? "(config)" : e.pointer) + ": " +
                                     e.message);
        return refuse("reload refused: the new config has errors (see the journal)");
    }
    const config::Config& now = m.config;
    std::vector<std::string> needs_restart;
    if (loaded->node_id != now.node_id) needs_restart.push_back("/node_id");
    if (loaded->data_dir != now.data_dir) needs_restart.push_back("/data_dir");
    if (loaded->source.uri != now.source.uri || loaded->source.client_id != now.source.client_id)
        needs_restart.push_back("/source");
    if (loaded->upstream.has_value() != now.upstream.has_value() ||
        (loaded->upstream && (loaded->upstream->uri != now.upstream->uri ||
                              loaded->upstream->client_id != now.upstream->client_id ||
                              loaded->upstream->topic != now.upstream->topic)))
        needs_restart.push_back("/upstream");
    for (const std::string& p : needs_restart)
        outcome.errors.push_back(p +
                                 ": changed; this needs a restart (systemctl restart "
                                 "tidemark)");
    if (!needs_restart.empty()) return refuse("reload refused: a restart is needed");
    if (auto ok = m.host->reconfigure(*loaded); !ok) {
        outcome.errors.push_back("(config): " + ok.error().message);
        return refuse("reload refused: " + ok.error().message);
    }
    spdlog::set_level(spdlog::level::from_str(loaded->log_level));
    m.config.log_level = loaded->log_level;
    m.config.backfill = loaded->backfill;
    m.config.pipelines = loaded->pipelines;
    spdlog::info("reload: applied ({} pipelines)", m.config.pipelines.size());
    outcome.ok = true;
    m.last_reload = std::move(outcome);
    notifier.status("reloaded");
    notifier.ready();
    return true;
}

}  // namespace tidemark::firmware
