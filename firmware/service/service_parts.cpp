#include "firmware/service/service_parts.h"

#include <chrono>

#include "adapters/lmdb/store.h"
#include "adapters/mqtt/forwarder.h"
#include "adapters/mqtt/health.h"
#include "firmware/adapter_options.h"
#include "firmware/clock.h"
#include "firmware/service/outbox_sources.h"
#include "firmware/service/service_parts_impl.h"

namespace tidemark::firmware {

namespace {

// How long stop_clients() gives the forwarder and the health publisher each to say goodbye
// (the health publisher's retained "offline"); within systemd's stop timeout with room to spare.
constexpr auto client_stop_timeout = std::chrono::seconds(2);

}  // namespace

ServiceParts::ServiceParts(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ServiceParts::~ServiceParts() {
    stop_clients();
}

Result<std::unique_ptr<ServiceParts>> ServiceParts::open(const config::Config& config,
                                                         const core::Clock& clock) {
    auto impl = std::make_unique<Impl>(config, clock);
    auto host = EngineHost::open(impl->config, clock, impl->alarms);
    if (!host) return std::unexpected(host.error());
    impl->host = std::move(*host);
    return std::unique_ptr<ServiceParts>(new ServiceParts(std::move(impl)));
}

EngineHost& ServiceParts::host() {
    return *impl_->host;
}

Alarms& ServiceParts::alarms() {
    return impl_->alarms;
}

bool ServiceParts::refresh_clock() {
    const ClockStatus status = read_clock_status(impl_->config.source.clock_trust);
    impl_->alarms.set_clock(status);
    return status.trusted;
}

Result<void> ServiceParts::start_forwarder() {
    Impl& m = *impl_;
    if (!m.config.upstream) return {};
    m.outbox_source = make_outbox_source(m.host->store(), m.config);
    m.side_source = make_side_source(m.host->store(), m.config);
    auto fwd = mqtt::Forwarder::create(
        forwarder_options(m.config, m.clock),
        std::vector<mqtt::OutboxSource*>{m.outbox_source.get(), m.side_source.get()});
    if (!fwd) return std::unexpected(fwd.error());
    m.forwarder = std::move(*fwd);
    m.host->set_forwarder(m.forwarder.get());
    return m.forwarder->start();
}

Result<void> ServiceParts::start_health() {
    Impl& m = *impl_;
    auto hp = mqtt::HealthPublisher::create(health_options(m.config, m.clock), [this] {
        std::lock_guard<std::mutex> lk(impl_->health_mutex);
        return impl_->health_json;
    });
    if (!hp) return std::unexpected(hp.error());
    m.health = std::move(*hp);
    return m.health->start();
}

std::string ServiceParts::health_json() const {
    std::lock_guard<std::mutex> lk(impl_->health_mutex);
    return impl_->health_json;
}

std::string ServiceParts::status_line() const {
    std::lock_guard<std::mutex> lk(impl_->health_mutex);
    return impl_->status;
}

const config::Config& ServiceParts::config() const {
    return impl_->config;
}

void ServiceParts::stop_clients() {
    if (impl_->forwarder) impl_->forwarder->stop(client_stop_timeout);
    if (impl_->health) impl_->health->stop(client_stop_timeout);
    impl_->host->set_forwarder(nullptr);
    impl_->forwarder.reset();
    impl_->health.reset();
}

}  // namespace tidemark::firmware
