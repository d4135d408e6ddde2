// The records that leave the process (DESIGN.md section 7): window results and side output.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/emission.h"

namespace tidemark::codec {

/// Writes `emission` as one compact JSON object into `out` (replacing its contents), keys in
/// this order: id (16 lowercase hex digits), node, pipeline, version (when `version` is not
/// empty: the pipeline's, DESIGN.md section 4), key, window {start, end}, kind,
/// revision, closed_by, values {name: number or null, in aggregate order}, watermark.
/// Byte-stable: the same emission gives the same bytes on every run and machine (numbers as
/// append_json_number). `aggregate_names` are the pipeline's aggregate names in spec order;
/// there must be one per value.
void encode_result(std::string_view node_id, std::string_view pipeline,
                   std::span<const std::string> aggregate_names, const core::Emission& emission,
                   std::string& out, std::string_view version = {});
/// encode_result for the results of one pipeline (and version): the text every one of them
/// repeats (node, pipeline, version, the aggregate names, each kind and closed_by with the
/// literals around them) is written once, here, and encode() writes the bytes encode_result
/// writes for the same arguments. A backfill encodes hundreds of thousands of results a second
/// (issue 31).
class ResultEncoder {
  public:
    ResultEncoder(std::string_view node_id, std::string_view pipeline,
                  std::span<const std::string> aggregate_names, std::string_view version = {});
    /// Replaces `out` with the emission's record; one value per aggregate name (asserted).
    void encode(const core::Emission& emission, std::string& out) const;
    /// What encode() may write for this emission at most (result_bytes_max).
    size_t bytes_max(const core::Emission& emission) const;

  private:
    std::string origin_;              // `","node":...,"pipeline":...,"version":...,"key":`
    std::vector<std::string> names_;  // `"name":`, with a ',' before each but the first
    size_t bytes_max_ = 0;            // result_bytes_max's sum but the key, kind and closed_by
};

/// What encode_result's text of these arguments may take at most: the memory it writes into.
size_t result_bytes_max(std::string_view node_id, std::string_view pipeline,
                        std::span<const std::string> aggregate_names,
                        const core::Emission& emission, std::string_view version = {});

/// Writes a window's too-late tally as one compact JSON object into `out` (replacing its
/// contents): id (16 hex digits), node, pipeline, version (when not empty), window {start,
/// end}, too_late, since_ms, as_of_ms. Byte-stable, like encode_result. No "kind": a consumer
/// never takes it for a result.
void encode_late_report(std::string_view node_id, std::string_view pipeline,
                        std::string_view version, const core::LateReport& report, std::string& out);

/// Writes a too-late event as one compact JSON object into `out` (replacing its contents):
/// node, pipeline, reason, key, log_offset, event_ms, ingest_ms, window {start, end},
/// watermark, topic, then the payload as "payload" (a JSON string) when it is valid UTF-8, or
/// as "payload_base64" when it is not.
void encode_side_output(std::string_view node_id, std::string_view pipeline,
                        const core::SideOutput& side, std::string& out);

/// Writes a log record that a pipeline could not decode as one compact JSON object into `out`
/// (replacing its contents), keys in alphabetical order: ingest_ms, malformed (the reason),
/// node, offset (the record's log offset: "offset" here, "log_offset" in encode_side_output, as
/// both were first sent), pipeline. Invalid UTF-8 in a string becomes U+FFFD.
void encode_malformed_side(std::string_view node_id, std::string_view pipeline,
                           std::string_view reason, uint64_t log_offset, int64_t ingest_ms,
                           std::string& out);

/// The pipeline and key a side record names (encode_side_output's "pipeline" and "key",
/// encode_malformed_side's "pipeline"), for rows stored before side rows had columns. Leaves
/// `pipeline` and `key` as they are where the record does not name them (or does not parse).
void side_record_columns(std::string_view record, std::string& pipeline, std::string& key);

}  // namespace tidemark::codec
