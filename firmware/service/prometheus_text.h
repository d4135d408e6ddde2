// The health record in Prometheus's text exposition format, for node_exporter's textfile
// collector (health.prometheus_textfile; Debian's prometheus-node-exporter reads
// /var/lib/prometheus/node-exporter/*.prom). One source of figures: the text is rendered from the
// health record itself, so the file and the health topic never say different things.
#pragma once

#include <string>
#include <string_view>

#include "core/result.h"

namespace tidemark::firmware {

/// Operation: the figures of a health record (health_record_json's text) under Prometheus's
/// names: `tidemark_` prefix, base units in the name (`_seconds`, `_bytes`), counters ending in
/// `_total`, every sample labelled with the node (`node="gw-1"`), per-pipeline figures with
/// `pipeline="..."`, emissions with `kind`, each active alarm as `tidemark_alarm{alarm="..."} 1`.
/// A figure the record does not hold (null, or absent in this build) is left out. An error
/// only when the text is not a health record (not a JSON object).
/// Limits: the text grows with the pipelines (about 30 lines each).
Result<std::string> prometheus_text(std::string_view health_json);

/// Operation: writes TEXT to PATH atomically for a reader that may read at any moment: a
/// temporary file beside it (PATH + ".tmp", same directory, so the rename is atomic), then
/// rename. No fsync: the file is rewritten every health interval, and a power cut that leaves an
/// empty or old one is repaired by the next (an fsync each interval would be flash wear for
/// nothing).
Result<void> write_textfile(const std::string& path, std::string_view text);

}  // namespace tidemark::firmware
