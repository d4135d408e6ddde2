// tidemark inspect: the log, the checkpointed state, the outbox and the side output, read-only,
// beside the running service. Figures are gathered here into one JSON object; the text form is
// rendered from it (command_inspect_text.cpp), so that both say the same. The one write,
// --drop-pipeline, is command_inspect_drop.cpp's.
#include <sys/stat.h>
#include <deque>
#include <iostream>
#include <nlohmann/json.hpp>

#include "adapters/config/config.h"
#include "adapters/lmdb/store.h"
#include "adapters/log/log_reader.h"
#include "adapters/log/segment_files.h"
#include "core/emission.h"
#include "firmware/adapter_options.h"
#include "firmware/commands/command_inspect.h"
#include "firmware/commands/command_inspect_text.h"
#include "firmware/service/health_report.h"
#include "firmware/service/processor.h"
#include "firmware/service/version_plan.h"
#include "firmware/service/versions.h"

namespace tidemark::firmware {

namespace {

using json = nlohmann::ordered_json;

constexpr size_t outbox_rows_shown_max = 5;
constexpr size_t side_rows_shown_max = 5;
constexpr size_t side_page_rows = 1024;
// The side output is bounded by side_bytes_max; this bounds the walk to its newest rows as well.
constexpr uint64_t side_rows_scanned_max = 1'000'000;

bool is_directory(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

json inspect_log(const std::string& dir, std::optional<uint64_t> checkpoint_offset) {
    json j;
    j["dir"] = dir;
    if (!is_directory(dir)) {
        j["present"] = false;
        return j;
    }
    j["present"] = true;
    auto segments = log::list_segments(dir);
    if (!segments) {
        j["error"] = segments.error().message;
        return j;
    }
    uint64_t bytes = 0;
    uint64_t disk_bytes = 0;
    uint64_t compressed = 0;
    for (const auto& s : *segments) {
        bytes += s.bytes;
        disk_bytes += s.disk_bytes;
        compressed += s.compressed ? 1 : 0;
    }
    j["segments"] = segments->size();
    j["compressed_segments"] = compressed;
    j["bytes"] = bytes;            // frame bytes: the offsets the log covers
    j["disk_bytes"] = disk_bytes;  // what its files take (blocks allocated; what retention counts)
    if (segments->empty()) return j;
    const uint64_t end = segments->back().first_offset + segments->back().bytes;
    j["first_offset"] = segments->front().first_offset;
    j["end_offset"] = end;

    auto reader = log::LogReader::open(dir);
    if (!reader) {
        j["error"] = reader.error().message;
        return j;
    }
    const bool count = bytes <= inspect_log_count_bytes_max;
    j["counted"] = count;
    uint64_t by_type[4] = {0, 0, 0, 0};
    uint64_t after_checkpoint = 0;
    std::optional<int64_t> oldest_ms, newest_ms;
    log::Record rec;
    auto scan = [&](bool all) -> Result<void> {
        for (;;) {
            auto next = (*reader)->next(rec, end);
            if (!next) return std::unexpected(next.error());
            if (!*next) return {};
            if (!oldest_ms) oldest_ms = rec.ingest_ms;
            newest_ms = rec.ingest_ms;
            if (count) {
                ++by_type[std::min<size_t>(static_cast<size_t>(rec.type), 3)];
                if (checkpoint_offset && rec.offset >= *checkpoint_offset) ++after_checkpoint;
            }
            if (!all) return {};
        }
    };
    Result<void> scanned = scan(count);
    if (scanned && !count && segments->size() > 1) {
        // The newest ingest time is in the newest segment: read only that one.
        if (auto ok = (*reader)->seek(segments->back().first_offset); !ok)
            scanned = ok;
        else
            scanned = scan(true);
    } else if (scanned && !count) {
        scanned = scan(true);
    }
    if (!scanned) j["error"] = scanned.error().message;
    if (oldest_ms) j["oldest_ingest_ms"] = *oldest_ms;
    if (newest_ms) j["newest_ingest_ms"] = *newest_ms;
    if (count) {
        j["records"] = {{"message", by_type[1]},
                        {"tick", by_type[2]},
                        {"malformed", by_type[3]},
                        {"total", by_type[1] + by_type[2] + by_type[3]}};
        if (checkpoint_offset) j["records_after_checkpoint"] = after_checkpoint;
    }
    return j;
}

// A pipeline's figures under the names health publishes them (health_report.h), after its name;
// inspect adds the newest ingest time the restored state has seen.
json pipeline_stats(const std::string& name, const core::PipelineStats& s,
                    const DecodeCounters& d) {
    json j{{"name", name}};
    j.update(json::parse(pipeline_report_json(s, d)));
    j["ingest_ms"] = s.ingest_ms;
    return j;
}

// The config's versions against the store's (version_plan.h).
json versions_section(const std::vector<VersionPlan>& plan) {
    json list = json::array();
    for (const VersionPlan& v : plan)
        list.push_back(
            {{"name", v.pipeline},
             {"version", v.version},
             {"live_version", v.live_version.empty() ? json(nullptr) : json(v.live_version)},
             {"backfill", v.backfill},
             {"resumes", v.resumes},
             {"from_offset", v.from_offset},
             {"records", v.records}});
    return list;
}

// Restores the stored state of the config's live versions into a fresh processor, as recovery
// would; pipelines that would backfill are listed under "versions" only.
json inspect_pipelines(const config::Config& config, lmdb::Store& store,
                       const std::string& log_dir) {
    json j = json::object();
    auto plan = read_version_plan(config, store, log_dir);
    if (!plan) {
        j["error"] = plan.error().message;
        return j;
    }
    j["versions"] = versions_section(*plan);
    auto processor = Processor::create(live_view(config, *plan));
    if (!processor) {
        j["error"] = processor.error().message;
        return j;
    }
    auto loaded = store.for_each_state([&](std::string_view k, std::string_view v) -> Result<void> {
        // The registry, other processors' counters and other versions' state are not this
        // processor's.
        const auto state_name = core::Engine::pipeline_of_state_key(k);
        if (state_name ? (*processor)->engine().find_pipeline(*state_name) < 0
                       : k != (*processor)->counters_key())
            return {};
        return (*processor)->restore_entry(k, v);
    });
    if (!loaded) {
        j["error"] =
            "the stored state does not restore under this config: " + loaded.error().message;
        return j;
    }
    if (auto ok = (*processor)->restore_finish(); !ok) {
        j["error"] = "the stored state does not restore under this config: " + ok.error().message;
        return j;
    }
    core::Engine& engine = (*processor)->engine();
    json list = json::array();
    for (uint32_t i = 0; i < engine.pipelines().size(); ++i) {
        list.push_back(pipeline_stats(engine.pipelines()[i].name, engine.stats(i),
                                      (*processor)->decode_counters()[i]));
        list.back()["version"] = engine.pipelines()[i].version;
    }
    j["list"] = std::move(list);
    j["malformed_records"] = (*processor)->malformed_records();
    return j;
}

json inspect_outbox(lmdb::Store& store, int64_t now_ms) {
    json j;
    auto stats = store.outbox_stats();
    if (!stats) {
        j["error"] = stats.error().message;
        return j;
    }
    j = json::parse(outbox_report_json(*stats, now_ms));
    j["seq_next"] = stats->seq_next;
    json rows = json::array();
    if (stats->rows) {
        auto peek = store.outbox_peek(stats->oldest_seq, outbox_rows_shown_max);
        if (!peek)
            j["error"] = peek.error().message;
        else
            for (const lmdb::OutboxRow& r : *peek)
                rows.push_back(
                    {{"seq", r.seq},
                     {"pipeline", r.pipeline},
                     {"key", r.key},
                     {"window", {{"start", r.window_start_ms}, {"end", r.window_end_ms}}},
                     {"kind", r.health_record    ? std::string_view("health")
                              : r.version_record ? std::string_view("version")
                                                 : core::emission_kind_name(r.kind)},
                     {"revision", r.revision},
                     {"payload_bytes", r.payload.size()}});
    }
    j["first_rows"] = std::move(rows);
    return j;
}

json inspect_side(lmdb::Store& store) {
    json j;
    auto stats = store.side_stats();
    if (!stats) {
        j["error"] = stats.error().message;
        return j;
    }
    j = json::parse(side_report_json(*stats));
    std::deque<lmdb::SideRow> latest;
    uint64_t from = 0, scanned = 0;
    bool walked = false;  // to the end, or to an error
    while (scanned < side_rows_scanned_max) {
        auto page = store.side_peek(from, side_page_rows);
        if (!page) {
            j["error"] = page.error().message;
            walked = true;
            break;
        }
        for (auto& r : *page) {
            latest.push_back(std::move(r));
            if (latest.size() > side_rows_shown_max) latest.pop_front();
        }
        scanned += page->size();
        walked = page->size() < side_page_rows;
        if (walked) break;
        from = page->back().seq + 1;
    }
    // The bound was hit: the rows shown are not the newest, and the output says so.
    if (!walked) j["latest_scan_stopped_rows"] = scanned;
    json rows = json::array();
    for (const lmdb::SideRow& r : latest) {
        json row{{"seq", r.seq}};
        const json parsed = json::parse(r.record, nullptr, false);
        if (parsed.is_object()) {
            if (parsed.contains("pipeline")) row["pipeline"] = parsed["pipeline"];
            if (parsed.contains("reason"))
                row["reason"] = parsed["reason"];
            else if (parsed.contains("malformed"))
                row["reason"] = "malformed: " + parsed["malformed"].get<std::string>();
            if (parsed.contains("key")) row["key"] = parsed["key"];
            if (parsed.contains("ingest_ms")) row["ingest_ms"] = parsed["ingest_ms"];
        } else {
            row["reason"] = "(not JSON)";
        }
        rows.push_back(std::move(row));
    }
    j["latest"] = std::move(rows);
    return j;
}

// The state store, opened read-only beside the running service (never writes, never takes its
// write lock), with its section of the report and why the report may be empty.
struct StoreView {
    std::unique_ptr<lmdb::Store> store;
    std::optional<lmdb::CheckpointMeta> checkpoint;
    json section;
    std::string empty_reason;
};

StoreView open_store(const std::string& data_dir, const std::optional<config::Config>& config) {
    StoreView v;
    const lmdb::StoreOptions so =
        command_store_options(data_dir, config ? &*config : nullptr, /*read_only=*/true);
    v.section["dir"] = so.dir;
    auto opened = lmdb::Store::open(so);
    if (!opened) {
        v.section["error"] = opened.error().message;
        v.empty_reason =
            opened.error().code == lmdb::errc::not_found
                ? "no state store in " + so.dir + " (the service has not run here yet)"
                : "the state store in " + so.dir + " cannot be read: " + opened.error().message;
        return v;
    }
    v.store = std::move(*opened);
    auto cp = v.store->load_checkpoint();
    if (!cp)
        v.section["error"] = cp.error().message;
    else
        v.checkpoint = *cp;
    return v;
}

// The checkpoint's age and how far it is behind the log's end (from inspect_log's figures).
json checkpoint_section(const lmdb::CheckpointMeta& cp, int64_t now_ms, const json& log) {
    json c{{"checkpoint_ms", cp.checkpoint_ms},
           {"age_ms", now_ms - cp.checkpoint_ms},
           {"log_offset", cp.log_offset},
           {"outbox_seq_next", cp.outbox_seq_next}};
    if (log.contains("end_offset")) {
        const uint64_t end = log["end_offset"].get<uint64_t>();
        c["behind_bytes"] = end > cp.log_offset ? end - cp.log_offset : 0;
    }
    if (log.contains("records_after_checkpoint"))
        c["behind_records"] = log["records_after_checkpoint"];
    return c;
}

void add_state_figures(StoreView& v, int64_t now_ms, const json& log) {
    if (v.checkpoint)
        v.section["checkpoint"] = checkpoint_section(*v.checkpoint, now_ms, log);
    else
        v.section["checkpoint"] = nullptr;
    uint64_t entries = 0, bytes = 0;
    auto counted =
        v.store->for_each_state([&](std::string_view k, std::string_view val) -> Result<void> {
            ++entries;
            bytes += k.size() + val.size();
            return {};
        });
    if (counted) {
        v.section["state_entries"] = entries;
        v.section["state_bytes"] = bytes;
    }
    if (auto used = v.store->map_used_bytes()) v.section["map_used_bytes"] = *used;
}

// The whole report; "empty" says why there is nothing to show, when there is not.
json inspect_report(const std::string& data_dir, const std::optional<config::Config>& config,
                    int64_t now_ms) {
    json j;
    j["data_dir"] = data_dir;
    j["now_ms"] = now_ms;
    StoreView v = open_store(data_dir, config);
    j["log"] = inspect_log(
        log_dir(data_dir),
        v.checkpoint ? std::optional<uint64_t>(v.checkpoint->log_offset) : std::nullopt);
    if (v.store) add_state_figures(v, now_ms, j["log"]);
    j["store"] = std::move(v.section);
    if (v.store) {
        if (config) j["pipelines"] = inspect_pipelines(*config, *v.store, log_dir(data_dir));
        j["outbox"] = inspect_outbox(*v.store, now_ms);
        j["side"] = inspect_side(*v.store);
        const bool no_rows = j["outbox"].value("rows", uint64_t{0}) == 0 &&
                             j["side"].value("rows", uint64_t{0}) == 0;
        if (!v.checkpoint && no_rows)
            v.empty_reason = "the state store in " + data_dir +
                             "/state is empty: no checkpoint, no outbox or side rows (the "
                             "service has not checkpointed yet)";
    }
    if (!v.empty_reason.empty()) j["empty"] = v.empty_reason;
    return j;
}

}  // namespace

int inspect_command(const InspectOptions& options, const core::Clock& clock) {
    std::optional<config::Config> config;
    if (!options.config_path.empty()) {
        auto loaded = config::load_config_file(options.config_path);
        if (!loaded) {
            std::cerr << config::format_errors(loaded.error());
            return 2;
        }
        config = std::move(*loaded);
    }
    if (!config && options.data_dir.empty()) {
        std::cerr << "tidemark inspect: pass --config FILE or --data-dir DIR\n";
        return 2;
    }
    const std::string data_dir = options.data_dir.empty() ? config->data_dir : options.data_dir;
    if (!is_directory(data_dir)) {
        std::cerr << "tidemark inspect: the data directory " << data_dir
                  << " does not exist (check data_dir in the config, or --data-dir; has the "
                     "service run here?)\n";
        return 1;
    }
    if (!options.drop_pipeline.empty())
        return drop_pipeline(data_dir, config, options.drop_pipeline);

    const json j = inspect_report(data_dir, config, clock.wall_ms());
    if (options.json)
        std::cout << j.dump() << "\n";
    else
        print_inspect_text(j.dump(-1, ' ', false, json::error_handler_t::replace), std::cout);
    std::cout.flush();
    if (j.contains("empty")) {
        std::cerr << "tidemark inspect: " << j["empty"].get<std::string>() << "\n";
        return 1;
    }
    return 0;
}

}  // namespace tidemark::firmware
