// The mapping from the sink's typed config to each part's own options (as adapter_options.h
// does for the appliance): the only place that knows both.
#pragma once

#include "adapters/config/sink_config.h"
#include "adapters/mqtt/client_options.h"
#include "adapters/mqtt/health.h"
#include "adapters/postgres/types.h"
#include "core/clock.h"
#include "firmware/sink/spool.h"
#include "firmware/sink/writer.h"

namespace tidemark::firmware::sink {

/// The upstream broker the sink subscribes to (persistent session under source.client_id).
mqtt::BrokerOptions source_options(const config::SinkConfig& config);
SpoolOptions spool_options(const config::SinkConfig& config);
postgres::StoreOptions store_options(const config::SinkConfig& config);
WriterOptions writer_options(const config::SinkConfig& config);
/// Health on the same broker under a client id of its own (source.client_id + "-health").
mqtt::HealthOptions health_options(const config::SinkConfig& config, const core::Clock& clock);

}  // namespace tidemark::firmware::sink
