#include "adapters/mqtt/forwarder.h"

#include <mqtt/async_client.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>

namespace tidemark::mqtt {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

int64_t wall_ms() {
    return std::chrono::duration_cast<milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

int64_t ms_between(Clock::time_point from, Clock::time_point to) {
    return std::chrono::duration_cast<milliseconds>(to - from).count();
}

// One line per state change, never per row.
void log_line(const std::string& client_id, const std::string& text) {
    spdlog::warn("forwarder [{}]: {}", client_id, text);
}

void log_link_up(const std::string& client_id, const std::string& text) {
    spdlog::info("forwarder [{}]: {}", client_id, text);
}

}  // namespace

class Forwarder::Impl final : public ::mqtt::iaction_listener {
  public:
    Impl(ForwarderOptions options, OutboxSource& source,
         std::unique_ptr<::mqtt::async_client> client)
        : options_(std::move(options)), source_(source), client_(std::move(client)) {
        client_->set_connection_lost_handler([this](const std::string& cause) {
            std::lock_guard lock(mutex_);
            link_lost_ = true;
            lost_cause_ = cause.empty() ? "connection lost" : "connection lost: " + cause;
            wake_.notify_one();
        });
    }

    ~Impl() override {
        stop(milliseconds(1000));
        client_.reset();  // no Paho callback may run once the members below are destroyed
    }

    Result<void> start() {
        TM_ASSERT(!thread_.joinable());
        try {
            thread_ = std::thread([this] { run(); });
        } catch (const std::system_error& e) {
            return fail(std::string("forwarder: cannot start its thread: ") + e.what());
        }
        return {};
    }

    void notify() {
        std::lock_guard lock(mutex_);
        notified_ = true;
        wake_.notify_one();
    }

    void stop(milliseconds timeout) {
        {
            std::lock_guard lock(mutex_);
            if (!stopping_) {
                stopping_ = true;
                stop_deadline_ = Clock::now() + timeout;
            }
            wake_.notify_one();
        }
        if (thread_.joinable()) thread_.join();
    }

    ForwarderStats stats() const {
        std::lock_guard lock(mutex_);
        ForwarderStats copy = stats_;
        copy.inflight = inflight_.size();
        return copy;
    }

    // Paho's thread: the broker acknowledged a publish (PUBACK; at QoS0, the bytes were written).
    void on_success(const ::mqtt::token& token) override {
        const auto publish_id = reinterpret_cast<uintptr_t>(token.get_user_context());
        std::lock_guard lock(mutex_);
        const auto it = inflight_.find(publish_id);
        if (it == inflight_.end()) return;  // sent on a connection given up since: re-sent
        acked_.push_back(it->second);
        inflight_.erase(it);
        ++stats_.acks;
        if (!stats_.first_row_after_reconnect_ms) {
            stats_.first_row_after_reconnect_ms = ms_between(connected_at_, Clock::now());
        }
        wake_.notify_one();
    }

    // Paho's thread: a publish will never be acknowledged on this connection. Start over from the
    // oldest row on a fresh connection rather than track holes in the sequence.
    void on_failure(const ::mqtt::token& token) override {
        const auto publish_id = reinterpret_cast<uintptr_t>(token.get_user_context());
        std::lock_guard lock(mutex_);
        if (inflight_.erase(publish_id) == 0) return;
        if (!link_lost_) {
            link_lost_ = true;
            lost_cause_ = "a publish failed (code " + std::to_string(token.get_return_code()) + ")";
        }
        wake_.notify_one();
    }

  private:
    bool stopping() const {
        std::lock_guard lock(mutex_);
        return stopping_;
    }

    void set_error(const std::string& message) {
        bool changed;
        {
            std::lock_guard lock(mutex_);
            changed = stats_.last_error != message;
            stats_.last_error = message;
        }
        if (changed) log_line(options_.broker.client_id, message);
    }

