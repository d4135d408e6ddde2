// The filters a persistent session holds at the broker, recorded beside the data (internal to
// adapters/mqtt; see IngestOptions::subscriptions_file).
#pragma once

#include <string>
#include <vector>

#include "core/result.h"

namespace tidemark::mqtt::detail {

/// The filters recorded in `path`, one a line; none when the file does not exist.
Result<std::vector<std::string>> read_subscriptions(const std::string& path);

/// Replaces the record with `filters`, atomically (a temporary file, fsync, rename, fsync of
/// the directory): after a crash the file holds either the old record or the new one.
Result<void> write_subscriptions(const std::string& path, const std::vector<std::string>& filters);

}  // namespace tidemark::mqtt::detail
