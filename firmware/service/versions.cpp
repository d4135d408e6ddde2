#include "firmware/service/versions.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "adapters/lmdb/store.h"
#include "core/bytes.h"
#include "core/hash.h"

namespace tidemark::firmware {

namespace bytes = core::bytes;

namespace {
// 2 added switch_ms after since_ms; 3 an entry's backfill hold (seq, offset) and the runs
// (ran, ran_saturated, runs_numbered) after the entries. 1 and 2 are read: switch_ms 0, and every
// version their entries name taken as run.
constexpr uint8_t registry_encoding = 3;

uint64_t ran_key(std::string_view pipeline, std::string_view version) {
    namespace hash = core::hash;
    const uint64_t h = hash::fnv1a_str(hash::fnv1a_str(hash::fnv_offset, pipeline), version);
    return hash::mix(h);
}

// The definition's hash of a run label: what comes before the run number.
std::string_view version_of_label(std::string_view label) {
    return label.substr(0, label.find('.'));
}

void note_run(VersionRegistry& r, std::string_view pipeline, std::string_view label) {
    if (label.empty() || r.ran_saturated) return;
    const uint64_t k = ran_key(pipeline, version_of_label(label));
    auto it = std::lower_bound(r.ran.begin(), r.ran.end(), k);
    if (it != r.ran.end() && *it == k) return;
    if (r.ran.size() >= VersionRegistry::ran_max) {
        r.ran_saturated = true;
        return;
    }
    r.ran.insert(it, k);
}

}  // namespace

bool is_run_of(std::string_view label, std::string_view version) {
    return !label.empty() && version_of_label(label) == version;
}

std::string VersionRegistry::start_run(std::string_view pipeline, std::string_view version) {
    TM_ASSERT(!version.empty() && version.find('.') == std::string_view::npos);
    const bool ran_before =
        ran_saturated || std::binary_search(ran.begin(), ran.end(), ran_key(pipeline, version));
    note_run(*this, pipeline, version);
    if (!ran_before) return std::string(version);
    return std::string(version) + "." + std::to_string(++runs_numbered);
}

VersionEntry* VersionRegistry::find(std::string_view name) {
    auto it = std::find_if(entries.begin(), entries.end(),
                           [&](const VersionEntry& e) { return e.name == name; });
    return it == entries.end() ? nullptr : &*it;
}

const VersionEntry* VersionRegistry::find(std::string_view name) const {
    return const_cast<VersionRegistry*>(this)->find(name);
}

VersionEntry& VersionRegistry::get(std::string_view name) {
    if (VersionEntry* e = find(name)) return *e;
    entries.push_back(VersionEntry{});
    entries.back().name = std::string(name);
    return entries.back();
}

void VersionRegistry::remove(std::string_view name) {
    std::erase_if(entries, [&](const VersionEntry& e) { return e.name == name; });
}

std::string VersionRegistry::encode() const {
    std::string out;
    out.push_back(static_cast<char>(registry_encoding));
    bytes::put_u32(out, static_cast<uint32_t>(entries.size()));
    for (const VersionEntry& e : entries) {
        for (const std::string* s : {&e.name, &e.live_version, &e.live_definition, &e.previous,
                                     &e.backfill_version, &e.backfill_definition})
            bytes::put_str(out, *s);
        bytes::put_i64(out, e.since_ms);
        bytes::put_i64(out, e.switch_ms);
        out.push_back(e.record_pending ? 1 : 0);
        bytes::put_u64(out, e.backfill_offset);
        bytes::put_i64(out, e.backfill_from_ms);
        bytes::put_i64(out, e.backfill_since_ms);
        bytes::put_u64(out, e.backfill_hold_seq);
        bytes::put_u64(out, e.backfill_hold_offset);
    }
    bytes::put_u32(out, static_cast<uint32_t>(ran.size()));
    for (const uint64_t k : ran)
        bytes::put_u64(out, k);
    out.push_back(ran_saturated ? 1 : 0);
    bytes::put_u64(out, runs_numbered);
    return out;
}

Result<VersionRegistry> VersionRegistry::decode(std::string_view in) {
    const auto damaged = [] { return fail("the stored pipeline versions are damaged"); };
    VersionRegistry r;
    uint32_t n = 0;
    if (in.empty()) return damaged();
    const auto encoding = static_cast<uint8_t>(in[0]);
    if (encoding < 1 || encoding > registry_encoding) return damaged();
    in.remove_prefix(1);
    if (!bytes::get_u32(in, n) || n > 4096) return damaged();
    for (uint32_t i = 0; i < n; ++i) {
        VersionEntry e;
        for (std::string* s : {&e.name, &e.live_version, &e.live_definition, &e.previous,
                               &e.backfill_version, &e.backfill_definition}) {
            std::string_view v;
            if (!bytes::get_str(in, v)) return damaged();
            *s = std::string(v);
        }
        if (!bytes::get_i64(in, e.since_ms)) return damaged();
        if (encoding >= 2 && !bytes::get_i64(in, e.switch_ms)) return damaged();
        if (in.empty() || static_cast<uint8_t>(in[0]) > 1) return damaged();
        e.record_pending = in[0] != 0;
        in.remove_prefix(1);
        if (!bytes::get_u64(in, e.backfill_offset) || !bytes::get_i64(in, e.backfill_from_ms) ||
            !bytes::get_i64(in, e.backfill_since_ms))
            return damaged();
        if (encoding >= 3 && (!bytes::get_u64(in, e.backfill_hold_seq) ||
                              !bytes::get_u64(in, e.backfill_hold_offset)))
            return damaged();
        r.entries.push_back(std::move(e));
    }
    if (encoding >= 3) {
        uint32_t ran = 0;
        if (!bytes::get_u32(in, ran) || ran > ran_max) return damaged();
        r.ran.resize(ran);
        for (uint64_t& k : r.ran)
            if (!bytes::get_u64(in, k)) return damaged();
        if (!std::is_sorted(r.ran.begin(), r.ran.end()) ||
            std::adjacent_find(r.ran.begin(), r.ran.end()) != r.ran.end() || in.empty() ||
            static_cast<uint8_t>(in[0]) > 1)
            return damaged();
        r.ran_saturated = in[0] != 0;
        in.remove_prefix(1);
        if (!bytes::get_u64(in, r.runs_numbered)) return damaged();
    } else {
        for (const VersionEntry& e : r.entries) {
            note_run(r, e.name, e.live_version);
            note_run(r, e.name, e.backfill_version);
        }
    }
    if (!in.empty()) return damaged();
    return r;
}

Result<std::optional<VersionRegistry>> read_registry(lmdb::Store& store) {
    auto stored = store.get_state(versions_key);
    if (!stored) return fail("reading the pipeline versions: " + stored.error().message);
    if (!*stored) return std::optional<VersionRegistry>{};
    auto decoded = VersionRegistry::decode(**stored);
    if (!decoded) return std::unexpected(decoded.error());
    return std::optional<VersionRegistry>{std::move(*decoded)};
}

std::string backfill_state_name(std::string_view pipeline, std::string_view version) {
    return std::string(pipeline) + "@" + std::string(version);
}

std::string version_record_json(std::string_view node, const VersionEntry& e) {
    nlohmann::ordered_json j;
    j["node"] = node;
    j["pipeline"] = e.name;
    j["version"] = e.live_version;
    j["since_ms"] = e.since_ms;
    j["previous"] =
        e.previous.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(e.previous);
    j["switch_ms"] = e.switch_ms;
    // The definition was written by this build's config reader: an object of aggregates, each
    // with its "fn". Anything else would be a store this version's state could not restore.
    auto& aggregates = j["aggregates"] = nlohmann::ordered_json::object();
    const auto definition = nlohmann::ordered_json::parse(e.live_definition, nullptr, false);
    if (definition.is_object() && definition.contains("aggregates") &&
        definition["aggregates"].is_object())
        for (const auto& [name, aggregate] : definition["aggregates"].items())
            if (aggregate.is_object() && aggregate.contains("fn") && aggregate["fn"].is_string())
                aggregates[name] = aggregate["fn"];
    return j.dump();
}

uint64_t version_record_id(std::string_view node, std::string_view pipeline,
                           std::string_view version) {
    namespace hash = core::hash;
    uint64_t h = hash::fnv1a_str(hash::fnv_offset, "version-record");
    h = hash::fnv1a_str(h, node);
    h = hash::fnv1a_str(h, pipeline);
    return hash::mix(hash::fnv1a_str(h, version));
}

}  // namespace tidemark::firmware