    void run() {
        std::mt19937_64 rng(std::random_device{}());
        std::uniform_real_distribution<double> jitter(0.8, 1.2);
        int failed_attempts = 0;
        bool connected = false;
        bool ever_connected = false;
        while (!stopping()) {
            if (!connected) {
                if (auto ok = connect(); !ok) {
                    {
                        std::lock_guard lock(mutex_);
                        ++stats_.connect_failures;
                        if (stats_.offline_since_ms == 0) stats_.offline_since_ms = wall_ms();
                    }
                    set_error(ok.error().message);
                    const auto delay = milliseconds(static_cast<int64_t>(
                        static_cast<double>(reconnect_delay(failed_attempts).count()) *
                        jitter(rng)));
                    ++failed_attempts;
                    std::unique_lock lock(mutex_);
                    wake_.wait_for(lock, delay, [this] { return stopping_; });
                    continue;
                }
                connected = true;
                failed_attempts = 0;
                {
                    std::lock_guard lock(mutex_);
                    stats_.link_up = true;
                    stats_.offline_since_ms = 0;
                    if (ever_connected) ++stats_.reconnects;
                }
                log_link_up(options_.broker.client_id,
                            std::string(ever_connected ? "reconnected to " : "connected to ") +
                                options_.broker.uri);
                ever_connected = true;
                rewind();
            }

            collect_acks();
            if (take_link_lost()) {
                connected = false;
                flush_deletes();
                continue;  // the first reconnect attempt is immediate; later ones back off
            }
            if (delete_due()) flush_deletes();
            fill_window();
            wait_for_work();
        }
        shut_down(connected);
    }

    // Connects on a clean session; fails with a message that names the uri and the likely cause.
    Result<void> connect() {
        {
            std::lock_guard lock(mutex_);
            tls_error_.clear();
            link_lost_ = false;
        }
        if (client_->is_connected()) {
            // We gave up on this connection ourselves (a publish failed): close it first, or
            // connect() would wait on a client that is still connected.
            try {
                client_->disconnect(0)->wait_for(std::chrono::seconds(1));
            } catch (const ::mqtt::exception&) {
                // Closing a broken connection may fail; the connect below starts afresh anyway.
            }
        }
        auto connect_options = make_connect_options();
        if (!connect_options) return std::unexpected(connect_options.error());
        try {
            ::mqtt::token_ptr token = client_->connect(*connect_options);
            const auto timeout = std::chrono::seconds(options_.broker.connect_timeout_s);
            const auto deadline = Clock::now() + timeout + std::chrono::seconds(1);
            while (!token->wait_for(milliseconds(100))) {
                if (stopping()) return fail("stopped while connecting");
                if (Clock::now() > deadline) {
                    return fail("connect to " + options_.broker.uri + " timed out after " +
                                std::to_string(timeout.count()) + " s");
                }
            }
        } catch (const ::mqtt::exception& e) {
            return fail(describe_connect_failure(e));
        }
        std::lock_guard lock(mutex_);
        connected_at_ = Clock::now();
        stats_.first_row_after_reconnect_ms.reset();
        return {};
    }

    Result<::mqtt::connect_options> make_connect_options() {
        ::mqtt::connect_options connect_options;
        if (auto ok = fill_connect_options(options_.broker, connect_options); !ok) {
            return std::unexpected(ok.error());
        }
        // The outbox is the durable store and re-sending comes from it; a persistent session
        // would only make the broker re-send the same rows again.
        connect_options.set_clean_session(true);
        if (uses_tls(options_.broker)) {
            // OpenSSL's own words (e.g. "certificate verify failed") for the error message.
            ::mqtt::ssl_options ssl = connect_options.get_ssl_options();
            ssl.set_error_handler([this](const std::string& text) {
                std::lock_guard lock(mutex_);
                if (tls_error_.empty()) tls_error_ = text;
            });
            connect_options.set_ssl(std::move(ssl));
        }
        return connect_options;
    }

    std::string describe_connect_failure(const ::mqtt::exception& e) {
        const BrokerOptions& broker = options_.broker;
        std::string tls_error;
        {
            std::lock_guard lock(mutex_);
            tls_error = tls_error_;
        }
        while (!tls_error.empty() && (tls_error.back() == '\n' || tls_error.back() == '\r')) {
            tls_error.pop_back();
        }
        if (!tls_error.empty()) {
            return "TLS handshake with " + broker.uri + " failed: " + tls_error +
                   " (check that ca_file '" + broker.ca_file +
                   "' holds the CA that signed the broker's certificate, and that the certificate "
                   "names the host in the uri)";
        }
        switch (e.get_reason_code()) {
            case 4:
            case 5:
                return "upstream " + broker.uri + " refused the login of client '" +
                       broker.client_id + "' as user '" + broker.username +
                       "' (check username and password_file): " + e.what();
            default:
                break;
        }
        return "cannot connect to " + broker.uri + ": " + e.what();
    }

