#include "adapters/codec/record.h"

#include <array>
#include <nlohmann/json.hpp>

#include "adapters/codec/json_text.h"
#include "adapters/codec/utf8.h"
#include "core/result.h"

namespace tidemark::codec {
namespace {

void append_window(std::string& out, int64_t start_ms, int64_t end_ms) {
    out += "\"window\":{\"start\":";
    append_json_integer(out, start_ms);
    out += ",\"end\":";
    append_json_integer(out, end_ms);
    out += '}';
}

// "node":...,"pipeline":..., which every record upstream begins with.
void append_origin(std::string& out, std::string_view node_id, std::string_view pipeline) {
    out += "\"node\":";
    append_json_string(out, node_id);
    out += ",\"pipeline\":";
    append_json_string(out, pipeline);
}

// An id's 16 lowercase hex digits, the way every record writes it.
std::array<char, 16> id_hex(uint64_t id) {
    static constexpr char hex[] = "0123456789abcdef";
    std::array<char, 16> digits;
    for (size_t i = 0; i < digits.size(); ++i)
        digits[i] = hex[(id >> (60 - 4 * i)) & 15];
    return digits;
}

void append_id(std::string& out, uint64_t id) {
    const std::array<char, 16> digits = id_hex(id);
    out += "\"id\":\"";
    out.append(digits.data(), digits.size());
    out += '"';
}

// `},"kind":"final","revision":` for each kind, and `,"closed_by":"watermark","values":{` for each
// closed_by, by their enums' values.
struct KindTexts {
    std::string kind[3], closed_by[4];
    KindTexts() {
        using core::ClosedBy;
        using core::EmissionKind;
        for (EmissionKind k :
             {EmissionKind::final_result, EmissionKind::update, EmissionKind::retract}) {
            std::string& t = kind[static_cast<size_t>(k)];
            t = "},\"kind\":";
            append_json_string(t, core::emission_kind_name(k));
            t += ",\"revision\":";
        }
        for (ClosedBy c : {ClosedBy::watermark, ClosedBy::idle, ClosedBy::late, ClosedBy::merge}) {
            std::string& t = closed_by[static_cast<size_t>(c)];
            t = ",\"closed_by\":";
            append_json_string(t, core::closed_by_name(c));
            t += ",\"values\":{";
        }
    }
};

const KindTexts& kind_texts() {
    static const KindTexts texts;
    return texts;
}

}  // namespace

ResultEncoder::ResultEncoder(std::string_view node_id, std::string_view pipeline,
                             std::span<const std::string> aggregate_names,
                             std::string_view version) {
    origin_ = "\",\"node\":";
    append_json_string(origin_, node_id);
    origin_ += ",\"pipeline\":";
    append_json_string(origin_, pipeline);
    if (!version.empty()) {
        origin_ += ",\"version\":";
        append_json_string(origin_, version);
    }
    origin_ += ",\"key\":";
    for (size_t i = 0; i < aggregate_names.size(); ++i) {
        std::string& name = names_.emplace_back(i ? "," : "");
        append_json_string(name, aggregate_names[i]);
        name += ':';
    }
    // The literals take 132 bytes, the id 16 and the four integers 80: 228 in all.
    bytes_max_ = 256 + JsonText::string_bytes_max(node_id) + JsonText::string_bytes_max(pipeline) +
                 JsonText::string_bytes_max(version);
    for (const std::string& name : aggregate_names)
        bytes_max_ += JsonText::string_bytes_max(name) + 2 + JsonText::number_bytes_max;
}

// Written with JsonText: a backfill encodes hundreds of thousands of these a second, and
// appended piece by piece a third of the time went to the string's checks (issue 31).
void ResultEncoder::encode(const core::Emission& e, std::string& out) const {
    TM_ASSERT(names_.size() == e.values.size());
    const KindTexts& texts = kind_texts();
    const size_t kind = static_cast<size_t>(e.kind);
    const size_t closed_by = static_cast<size_t>(e.closed_by);
    TM_ASSERT(kind < std::size(texts.kind) && closed_by < std::size(texts.closed_by));
    JsonText::write(out, bytes_max(e), [&](JsonText& j) {
        const std::array<char, 16> id = id_hex(e.id);
        j.literal("{\"id\":\"");
        j.literal({id.data(), id.size()});
        j.literal(origin_);
        j.string(e.key);
        j.literal(",\"window\":{\"start\":");
        j.integer(e.start_ms);
        j.literal(",\"end\":");
        j.integer(e.end_ms);
        j.literal(texts.kind[kind]);
        j.integer(e.revision);
        j.literal(texts.closed_by[closed_by]);
        for (size_t i = 0; i < e.values.size(); ++i) {
            j.literal(names_[i]);
            if (e.values[i]) {
                j.number(*e.values[i]);
            } else {
                j.literal("null");
            }
        }
        j.literal("},\"watermark\":");
        j.integer(e.watermark_ms);
        j.ch('}');
    });
}

size_t ResultEncoder::bytes_max(const core::Emission& e) const {
    return bytes_max_ + JsonText::string_bytes_max(e.key) +
           JsonText::string_bytes_max(core::emission_kind_name(e.kind)) +
           JsonText::string_bytes_max(core::closed_by_name(e.closed_by));
}

size_t result_bytes_max(std::string_view node_id, std::string_view pipeline,
                        std::span<const std::string> aggregate_names, const core::Emission& e,
                        std::string_view version) {
    return ResultEncoder(node_id, pipeline, aggregate_names, version).bytes_max(e);
}

void encode_result(std::string_view node_id, std::string_view pipeline,
                   std::span<const std::string> aggregate_names, const core::Emission& e,
                   std::string& out, std::string_view version) {
    ResultEncoder(node_id, pipeline, aggregate_names, version).encode(e, out);
}

void encode_late_report(std::string_view node_id, std::string_view pipeline,
                        std::string_view version, const core::LateReport& r, std::string& out) {
    out.clear();
    out += '{';
    append_id(out, r.id);
    out += ',';
    append_origin(out, node_id, pipeline);
    if (!version.empty()) {
        out += ",\"version\":";
        append_json_string(out, version);
    }
    out += ',';
    append_window(out, r.start_ms, r.end_ms);
    out += ",\"too_late\":";
    out += std::to_string(r.too_late);
    out += ",\"since_ms\":";
    append_json_integer(out, r.since_ms);
    out += ",\"as_of_ms\":";
    append_json_integer(out, r.as_of_ms);
    out += '}';
}

void encode_side_output(std::string_view node_id, std::string_view pipeline,
                        const core::SideOutput& side, std::string& out) {
    out.clear();
    out += '{';
    append_origin(out, node_id, pipeline);
    out += ",\"reason\":";
    append_json_string(out, side.reason);
    out += ",\"key\":";
    append_json_string(out, side.key);
    out += ",\"log_offset\":";
    out += std::to_string(side.order);
    out += ",\"event_ms\":";
    append_json_integer(out, side.event_ms);
    out += ",\"ingest_ms\":";
    append_json_integer(out, side.ingest_ms);
    out += ',';
    append_window(out, side.window_start_ms, side.window_end_ms);
    out += ",\"watermark\":";
    append_json_integer(out, side.watermark_ms);
    out += ",\"topic\":";
    append_json_string(out, side.topic);
    if (is_valid_utf8(side.payload)) {
        out += ",\"payload\":";
        append_json_string(out, side.payload);
    } else {
        out += ",\"payload_base64\":\"";
        append_base64(out, side.payload);
        out += '"';
    }
    out += '}';
}

// nlohmann's text, as the firmware wrote these records before they moved here: the bytes stay.
void encode_malformed_side(std::string_view node_id, std::string_view pipeline,
                           std::string_view reason, uint64_t log_offset, int64_t ingest_ms,
                           std::string& out) {
    nlohmann::json j;
    j["node"] = std::string(node_id);
    j["pipeline"] = std::string(pipeline);
    j["malformed"] = std::string(reason);
    j["offset"] = log_offset;
    j["ingest_ms"] = ingest_ms;
    out = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void side_record_columns(std::string_view record, std::string& pipeline, std::string& key) {
    const auto j = nlohmann::json::parse(record, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) return;
    if (auto it = j.find("pipeline"); it != j.end() && it->is_string())
        pipeline = it->get<std::string>();
    if (auto it = j.find("key"); it != j.end() && it->is_string()) key = it->get<std::string>();
}

}  // namespace tidemark::codec
