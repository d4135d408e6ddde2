#include "tests/sim/sim_expect.h"

#include <cmath>

namespace tidemark::sim {
namespace {

// docs/CONFIG.md: a key or partition part of more than 256 bytes is refused (bad_key), an
// empty one too (missing_key).
constexpr size_t key_bytes_max = 256;

std::string number(double v) {
    if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<int64_t>(v));
    return std::to_string(v);
}

}  // namespace

std::string text(const Result& r) {
    std::string key = r.key.size() > 24
                          ? r.key.substr(0, 12) + "...(" + std::to_string(r.key.size()) + " bytes)"
                          : r.key;
    std::string out = r.kind + " rev " + std::to_string(r.revision) + " " + key + " [" +
                      std::to_string(r.start_ms) + "," + std::to_string(r.end_ms) + ") " +
                      r.closed_by + " wm " + std::to_string(r.watermark_ms) + " values";
    for (const auto& v : r.values)
        out += " " + (v ? number(*v) : std::string("null"));
    return out;
}

Result from_emission(const core::Emission& e) {
    Result r;
    r.key = e.key;
    r.start_ms = e.start_ms;
    r.end_ms = e.end_ms;
    r.kind = std::string(core::emission_kind_name(e.kind));
    r.revision = e.revision;
    r.closed_by = std::string(core::closed_by_name(e.closed_by));
    r.values = e.values;
    r.watermark_ms = e.watermark_ms;
    return r;
}

Expected expect(const Scenario& s, const Recording& rec, const Run& run, int silent_device) {
    Expected x;
    x.run = &run;
    const PipelineDef& def = run.candidate.def;
    model::ReferenceModel m(node_id, run.candidate.config.spec);
    const uint64_t end = run.end_offset == offset_open ? rec.end_of_log : run.end_offset;
    int64_t since = INT64_MAX;
    bool live = false;
    for (const LogEntry& e : rec.log) {
        if (e.offset < run.start_offset || e.offset >= end) continue;
        if (!live && e.offset >= run.live_from) {
            live = true;
            x.results_before_live = m.emissions.size();
        }
        if (e.offset < run.live_from) x.switch_ms = e.ingest_ms;
        if (e.ingest_ms < run.from_ms) continue;  // backfill.from: not read at all
        model::Record r;
        r.tick = true;
        r.ingest_ms = e.ingest_ms;
        r.order = e.offset;
        if (!e.tick) {
            const Message& msg = s.messages[static_cast<size_t>(e.message)];
            const Device& d = s.devices[static_cast<size_t>(msg.device)];
            // The topic filter dev/+/m; a device turned silent sends nothing.
            if (msg.shape != Message::Shape::other_topic && msg.device != silent_device) {
                const bool decodes =
                    msg.shape == Message::Shape::ok && !d.name.empty() &&
                    d.name.size() <= key_bytes_max &&
                    (!def.partition_by_site || (!d.site.empty() && d.site.size() <= key_bytes_max));
                if (!decodes) {
                    ++x.malformed;
                } else {
                    r.tick = false;
                    r.key = d.name;
                    r.partition = def.partition_by_site ? d.site : "";
                    r.event_ms = msg.event_ms;
                    r.fields = {static_cast<double>(msg.value)};
                    if (e.offset < run.live_from) since = std::min(since, msg.event_ms);
                    const std::string partition = def.partition_by_site ? d.site : d.name;
                    const std::string key = !def.scope_partition || partition == d.name
                                                ? d.name
                                                : model::escape_key_part(partition) + "|" +
                                                      model::escape_key_part(d.name);
                    x.partition_of[key] = partition;
                    x.device_of[key] = msg.device;
                    // DESIGN bounds each part, not the whole; whether the appliance refuses a
                    // longer composite or takes it (then it must still checkpoint) is its
                    // choice: such keys are left out of the comparisons.
                    if (key.size() > key_bytes_max) x.ambiguous.insert(key);
                }
            }
        }
        m.step(r);
    }
    x.since_ms = since == INT64_MAX ? 0 : since;
    if (!live) x.results_before_live = m.emissions.size();
    for (const core::Emission& e : m.emissions)
        x.results.push_back(from_emission(e));
    x.stats = m.stats;
    return x;
}

int most_skewed_device(const Scenario& s, const Recording& rec, const Run& run) {
    int best = -1;
    const uint64_t end = run.end_offset == offset_open ? rec.end_of_log : run.end_offset;
    for (const LogEntry& e : rec.log) {
        if (e.tick || e.offset < run.start_offset || e.offset >= end) continue;
        const int d = s.messages[static_cast<size_t>(e.message)].device;
        if (best < 0 || s.devices[static_cast<size_t>(d)].skew_ms >
                            s.devices[static_cast<size_t>(best)].skew_ms)
            best = d;
    }
    return best;
}

}  // namespace tidemark::sim