    // After a (re)connect: acknowledged rows are deleted, so the oldest row left is the first
    // not known to be upstream.
    void rewind() {
        {
            std::lock_guard lock(mutex_);
            inflight_.clear();
        }
        buffer_.clear();
        next_seq_ = 0;
        outbox_drained_ = false;
    }

    bool take_link_lost() {
        std::string cause;
        {
            std::lock_guard lock(mutex_);
            if (!link_lost_) return false;
            link_lost_ = false;
            cause = lost_cause_;
            stats_.link_up = false;
            stats_.offline_since_ms = wall_ms();
            // Acknowledgements of what was in flight will not come: those rows are re-sent.
            inflight_.clear();
        }
        set_error(options_.broker.uri + ": " + cause);
        return true;
    }

    void collect_acks() {
        std::lock_guard lock(mutex_);
        if (acked_.empty()) return;
        if (to_delete_.empty()) oldest_ack_at_ = Clock::now();
        to_delete_.insert(to_delete_.end(), acked_.begin(), acked_.end());
        acked_.clear();
    }

    bool delete_due() const {
        return !to_delete_.empty() &&
               (to_delete_.size() >= options_.delete_batch_rows ||
                ms_between(oldest_ack_at_, Clock::now()) >= options_.delete_interval_ms);
    }

    void flush_deletes() {
        collect_acks();
        if (to_delete_.empty()) return;
        std::sort(to_delete_.begin(), to_delete_.end());
        to_delete_.erase(std::unique(to_delete_.begin(), to_delete_.end()), to_delete_.end());
        if (auto ok = source_.delivered(to_delete_); !ok) {
            // Kept for the next attempt; fill_window() stops sending while this backlog is full.
            set_error("outbox: cannot delete delivered rows: " + ok.error().message);
            return;
        }
        to_delete_.clear();
    }

    size_t inflight_count() const {
        std::lock_guard lock(mutex_);
        return inflight_.size();
    }

    void fill_window() {
        const size_t max_inflight = static_cast<size_t>(options_.broker.max_inflight);
        // Bound on acknowledged rows not yet deleted (delivered() failing): stop sending more.
        const size_t undeleted_rows_max = options_.delete_batch_rows + max_inflight;
        if (to_delete_.size() >= undeleted_rows_max) return;
        while (inflight_count() < max_inflight) {
            if (buffer_.empty()) {
                if (outbox_drained_) break;
                auto rows = source_.peek(next_seq_, options_.peek_rows);
                if (!rows) {
                    set_error("outbox: cannot read rows to forward: " + rows.error().message);
                    outbox_drained_ = true;  // retried on notify() or after poll_interval_ms
                    break;
                }
                outbox_drained_ = rows->size() < options_.peek_rows;
                if (rows->empty()) break;
                TM_ASSERT(rows->front().seq >= next_seq_);
                for (auto& row : *rows)
                    buffer_.push_back(std::move(row));
            }
            if (!publish(buffer_.front())) break;
            next_seq_ = buffer_.front().seq + 1;
            buffer_.pop_front();
        }
        if (next_seq_ > claimed_) {
            claimed_ = next_seq_;
            source_.claimed(claimed_);
        }
    }

    bool publish(const OutboundRow& row) {
        uintptr_t publish_id;
        {
            // Registered before publish() so that an acknowledgement racing back finds it.
            std::lock_guard lock(mutex_);
            publish_id = next_publish_id_++;
            inflight_.emplace(publish_id, row.seq);
        }
        try {
            auto message = ::mqtt::make_message(row.topic, row.payload, options_.qos, false);
            client_->publish(std::move(message), reinterpret_cast<void*>(publish_id), *this);
        } catch (const ::mqtt::exception& e) {
            std::lock_guard lock(mutex_);
            inflight_.erase(publish_id);
            if (!link_lost_) {
                link_lost_ = true;
                lost_cause_ = std::string("publish refused: ") + e.what();
            }
            return false;
        }
        std::lock_guard lock(mutex_);
        ++stats_.sends;
        return true;
    }

