#include "adapters/mqtt/health.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>

#include "adapters/mqtt/mosquitto_options.h"
#include "adapters/mqtt/node_rotation.h"

namespace tidemark::mqtt {
namespace {

using std::chrono::milliseconds;

constexpr int status_qos = 1;
constexpr std::string_view status_online = "online";
constexpr std::string_view status_offline = "offline";
constexpr int64_t wait_slice_ms = 100;
// MQTT keep-alive below 5 s is refused by libmosquitto.
constexpr int keep_alive_s_min = 5;

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
    Impl(HealthOptions options, std::function<std::string()> snapshot)
        : options_(std::move(options)),
          clock_(*options_.clock),
          snapshot_(std::move(snapshot)),
          rotation_(options_.broker.addresses.size()) {}

    ~Impl() {
        stop(milliseconds(1000));
        destroy_client();
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
            if (!stopping_) stop_deadline_ms_ = clock_.steady_ms() + timeout.count();
        }
        stopping_.store(true);
        if (thread_.joinable()) thread_.join();
    }

    HealthStats stats() const {
        std::lock_guard lock(mutex_);
        return stats_;
    }

    void publish_now() { publish_now_.store(true); }

  private:
    // libmosquitto's callbacks run inside mosquitto_loop() on the publisher's thread.
    static void on_connect(mosquitto*, void* self, int rc) {
        auto* impl = static_cast<Impl*>(self);
        impl->connack_received_ = true;
        impl->connack_rc_ = rc;
    }
    static void on_disconnect(mosquitto*, void* self, int) {
        static_cast<Impl*>(self)->link_lost_ = true;
    }
    static void on_publish(mosquitto*, void* self, int mid) {
        auto* impl = static_cast<Impl*>(self);
        if (mid == impl->in_flight_mid_) impl->in_flight_mid_ = no_mid;
    }

    void set_error(const std::string& message) {
        std::lock_guard lock(mutex_);
        if (stats_.last_error != message) {
            spdlog::warn("health [{}]: {}", options_.broker.client_id, message);
        }
        stats_.last_error = message;
    }

    void count_skipped() {
        std::lock_guard lock(mutex_);
        ++stats_.skipped;
    }

    void set_connected(bool connected) {
        std::lock_guard lock(mutex_);
        stats_.connected = connected;
    }

    void destroy_client() {
        if (mosq_ != nullptr) mosquitto_destroy(mosq_);  // closes the socket; no callbacks
        mosq_ = nullptr;
    }

    // One round of socket work (reads, writes, keep-alive) waiting at most `timeout_ms`; a
    // lost link sets link_lost_.
    void loop_once(int64_t timeout_ms) {
        if (mosq_ == nullptr || link_lost_) {
            std::this_thread::sleep_for(milliseconds(std::max<int64_t>(timeout_ms, 1)));
            return;
        }
        const int rc = mosquitto_loop(mosq_, static_cast<int>(std::max<int64_t>(timeout_ms, 0)), 1);
        if (rc != MOSQ_ERR_SUCCESS && !link_lost_) {
            link_lost_ = true;
            set_error("connection to " + address_ + " lost: " + mosquitto_strerror(rc));
        }
    }

    // Works the socket until the clock reaches `deadline_ms`, stop() or a lost link; true when
    // stopping. In slices, so that a clock stepped by a test takes effect within one.
    bool wait_until(int64_t deadline_ms) {
        for (int64_t left_ms = deadline_ms - clock_.steady_ms();
             left_ms > 0 && !link_lost_ && !publish_now_.load();
             left_ms = deadline_ms - clock_.steady_ms()) {
            if (stopping_.load()) return true;
            loop_once(std::min(left_ms, wait_slice_ms));
        }
        return stopping_.load();
    }

    void run() {
        std::mt19937 rng(std::random_device{}());
        std::uniform_real_distribution<double> jitter(0.0, 1.0);
        int failed_attempts = 0;
        bool connected = false;
        int64_t next_publish_ms = clock_.steady_ms();
        while (!stopping_.load()) {
            if (connected && link_lost_) {
                connected = false;
                set_connected(false);
                rotation_.move_on();  // the node may be gone: the next one, round the list
            }
            if (!connected) {
                if (auto ok = connect(); !ok) {
                    destroy_client();
                    if (stopping_.load()) break;
                    set_error(ok.error().message);
                    count_skipped();
                    rotation_.move_on();
                    const int64_t wait_ms = reconnect_backoff.wait_ms(failed_attempts, jitter(rng));
                    ++failed_attempts;
                    if (wait_until(clock_.steady_ms() + wait_ms)) break;
                    continue;
                }
                connected = true;
                failed_attempts = 0;
                rotation_.connected();
                set_connected(true);
                publish(options_.status_topic, std::string(status_online));
                next_publish_ms = clock_.steady_ms();  // a fresh snapshot after (re)connecting
            }
            const int64_t now_ms = clock_.steady_ms();
            if (publish_now_.exchange(false) || now_ms >= next_publish_ms) {
                publish_snapshot();
                next_publish_ms += options_.interval_ms;
                if (next_publish_ms < now_ms) next_publish_ms = now_ms + options_.interval_ms;
            }
            if (wait_until(next_publish_ms)) break;
        }
        shut_down(connected && !link_lost_);
        destroy_client();
        set_connected(false);
    }

