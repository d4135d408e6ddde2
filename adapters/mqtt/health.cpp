#include "adapters/mqtt/health.h"

#include <mqtt/async_client.h>
#include <spdlog/spdlog.h>

#include <condition_variable>
#include <mutex>
#include <random>
#include <thread>

#include "adapters/mqtt/paho_options.h"

namespace tidemark::mqtt {
namespace {

using std::chrono::milliseconds;

constexpr int status_qos = 1;
constexpr std::string_view status_online = "online";
constexpr std::string_view status_offline = "offline";
constexpr int64_t wait_slice_ms = 100;

}  // namespace

std::string status_topic_for(std::string_view health_topic) {
    const size_t slash = health_topic.rfind('/');
    if (slash == std::string_view::npos || health_topic.substr(slash + 1) == "status") {
        return std::string(health_topic) + "/status";
    }
    return std::string(health_topic.substr(0, slash)) + "/status";
}

class HealthPublisher::Impl {
  public:
    Impl(HealthOptions options, std::function<std::string()> snapshot,
         std::unique_ptr<::mqtt::async_client> client)
        : options_(std::move(options)),
          clock_(*options_.clock),
          snapshot_(std::move(snapshot)),
          client_(std::move(client)) {
        client_->set_connection_lost_handler([this](const std::string&) {
            std::lock_guard lock(mutex_);
            link_lost_ = true;
            wake_.notify_one();
        });
    }

    ~Impl() {
        stop(milliseconds(1000));
        client_.reset();  // no Paho callback may run once the members below are destroyed
    }

    Result<void> start() {
        TM_ASSERT(!thread_.joinable());
        try {
            thread_ = std::thread([this] { run(); });
        } catch (const std::system_error& e) {
            return fail(std::string("health: cannot start its thread: ") + e.what());
        }
        return {};
    }

    void stop(milliseconds timeout) {
        {
            std::lock_guard lock(mutex_);
            if (!stopping_) {
                stopping_ = true;
                stop_deadline_ms_ = clock_.steady_ms() + timeout.count();
            }
            wake_.notify_one();
        }
        if (thread_.joinable()) thread_.join();
    }

    HealthStats stats() const {
        std::lock_guard lock(mutex_);
        return stats_;
    }

  private:
    void set_error(const std::string& message) {
        std::lock_guard lock(mutex_);
        if (stats_.last_error != message) {
            spdlog::warn("health [{}]: {}", options_.broker.client_id, message);
        }
        stats_.last_error = message;
    }

    // Waits until the clock reaches `deadline_ms`, stop() or a lost link; true when stopping.
    // In slices, so that a clock stepped by a test takes effect within one.
    bool wait_until(int64_t deadline_ms) {
        std::unique_lock lock(mutex_);
        for (int64_t left_ms = deadline_ms - clock_.steady_ms(); left_ms > 0;
             left_ms = deadline_ms - clock_.steady_ms()) {
            if (wake_.wait_for(lock, milliseconds(std::min(left_ms, wait_slice_ms)),
                               [this] { return stopping_ || link_lost_; })) {
                break;
            }
        }
        return stopping_;
    }

    void run() {
        std::mt19937 rng(std::random_device{}());
        std::uniform_real_distribution<double> jitter(0.8, 1.2);
        int failed_attempts = 0;
        bool connected = false;
        ::mqtt::delivery_token_ptr in_flight;
        int64_t next_publish_ms = clock_.steady_ms();
        while (true) {
            {
                std::lock_guard lock(mutex_);
                if (stopping_) break;
                if (link_lost_) {
                    link_lost_ = false;
                    connected = false;
                    stats_.connected = false;
                }
            }
            if (!connected) {
                if (auto ok = connect(); !ok) {
                    set_error(ok.error().message);
                    count_skipped();
                    const double delay_ms =
                        static_cast<double>(reconnect_delay(failed_attempts).count()) * jitter(rng);
                    ++failed_attempts;
                    if (wait_until(clock_.steady_ms() + static_cast<int64_t>(delay_ms))) break;
                    continue;
                }
                connected = true;
                failed_attempts = 0;
                in_flight.reset();
                {
                    std::lock_guard lock(mutex_);
                    stats_.connected = true;
                }
                publish(options_.status_topic, std::string(status_online));
                next_publish_ms = clock_.steady_ms();  // a fresh snapshot after (re)connecting
            }
            const int64_t now_ms = clock_.steady_ms();
            if (now_ms >= next_publish_ms) {
                publish_snapshot(in_flight);
                next_publish_ms += options_.interval_ms;
                if (next_publish_ms < now_ms) next_publish_ms = now_ms + options_.interval_ms;
            }
            if (wait_until(next_publish_ms)) break;
        }
        shut_down(connected);
    }

    void count_skipped() {
        std::lock_guard lock(mutex_);
        ++stats_.skipped;
    }

    // At most one snapshot in flight: while the previous one is unacknowledged, skip.
    void publish_snapshot(::mqtt::delivery_token_ptr& in_flight) {
        if (in_flight && !in_flight->is_complete()) {
            count_skipped();
            return;
        }
        in_flight = publish(options_.topic, snapshot_());
        if (in_flight) {
            std::lock_guard lock(mutex_);
            ++stats_.published;
        }
    }