    void wait_for_work() {
        auto timeout = milliseconds(options_.poll_interval_ms);
        if (!to_delete_.empty()) {
            const int64_t due_ms =
                options_.delete_interval_ms - ms_between(oldest_ack_at_, Clock::now());
            timeout = std::min(timeout, milliseconds(std::max<int64_t>(due_ms, 0)));
        }
        std::unique_lock lock(mutex_);
        const bool woke = wake_.wait_for(lock, timeout, [this] {
            return stopping_ || notified_ || link_lost_ || !acked_.empty();
        });
        if (notified_ || !woke) outbox_drained_ = false;  // new rows, or time to look again
        notified_ = false;
    }

    void shut_down(bool connected) {
        Clock::time_point deadline;
        {
            std::lock_guard lock(mutex_);
            deadline = stop_deadline_;
        }
        if (connected) {
            // Let in-flight rows be acknowledged so they need not be sent again next run.
            std::unique_lock lock(mutex_);
            wake_.wait_until(lock, deadline, [this] { return inflight_.empty() || link_lost_; });
        }
        flush_deletes();
        if (connected) {
            try {
                const auto left_ms = std::max<int64_t>(ms_between(Clock::now(), deadline), 0);
                client_->disconnect(static_cast<int>(left_ms))
                    ->wait_for(milliseconds(left_ms + 100));
            } catch (const ::mqtt::exception& e) {
                log_line(options_.broker.client_id, std::string("disconnect: ") + e.what());
            }
        }
        std::lock_guard lock(mutex_);
        stats_.link_up = false;
        inflight_.clear();
    }

    const ForwarderOptions options_;
    OutboxSource& source_;
    std::unique_ptr<::mqtt::async_client> client_;
    std::thread thread_;

    // Shared with Paho's callback threads and stats() readers.
    mutable std::mutex mutex_;
    std::condition_variable wake_;
    bool stopping_ = false;
    Clock::time_point stop_deadline_;
    bool notified_ = false;
    bool link_lost_ = false;
    std::string lost_cause_;
    std::string tls_error_;
    /// publish id -> seq of rows published on the current connection and not yet acknowledged;
    /// at most broker.max_inflight entries.
    std::unordered_map<uintptr_t, uint64_t> inflight_;
    uintptr_t next_publish_id_ = 1;
    /// Acknowledged seqs not yet taken by the forwarder's thread; at most max_inflight.
    std::vector<uint64_t> acked_;
    ForwarderStats stats_;
    Clock::time_point connected_at_;

    // The forwarder's thread only.
    std::deque<OutboundRow> buffer_;  ///< at most peek_rows rows
    uint64_t next_seq_ = 0;
    uint64_t claimed_ = 0;
    bool outbox_drained_ = false;
    std::vector<uint64_t> to_delete_;
    Clock::time_point oldest_ack_at_;
};

Result<std::unique_ptr<Forwarder>> Forwarder::create(ForwarderOptions options,
                                                     OutboxSource& source) {
    const BrokerOptions& broker = options.broker;
    if (auto ok = validate(broker); !ok) return std::unexpected(ok.error());
    if (options.qos != 0 && options.qos != 1) {
        return fail(broker.config_name + ".qos is " + std::to_string(options.qos) + ": use 0 or 1");
    }
    if (options.peek_rows == 0 || options.delete_batch_rows == 0) {
        return fail("forwarder: peek_rows and delete_batch_rows must be at least 1");
    }
    std::unique_ptr<::mqtt::async_client> client;
    try {
        // No Paho persistence: the outbox is the store, and re-sending comes from it.
        // Paho counts queued publishes against max_buffered_messages even while connected
        // (MQTTASYNC_MAX_BUFFERED_MESSAGES); our window never queues more than max_inflight.
        const int buffered_messages_max = broker.max_inflight + 16;
        client = std::make_unique<::mqtt::async_client>(
            broker.uri, broker.client_id,
            ::mqtt::create_options(MQTTVERSION_3_1_1, buffered_messages_max), nullptr);
    } catch (const ::mqtt::exception& e) {
        return fail(broker.config_name + ".uri '" + broker.uri + "' is not usable: " + e.what());
    }
    auto impl = std::make_unique<Impl>(std::move(options), source, std::move(client));
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