    // At most one snapshot in flight: while the previous one is unacknowledged, skip.
    void publish_snapshot() {
        if (in_flight_mid_ != no_mid) {
            count_skipped();
            return;
        }
        const int mid = publish(options_.topic, snapshot_());
        if (mid == no_mid) return;
        in_flight_mid_ = mid;
        std::lock_guard lock(mutex_);
        ++stats_.published;
    }

    // A fresh client each time, on a clean session (nothing to keep: no subscriptions, and a
    // stale snapshot is useless), with the last will `offline`.
    Result<void> connect() {
        destroy_client();
        const BrokerAddress& node = options_.broker.addresses[rotation_.current()];
        address_ = broker_address(node);
        link_lost_ = false;
        connack_received_ = false;
        connack_rc_ = 0;
        in_flight_mid_ = no_mid;
        mosq_ = mosquitto_new(options_.broker.client_id.c_str(), /*clean_session=*/true, this);
        if (mosq_ == nullptr)
            return fail(std::string("cannot create an MQTT client: ") + std::strerror(errno));
        if (auto ok = apply_mosquitto_options(mosq_, options_.broker, node); !ok) return ok;
        mosquitto_connect_callback_set(mosq_, on_connect);
        mosquitto_disconnect_callback_set(mosq_, on_disconnect);
        mosquitto_publish_callback_set(mosq_, on_publish);
        const std::string offline(status_offline);
        int rc = mosquitto_will_set(mosq_, options_.status_topic.c_str(),
                                    static_cast<int>(offline.size()), offline.data(), status_qos,
                                    /*retain=*/true);
        if (rc != MOSQ_ERR_SUCCESS)
            return fail("health: cannot set the last will: " + std::string(mosquitto_strerror(rc)));
        const int keep_alive_s = std::max(options_.broker.keep_alive_s, keep_alive_s_min);
        errno = 0;
        rc = mosquitto_connect_async(mosq_, node.host.c_str(), node.port, keep_alive_s);
        if (rc != MOSQ_ERR_SUCCESS) {
            return fail("health: cannot connect to " + address_ + ": " +
                        (rc == MOSQ_ERR_ERRNO ? std::string(std::strerror(errno))
                                              : std::string(mosquitto_strerror(rc))));
        }
        const int64_t deadline_ms =
            clock_.steady_ms() + (int64_t{options_.broker.connect_timeout_s} + 1) * 1000;
        while (!connack_received_) {
            if (stopping_.load()) return fail("stopped while connecting");
            if (link_lost_) return fail("health: cannot connect to " + address_);
            if (clock_.steady_ms() > deadline_ms) {
                return fail("connect to " + address_ + " timed out");
            }
            loop_once(wait_slice_ms);
        }
        if (connack_rc_ != 0) {
            return fail("health: " + address_ + " refused the connection of client '" +
                        options_.broker.client_id + "': " + mosquitto_connack_string(connack_rc_));
        }
        return {};
    }

    // Retained QoS1; no_mid when the client refused it (link going down).
    int publish(const std::string& topic, const std::string& payload) {
        int mid = no_mid;
        const int rc =
            mosquitto_publish(mosq_, &mid, topic.c_str(), static_cast<int>(payload.size()),
                              payload.data(), status_qos, /*retain=*/true);
        if (rc != MOSQ_ERR_SUCCESS) {
            set_error("health: publish to " + topic + " failed: " + mosquitto_strerror(rc));
            link_lost_ = true;
            return no_mid;
        }
        return mid;
    }

    void shut_down(bool connected) {
        if (!connected) return;
        int64_t deadline_ms;
        {
            std::lock_guard lock(mutex_);
            deadline_ms = stop_deadline_ms_;
        }
        // A clean stop says so itself: the will is only for when the process dies.
        const int mid = publish(options_.status_topic, std::string(status_offline));
        if (mid != no_mid) {
            in_flight_mid_ = mid;
            while (in_flight_mid_ != no_mid && !link_lost_ && clock_.steady_ms() < deadline_ms)
                loop_once(std::min(deadline_ms - clock_.steady_ms(), wait_slice_ms));
        }
        if (link_lost_) return;
        mosquitto_disconnect(mosq_);
        // The DISCONNECT goes out in the next write; the broker drops the will on reading it.
        while (!link_lost_ && clock_.steady_ms() < deadline_ms)
            loop_once(std::min(deadline_ms - clock_.steady_ms(), wait_slice_ms));
    }

    static constexpr int no_mid = -1;

    const HealthOptions options_;
    const core::Clock& clock_;
    const std::function<std::string()> snapshot_;
    std::thread thread_;
    std::atomic<bool> stopping_{false};
    std::atomic<bool> publish_now_{false};

    // The publisher's thread only (callbacks included).
    NodeRotation rotation_;
    std::string address_;  ///< the node of the current attempt or link, for messages
    mosquitto* mosq_ = nullptr;
    bool link_lost_ = false;
    bool connack_received_ = false;
    int connack_rc_ = 0;
    int in_flight_mid_ = no_mid;

    mutable std::mutex mutex_;      // guards the two below
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
    mosquitto_library_init();
    auto impl = std::make_unique<Impl>(std::move(options), std::move(snapshot));
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
void HealthPublisher::publish_now() {
    impl_->publish_now();
}

}  // namespace tidemark::mqtt
