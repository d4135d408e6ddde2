// The forwarder's thread: connect with backoff, pump rows while the link is up, rebuild it
// when it is lost, and stop. The libmosquitto connection is in forwarder_link.cpp, the rows
// and their deletes in forwarder_rows.cpp.
#include "adapters/mqtt/forwarder.h"

#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "adapters/mqtt/forwarder_impl.h"

namespace tidemark::mqtt {
namespace {

// A wait for the reconnect is cut into slices of at most this, each checking the clock again:
// a clock stepped by a test takes effect within one slice.
constexpr int64_t wait_slice_ms = 100;

}  // namespace

Forwarder::Impl::Impl(ForwarderOptions options, std::vector<OutboxSource*> sources, int wake_fd)
    : options_(std::move(options)),
      clock_(*options_.clock),
      wake_fd_(wake_fd),
      rotation_(options_.broker.addresses.size()),
      address_(broker_address(options_.broker.addresses.front())),
      timers_(clock_, options_.ack_timeout_ms, options_.delete_interval_ms,
              options_.poll_interval_ms) {
    streams_.resize(sources.size());
    delete_queue_.resize(sources.size());
    for (size_t i = 0; i < sources.size(); ++i)
        streams_[i].source = sources[i];
    inflight_.reserve(static_cast<size_t>(options_.broker.max_inflight));
}

Forwarder::Impl::~Impl() {
    stop(std::chrono::milliseconds(1000));
    ::close(wake_fd_);
}

Result<void> Forwarder::Impl::start() {
    TM_ASSERT(!thread_.joinable());
    try {
        deleter_ = std::thread([this] { run_deleter(); });
        thread_ = std::thread([this] { run(); });
    } catch (const std::system_error& e) {
        stop_deleter();
        return fail(std::string("forwarder: cannot start its thread: ") + e.what());
    }
    return {};
}

void Forwarder::Impl::notify() {
    notified_.store(true, std::memory_order_release);
    wake();
}

void Forwarder::Impl::stop(std::chrono::milliseconds timeout) {
    {
        std::lock_guard lock(mutex_);
        if (!stopping_.load()) stop_deadline_ms_ = clock_.steady_ms() + timeout.count();
    }
    stopping_.store(true);
    wake();
    if (thread_.joinable()) thread_.join();
    stop_deleter();
}

ForwarderStats Forwarder::Impl::stats() const {
    std::lock_guard lock(mutex_);
    return stats_;
}

void Forwarder::Impl::wake() {
    const uint64_t one = 1;
    // A full counter (never in practice) already means "wake up": nothing to handle.
    [[maybe_unused]] const ssize_t n = ::write(wake_fd_, &one, sizeof one);
}

void Forwarder::Impl::drain_wake() {
    uint64_t count;
    [[maybe_unused]] const ssize_t n = ::read(wake_fd_, &count, sizeof count);
}

// Until the clock says `timeout_ms` passed, or notify() / stop() wakes the thread.
void Forwarder::Impl::wait_for_wake(int64_t timeout_ms) {
    const int64_t deadline_ms = clock_.steady_ms() + timeout_ms;
    for (int64_t left_ms = timeout_ms; left_ms > 0 && !stopping_.load();
         left_ms = deadline_ms - clock_.steady_ms()) {
        pollfd fd{wake_fd_, POLLIN, 0};
        if (::poll(&fd, 1, static_cast<int>(std::min(left_ms, wait_slice_ms))) > 0) {
            drain_wake();
            return;
        }
    }
}

void Forwarder::Impl::set_error(const std::string& message) {
    bool changed;
    {
        std::lock_guard lock(mutex_);
        changed = stats_.last_error != message;
        stats_.last_error = message;
    }
    if (changed) spdlog::warn("forwarder [{}]: {}", options_.broker.client_id, message);
}

void Forwarder::Impl::run() {
    std::mt19937_64 rng(std::random_device{}());
    std::uniform_real_distribution<double> jitter(0.0, 1.0);
    const core::Backoff backoff{options_.reconnect_delay_min_ms, options_.reconnect_delay_max_ms};
    int failed_attempts = 0;
    bool ever_connected = false;
    while (!stopping_.load()) {
        if (mosq_ == nullptr) {
            if (auto ok = connect(); !ok) {
                connect_failed(ok.error().message);
                wait_for_wake(backoff.wait_ms(failed_attempts, jitter(rng)));
                ++failed_attempts;
                continue;
            }
            failed_attempts = 0;
            connected(ever_connected);
            ever_connected = true;
            rewind();
        }
        pump();
        if (link_lost_) link_down();  // the first reconnect attempt is immediate
    }
    shut_down();
}

void Forwarder::Impl::connect_failed(const std::string& message) {
    destroy_client();
    rotation_.move_on();  // a refused or unreachable node: the next one, round the list
    if (outage_started_ms_ < 0) outage_started_ms_ = clock_.steady_ms();
    {
        std::lock_guard lock(mutex_);
        ++stats_.connect_failures;
        if (stats_.offline_since_ms == 0) stats_.offline_since_ms = clock_.wall_ms();
    }
    set_error(message);
}

void Forwarder::Impl::connected(bool again) {
    rotation_.connected();
    {
        std::lock_guard lock(mutex_);
        stats_.link_up = true;
        stats_.offline_since_ms = 0;
        if (again) ++stats_.reconnects;
        stats_.node = address_;
        stats_.failovers = rotation_.failovers();
    }
    spdlog::info("forwarder [{}]: {} {}", options_.broker.client_id,
                 again ? "reconnected to" : "connected to", address_);
}

void Forwarder::Impl::publish_stats() {
    std::lock_guard lock(mutex_);
    stats_.sends = sends_;
    stats_.acks = acks_;
    stats_.rejected = rejected_;
    stats_.inflight = inflight_.size();
}

// Acknowledged rows are deleted; what was in flight is sent again from the oldest row left.
void Forwarder::Impl::link_down() {
    wait_for_deletes(clock_.steady_ms() + options_.poll_interval_ms);
    inflight_.clear();
    destroy_client();
    const std::string lost_address = address_;
    rotation_.move_on();  // the node may be gone: the next one takes over, round the list
    if (outage_started_ms_ < 0) outage_started_ms_ = clock_.steady_ms();
    {
        std::lock_guard lock(mutex_);
        stats_.link_up = false;
        stats_.offline_since_ms = clock_.wall_ms();
        stats_.inflight = 0;
    }
    set_error(lost_address + ": " + lost_cause_);
}

void Forwarder::Impl::shut_down() {
    int64_t deadline_ms;
    {
        std::lock_guard lock(mutex_);
        deadline_ms = stop_deadline_ms_;
    }
    if (mosq_ != nullptr && !link_lost_) {
        // Let in-flight rows be acknowledged so they need not be sent again next run.
        while (!inflight_.empty() && !link_lost_ && clock_.steady_ms() < deadline_ms) {
            int error = 0;
            const int64_t left_ms = std::max<int64_t>(deadline_ms - clock_.steady_ms(), 0);
            if (poll_client(std::min<int64_t>(50, left_ms), error) != MOSQ_ERR_SUCCESS) break;
        }
    }
    wait_for_deletes(std::max(deadline_ms, clock_.steady_ms() + 100));
    if (mosq_ != nullptr && !link_lost_) {
        mosquitto_disconnect(mosq_);
        while (mosquitto_want_write(mosq_) && clock_.steady_ms() < deadline_ms) {
            int error = 0;
            if (poll_client(20, error) != MOSQ_ERR_SUCCESS) break;
        }
    }
    destroy_client();
    publish_stats();
    std::lock_guard lock(mutex_);
    stats_.link_up = false;
    stats_.inflight = 0;
}

Result<std::unique_ptr<Forwarder>> Forwarder::create(ForwarderOptions options,
                                                     OutboxSource& source) {
    return create(std::move(options), std::vector<OutboxSource*>{&source});
}

Result<std::unique_ptr<Forwarder>> Forwarder::create(ForwarderOptions options,
                                                     std::vector<OutboxSource*> sources) {
    BrokerOptions& broker = options.broker;
    if (auto ok = validate(broker); !ok) return std::unexpected(ok.error());
    if (options.clock == nullptr) return fail("forwarder: no clock given");
    if (options.qos != 0 && options.qos != 1) {
        return fail(broker.config_name + ".qos is " + std::to_string(options.qos) + ": use 0 or 1");
    }
    if (options.peek_rows == 0 || options.delete_batch_rows == 0) {
        return fail("forwarder: peek_rows and delete_batch_rows must be at least 1");
    }
    if (options.ack_timeout_ms < 1) {
        return fail("forwarder: ack_timeout_ms must be at least 1");
    }
    if (options.reconnect_delay_min_ms < 1 ||
        options.reconnect_delay_max_ms < options.reconnect_delay_min_ms) {
        return fail(
            broker.config_name + ": reconnect delay maximum " +
            std::to_string(options.reconnect_delay_max_ms) + " ms must be at least the minimum " +
            std::to_string(options.reconnect_delay_min_ms) + " ms (and that at least 1 ms)");
    }
    TM_ASSERT(!sources.empty());
    for (OutboxSource* source : sources)
        TM_ASSERT(source != nullptr);
    mosquitto_library_init();
    const int wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (wake_fd < 0) return fail(std::string("forwarder: eventfd: ") + std::strerror(errno));
    auto impl = std::make_unique<Impl>(std::move(options), std::move(sources), wake_fd);
    return std::unique_ptr<Forwarder>(new Forwarder(std::move(impl)));
}

Forwarder::Forwarder(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Forwarder::~Forwarder() = default;
Result<void> Forwarder::start() {
    return impl_->start();
}
void Forwarder::notify() {
    impl_->notify();
}
void Forwarder::stop(std::chrono::milliseconds timeout) {
    impl_->stop(timeout);
}
ForwarderStats Forwarder::stats() const {
    return impl_->stats();
}

}  // namespace tidemark::mqtt
