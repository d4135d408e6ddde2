#include "core/upstream_record.h"

#include <algorithm>
#include <tuple>

namespace tidemark::core {

namespace {

// -1, 0 or 1 as `left` sorts before, with or after `right` (tuples of the same fields).
template <class Tuple>
int three_way(const Tuple& left, const Tuple& right) {
    if (left < right) return -1;
    return right < left ? 1 : 0;
}

}  // namespace

int compare_window(const ReceivedResult& a, const ReceivedResult& b) {
    const auto left =
        std::tie(a.node, a.pipeline, a.version, a.key, a.window_start_ms, a.window_end_ms);
    const auto right =
        std::tie(b.node, b.pipeline, b.version, b.key, b.window_start_ms, b.window_end_ms);
    return three_way(left, right);
}

int compare_tally(const ReceivedLate& a, const ReceivedLate& b) {
    const auto left =
        std::tie(a.node, a.pipeline, a.version, a.window_start_ms, a.window_end_ms, a.since_ms);
    const auto right =
        std::tie(b.node, b.pipeline, b.version, b.window_start_ms, b.window_end_ms, b.since_ms);
    return three_way(left, right);
}

bool outranks(const ReceivedResult& a, const ReceivedResult& b) {
    if (a.revision != b.revision) return a.revision > b.revision;
    return a.kind == EmissionKind::retract && b.kind != EmissionKind::retract;
}

std::optional<std::string> pipeline_view_name(std::string_view pipeline) {
    if (pipeline.empty() || pipeline.size() > pipeline_view_name_bytes_max) return std::nullopt;
    std::string name(pipeline_view_prefix);
    for (const char c : pipeline) {
        if (c >= 'A' && c <= 'Z') {
            name += static_cast<char>(c - 'A' + 'a');
        } else if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_') {
            name += c;
        } else if (c == '-' || c == '.') {
            name += '_';
        } else {
            return std::nullopt;
        }
    }
    return name;
}

std::string aggregate_column_problem(std::string_view column) {
    if (column.empty()) return "an aggregate needs a name to be a column";
    if (column.size() > identifier_bytes_max)
        return "the aggregate name is " + std::to_string(column.size()) +
               " bytes: a PostgreSQL column name has at most " +
               std::to_string(identifier_bytes_max);
    const auto& fixed = pipeline_view_fixed_columns;
    if (std::find(std::begin(fixed), std::end(fixed), column) != std::end(fixed))
        return "the aggregate '" + std::string(column) +
               "' would share its name with a column every current_<pipeline> view has: rename "
               "it in the gateway's pipeline";
    return {};
}

}  // namespace tidemark::core
