// The mapping from the typed config to each adapter's own options: adapters never read the
// config themselves (DESIGN.md section 2), so this is the one place that knows both.
#pragma once

#include "adapters/config/config.h"
#include "adapters/mqtt/client_options.h"

namespace tidemark::firmware {

mqtt::BrokerOptions source_broker_options(const config::Config& config);
mqtt::BrokerOptions upstream_broker_options(const config::Config& config);

}  // namespace tidemark::firmware
