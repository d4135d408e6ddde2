#include "tests/sim/sim_config.h"

namespace tidemark::sim {
namespace {

std::string ms(int64_t v) {
    return '"' + std::to_string(v) + "ms\"";
}

// The optional aggregates, in the bit order of PipelineDef::aggregates.
struct OptionalAggregate {
    const char* name;
    const char* fn;
};
constexpr OptionalAggregate optional_aggregates[] = {
    {"s", "sum"}, {"lo", "min"}, {"hi", "max"}, {"last", "last"}, {"avg", "mean"}};

}  // namespace

std::string pipeline_json(const PipelineDef& d) {
    std::string j = R"({"name": ")" + d.name +
                    R"(", "topic": "dev/+/m", "key": "topic:1", )"
                    R"("timestamp": {"pointer": "/ts", "format": "epoch_ms"}, )"
                    R"("fields": {"v": "/v"}, )";
    if (d.partition_by_site) j += R"("partition": "/site", )";
    switch (d.window) {
        case PipelineDef::Window::tumbling:
            j += R"("window": {"type": "tumbling", "size": )" + ms(d.size_ms) +
                 ", \"offset\": " + ms(d.offset_ms) + "}, ";
            break;
        case PipelineDef::Window::hopping:
            j += R"("window": {"type": "hopping", "size": )" + ms(d.size_ms) +
                 ", \"advance\": " + ms(d.advance_ms) + "}, ";
            break;
        case PipelineDef::Window::session:
            j += R"("window": {"type": "session", "gap": )" + ms(d.gap_ms) +
                 ", \"max_duration\": " + ms(d.max_duration_ms) + "}, ";
            break;
    }
    j += R"("watermark": {"delay": )" + ms(d.delay_ms) +
         ", \"idle_timeout\": " + ms(d.idle_timeout_ms) +
         ", \"max_future\": " + ms(d.max_future_ms) + ", \"scope\": \"" +
         (d.scope_partition ? "partition" : "global") + "\"}, ";
    j += R"("late": {"allowed_lateness": )" + ms(d.lateness_ms) + ", \"too_late\": \"" +
         (d.side_output ? "side_output" : "drop") + "\", \"corrections\": \"" +
         (d.retract ? "retract" : "upsert") + "\"}, ";
    j += R"("aggregates": {"n": {"fn": "count"})";
    for (size_t i = 0; i < std::size(optional_aggregates); ++i)
        if (d.aggregates & (1 << i))
            j += std::string(", \"") + optional_aggregates[i].name + "\": {\"fn\": \"" +
                 optional_aggregates[i].fn + "\", \"field\": \"v\"}";
    j += "}, ";
    j += R"("limits": {"max_keys": )" + std::to_string(d.keys_max) +
         R"(, "max_open_windows": 20000})";
    if (d.backfill_from_age_ms)
        j += R"(, "backfill": {"from": )" + ms(*d.backfill_from_age_ms) + "}";
    return j + "}";
}

std::string config_json(const ConfigState& state, const std::string& data_dir) {
    std::string j = R"({"node_id": ")" + std::string(node_id) + R"(", "data_dir": ")" + data_dir +
                    R"(",
      "storage": {"fsync": "never", "map_size": "64MiB", "segment_size": "64KiB",
                  "log_retention": {"max_age": "30d", "max_bytes": "1GiB"}},
      "checkpoint": {"interval": "5s"},
      "source": {"uri": "tcp://127.0.0.1:1883"},
      "upstream": {"uri": "tcp://127.0.0.1:1884", "outbox": {"max_bytes": "16MiB"},
                   "compact_superseded": )" +
                    (state.compact_superseded ? "true" : "false") + R"(},
      "backfill": {"max_share": 1, "max_live_delay": "50ms"},
      "pipelines": [)";
    for (size_t i = 0; i < state.pipelines.size(); ++i)
        j += (i ? ", " : "") + pipeline_json(state.pipelines[i]);
    return j + "]}";
}

Result<config::Config> parse(const ConfigState& state, const std::string& data_dir) {
    auto c = config::parse_config(config_json(state, data_dir), "/");
    if (!c)
        return fail("the simulation wrote a config the appliance refuses: " +
                    config::format_errors(c.error()) + "\n" + config_json(state, data_dir));
    return *c;
}

std::string describe(const PipelineDef& d) {
    std::string s = d.name + ": ";
    switch (d.window) {
        case PipelineDef::Window::tumbling:
            s += "tumbling " + std::to_string(d.size_ms / 1000) + "s+" +
                 std::to_string(d.offset_ms / 1000) + "s";
            break;
        case PipelineDef::Window::hopping:
            s += "hopping " + std::to_string(d.size_ms / 1000) + "s/" +
                 std::to_string(d.advance_ms / 1000) + "s";
            break;
        case PipelineDef::Window::session:
            s += "session gap " + std::to_string(d.gap_ms / 1000) + "s max " +
                 std::to_string(d.max_duration_ms / 1000) + "s";
            break;
    }
    s += ", delay " + std::to_string(d.delay_ms / 1000) + "s, idle " +
         std::to_string(d.idle_timeout_ms / 1000) + "s, max_future " +
         std::to_string(d.max_future_ms / 1000) + "s, " +
         (d.scope_partition ? "scope partition" : "scope global") +
         (d.partition_by_site ? " by site" : "") + ", lateness " +
         std::to_string(d.lateness_ms / 1000) + "s" + (d.side_output ? " side_output" : "") +
         (d.retract ? ", retract" : ", upsert") + ", aggregates " + std::to_string(d.aggregates);
    if (d.backfill_from_age_ms)
        s += ", backfill.from " + std::to_string(*d.backfill_from_age_ms / 1000) + "s";
    return s;
}

}  // namespace tidemark::sim