    Result<void> connect() {
        ::mqtt::connect_options connect_options;
        if (auto ok = fill_connect_options(options_.broker, connect_options); !ok) return ok;
        // Nothing to keep across connections: no subscriptions, and a stale snapshot is useless.
        connect_options.set_clean_session(true);
        connect_options.set_will(::mqtt::will_options(
            options_.status_topic, std::string(status_offline), status_qos, true));
        {
            std::lock_guard lock(mutex_);
            link_lost_ = false;
        }
        try {
            ::mqtt::token_ptr token = client_->connect(connect_options);
            const int64_t deadline_ms =
                clock_.steady_ms() + (int64_t{options_.broker.connect_timeout_s} + 1) * 1000;
            while (!token->wait_for(milliseconds(100))) {
                {
                    std::lock_guard lock(mutex_);
                    if (stopping_) return fail("stopped while connecting");
                }
                if (clock_.steady_ms() > deadline_ms) {
                    return fail("connect to " + address_ + " timed out");
                }
            }
        } catch (const ::mqtt::exception& e) {
            return fail("health: cannot connect to " + address_ + ": " + e.what());
        }
        return {};
    }

    // Retained QoS1; an empty token when the client refused it (link going down).
    ::mqtt::delivery_token_ptr publish(const std::string& topic, std::string payload) {
        try {
            return client_->publish(
                ::mqtt::make_message(topic, std::move(payload), status_qos, true));
        } catch (const ::mqtt::exception& e) {
            set_error("health: publish to " + topic + " failed: " + e.what());
            std::lock_guard lock(mutex_);
            link_lost_ = true;
            return nullptr;
        }
    }

    void shut_down(bool connected) {
        int64_t deadline_ms;
        {
            std::lock_guard lock(mutex_);
            deadline_ms = stop_deadline_ms_;
            stats_.connected = false;
        }
        if (!connected) return;
        // A clean stop says so itself: the will is only for when the process dies.
        try {
            if (auto token = publish(options_.status_topic, std::string(status_offline))) {
                token->wait_for(
                    milliseconds(std::max<int64_t>(deadline_ms - clock_.steady_ms(), 0)));
            }
            const int64_t left_ms = std::max<int64_t>(deadline_ms - clock_.steady_ms(), 0);
            client_->disconnect(static_cast<int>(left_ms))->wait_for(milliseconds(left_ms + 100));
        } catch (const ::mqtt::exception& e) {
            spdlog::warn("health [{}]: clean stop: {}", options_.broker.client_id, e.what());
        }
    }

    const HealthOptions options_;
    const core::Clock& clock_;
    const std::string address_ = broker_address(options_.broker);
    const std::function<std::string()> snapshot_;
    std::unique_ptr<::mqtt::async_client> client_;
    std::thread thread_;

    mutable std::mutex mutex_;
    std::condition_variable wake_;
    bool stopping_ = false;
    bool link_lost_ = false;
    int64_t stop_deadline_ms_ = 0;  ///< steady
    HealthStats stats_;
};

Result<std::unique_ptr<HealthPublisher>> HealthPublisher::create(
    HealthOptions options, std::function<std::string()> snapshot) {
    if (auto ok = validate(options.broker); !ok) return std::unexpected(ok.error());
    if (options.clock == nullptr) return fail("health: no clock given");
    if (options.topic.empty()) return fail("health.topic is empty");
    if (options.topic.find_first_of("+#") != std::string::npos) {
        return fail("health.topic '" + options.topic + "' contains a wildcard ('+' or '#')");
    }
    if (options.status_topic.empty()) options.status_topic = status_topic_for(options.topic);
    if (options.status_topic == options.topic) {
        return fail("health: status topic and health topic are both '" + options.topic + "'");
    }
    if (options.interval_ms < 100) {
        return fail("health.interval is " + std::to_string(options.interval_ms) +
                    " ms: use at least 100ms");
    }
    TM_ASSERT(snapshot != nullptr);
    std::unique_ptr<::mqtt::async_client> client;
    try {
        client = std::make_unique<::mqtt::async_client>(
            broker_address(options.broker), options.broker.client_id,
            ::mqtt::create_options(MQTTVERSION_3_1_1), nullptr);
    } catch (const ::mqtt::exception& e) {
        return fail(options.broker.config_name + ".uri '" + broker_address(options.broker) +
                    "' is not usable: " + e.what());
    }
    auto impl = std::make_unique<Impl>(std::move(options), std::move(snapshot), std::move(client));
    return std::unique_ptr<HealthPublisher>(new HealthPublisher(std::move(impl)));
}

HealthPublisher::HealthPublisher(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HealthPublisher::~HealthPublisher() = default;
Result<void> HealthPublisher::start() {
    return impl_->start();
}
void HealthPublisher::stop(std::chrono::milliseconds timeout) {
    impl_->stop(timeout);
}
HealthStats HealthPublisher::stats() const {
    return impl_->stats();
}

}  // namespace tidemark::mqtt
