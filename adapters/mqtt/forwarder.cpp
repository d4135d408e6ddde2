#include "adapters/mqtt/forwarder.h"

#include <mosquitto.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <condition_variable>
#include <cstring>
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

// libmosquitto's global set-up (OpenSSL, sockets) is not thread-safe: once per process.
void library_init() {
    static std::once_flag once;
    std::call_once(once, [] { mosquitto_lib_init(); });
}

// validate() has checked the form scheme://host:port.
std::pair<std::string, int> host_and_port(const std::string& uri) {
    const std::string rest = uri.substr(uri.find("://") + 3);
    const size_t colon = rest.rfind(':');
    std::string host = rest.substr(0, colon);
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
        host = host.substr(1, host.size() - 2);  // [::1]:1883
    }
    int port = 0;
    std::from_chars(rest.data() + colon + 1, rest.data() + rest.size(), port);
    return {host, port};
}

// An encrypted private key has no one to type its passphrase under systemd: refuse it with
// OpenSSL's own error instead of prompting on a terminal.
int no_passphrase(char*, int, int, void*) {
    return 0;
}

// Acknowledged rows waiting for their delete, at least (more with a larger max_inflight):
// beyond it sending pauses until the disk catches up.
constexpr size_t undeleted_rows_floor = 4096;

// MQTT keep-alive below 5 s is refused by libmosquitto.
constexpr int keep_alive_s_min = 5;

}  // namespace

class Forwarder::Impl {
  public:
    Impl(ForwarderOptions options, std::vector<OutboxSource*> sources, int wake_fd)
        : options_(std::move(options)), wake_fd_(wake_fd) {
        streams_.resize(sources.size());
        delete_queue_.resize(sources.size());
        for (size_t i = 0; i < sources.size(); ++i)
            streams_[i].source = sources[i];
        inflight_.reserve(static_cast<size_t>(options_.broker.max_inflight));
        std::tie(host_, port_) = host_and_port(options_.broker.uri);
    }

    ~Impl() {
        stop(milliseconds(1000));
        ::close(wake_fd_);
    }

    Result<void> start() {
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

    void notify() {
        notified_.store(true, std::memory_order_release);
        wake();
    }

    void stop(milliseconds timeout) {
        {
            std::lock_guard lock(mutex_);
            if (!stopping_.load()) stop_deadline_ = Clock::now() + timeout;
        }
        stopping_.store(true);
        wake();
        if (thread_.joinable()) thread_.join();
        stop_deleter();
    }

    ForwarderStats stats() const {
        std::lock_guard lock(mutex_);
        return stats_;
    }

  private:
    // One source of rows, e.g. the results' outbox or the side output.
    struct Stream {
        OutboxSource* source = nullptr;
        std::deque<OutboundRow> buffer;   ///< at most peek_rows rows
        uint64_t next_seq = 0;            ///< the next row to read
        uint64_t claimed = 0;             ///< told to the source; never decreases
        bool drained = false;             ///< the last peek came back short: wait for news
        std::vector<uint64_t> to_delete;  ///< acknowledged, not yet deleted
    };
    struct InflightRow {
        uint32_t stream = 0;
        uint64_t seq = 0;
    };

    void wake() {
        const uint64_t one = 1;
        // A full counter (never in practice) already means "wake up": nothing to handle.
        [[maybe_unused]] const ssize_t n = ::write(wake_fd_, &one, sizeof one);
    }

    void drain_wake() {
        uint64_t count;
        [[maybe_unused]] const ssize_t n = ::read(wake_fd_, &count, sizeof count);
    }

    void set_error(const std::string& message) {
        bool changed;
        {
            std::lock_guard lock(mutex_);
            changed = stats_.last_error != message;
            stats_.last_error = message;
        }
        if (changed) spdlog::warn("forwarder [{}]: {}", options_.broker.client_id, message);
    }

    // ---- libmosquitto callbacks: they run inside mosquitto_* calls on this thread ----

    static void on_connect(mosquitto*, void* self, int rc) {
        auto* impl = static_cast<Impl*>(self);
        impl->connack_received_ = true;
        impl->connack_rc_ = rc;
    }

    static void on_disconnect(mosquitto*, void* self, int rc) {
        auto* impl = static_cast<Impl*>(self);
        impl->link_lost_ = true;
        if (impl->lost_cause_.empty()) {
            impl->lost_cause_ = rc == 0 ? std::string("disconnected")
                                        : std::string("connection lost: ") + mosquitto_strerror(rc);
        }
    }

    static void on_publish(mosquitto*, void* self, int mid) {
        static_cast<Impl*>(self)->acknowledged(mid);
    }

    static void on_log(mosquitto*, void* self, int level, const char* text) {
        auto* impl = static_cast<Impl*>(self);
        // OpenSSL's own words (e.g. "certificate verify failed") for the connect error.
        if ((level & MOSQ_LOG_ERR) != 0 && impl->tls_error_.empty() &&
            std::strstr(text, "OpenSSL") != nullptr) {
            impl->tls_error_ = text;
        }
    }

    // A PUBACK (QoS1), or the PUBLISH written to the socket (QoS0).
    void acknowledged(int mid) {
        last_ack_at_ = Clock::now();
        const auto it = inflight_.find(mid);
        if (it == inflight_.end()) {
            // At QoS0 the callback may run inside mosquitto_publish(), before publish() has
            // recorded the mid; publish() looks here afterwards.
            early_acks_.push_back(mid);
            return;
        }
        Stream& stream = streams_[it->second.stream];
        if (undeleted_rows() == 0) oldest_ack_at_ = Clock::now();
        stream.to_delete.push_back(it->second.seq);
        inflight_.erase(it);
        ++acks_;
        if (!first_ack_seen_) {
            first_ack_seen_ = true;
            std::lock_guard lock(mutex_);
            stats_.first_row_after_reconnect_ms = ms_between(connected_at_, Clock::now());
        }
    }

    // ---- the forwarder's thread ----

    void run() {
        std::mt19937_64 rng(std::random_device{}());
        std::uniform_real_distribution<double> jitter(0.5, 1.0);
        int failed_attempts = 0;
        bool ever_connected = false;
        while (!stopping_.load()) {
            if (mosq_ == nullptr) {
                if (auto ok = connect(); !ok) {
                    destroy_client();
                    {
                        std::lock_guard lock(mutex_);
                        ++stats_.connect_failures;
                        if (stats_.offline_since_ms == 0) stats_.offline_since_ms = wall_ms();
                    }
                    set_error(ok.error().message);
                    const auto delay = milliseconds(static_cast<int64_t>(
                        static_cast<double>(
                            reconnect_delay(failed_attempts,
                                            milliseconds(options_.reconnect_delay_min_ms),
                                            milliseconds(options_.reconnect_delay_max_ms))
                                .count()) *
                        jitter(rng)));
                    ++failed_attempts;
                    wait_for_wake(delay);
                    continue;
                }
                failed_attempts = 0;
                {
                    std::lock_guard lock(mutex_);
                    stats_.link_up = true;
                    stats_.offline_since_ms = 0;
                    if (ever_connected) ++stats_.reconnects;
                }
                spdlog::info("forwarder [{}]: {} {}", options_.broker.client_id,
                             ever_connected ? "reconnected to" : "connected to",
                             options_.broker.uri);
                ever_connected = true;
                rewind();
            }
            pump();
            if (link_lost_) link_down();  // the first reconnect attempt is immediate
        }
        shut_down();
    }

    void wait_for_wake(milliseconds timeout) {
        pollfd fd{wake_fd_, POLLIN, 0};
        if (::poll(&fd, 1, static_cast<int>(timeout.count())) > 0) drain_wake();
    }

    void destroy_client() {
        if (mosq_ != nullptr) mosquitto_destroy(mosq_);  // closes the socket; no callbacks
        mosq_ = nullptr;
    }

    // Connects on a clean session; fails with a message that names the uri and the likely cause.
    // A fresh client each time: libmosquitto would otherwise re-send its own in-flight copies on
    // the new connection, beside the outbox's.
    Result<void> connect() {
        destroy_client();
        last_ack_at_ = last_send_at_ = Clock::now();
        inflight_.clear();
        early_acks_.clear();
        link_lost_ = false;
        lost_cause_.clear();
        tls_error_.clear();
        connack_received_ = false;
        connack_rc_ = 0;
        const BrokerOptions& broker = options_.broker;

        mosq_ = mosquitto_new(broker.client_id.c_str(), /*clean_session=*/true, this);
        if (mosq_ == nullptr)
            return fail(std::string("cannot create an MQTT client: ") + std::strerror(errno));
        mosquitto_int_option(mosq_, MOSQ_OPT_PROTOCOL_VERSION, MQTT_PROTOCOL_V311);
        // Rows go out as they are published, not after Nagle's delay.
        mosquitto_int_option(mosq_, MOSQ_OPT_TCP_NODELAY, 1);
        // The window is ours (max_inflight): libmosquitto must not queue behind its own quota.
        mosquitto_max_inflight_messages_set(mosq_, 0);
        mosquitto_connect_callback_set(mosq_, on_connect);
        mosquitto_disconnect_callback_set(mosq_, on_disconnect);
        mosquitto_publish_callback_set(mosq_, on_publish);
        mosquitto_log_callback_set(mosq_, on_log);
        if (!broker.username.empty()) {
            const int rc = mosquitto_username_pw_set(
                mosq_, broker.username.c_str(),
                broker.password.empty() ? nullptr : broker.password.c_str());
            if (rc != MOSQ_ERR_SUCCESS) {
                return fail(broker.config_name + ": user name or password refused by the client: " +
                            mosquitto_strerror(rc));
            }
        }
        if (uses_tls(broker)) {
            if (auto ok = set_tls(); !ok) return ok;
        }

        const int keep_alive_s = std::max(broker.keep_alive_s, keep_alive_s_min);
        errno = 0;
        const int rc = mosquitto_connect_async(mosq_, host_.c_str(), port_, keep_alive_s);
        if (rc != MOSQ_ERR_SUCCESS) return fail(describe_connect_failure(rc, errno));

        const auto timeout = std::chrono::seconds(broker.connect_timeout_s);
        const auto deadline = Clock::now() + timeout;
        while (!connack_received_) {
            if (stopping_.load()) return fail("stopped while connecting");
            if (Clock::now() > deadline) {
                return fail("connect to " + broker.uri + " timed out after " +
                            std::to_string(timeout.count()) + " s");
            }
            int error = 0;
            const int step = poll_client(milliseconds(100), error);
            if (step != MOSQ_ERR_SUCCESS) return fail(describe_connect_failure(step, error));
            if (link_lost_ && !connack_received_) {
                return fail(describe_connect_failure(MOSQ_ERR_CONN_LOST, 0));
            }
        }
        if (connack_rc_ != 0) return fail(describe_connack(connack_rc_));
        connected_at_ = Clock::now();
        first_ack_seen_ = false;
        std::lock_guard lock(mutex_);
        stats_.first_row_after_reconnect_ms.reset();
        return {};
    }

    Result<void> set_tls() {
        const BrokerOptions& broker = options_.broker;
        auto or_null = [](const std::string& s) { return s.empty() ? nullptr : s.c_str(); };
        if (broker.ca_file.empty()) {
            // No CA named: the system's trust store, as a browser would.
            mosquitto_int_option(mosq_, MOSQ_OPT_TLS_USE_OS_CERTS, 1);
        }
        int rc =
            mosquitto_tls_set(mosq_, or_null(broker.ca_file), nullptr, or_null(broker.cert_file),
                              or_null(broker.key_file), no_passphrase);
        if (rc != MOSQ_ERR_SUCCESS) {
            return fail(broker.config_name + ".tls: cannot use ca_file '" + broker.ca_file +
                        "', cert_file '" + broker.cert_file + "', key_file '" + broker.key_file +
                        "': " + mosquitto_strerror(rc));
        }
        // Verify the broker's certificate chain and that it names the host in the uri.
        rc = mosquitto_tls_opts_set(mosq_, 1 /* SSL_VERIFY_PEER */, nullptr, nullptr);
        if (rc == MOSQ_ERR_SUCCESS) rc = mosquitto_tls_insecure_set(mosq_, false);
        if (rc != MOSQ_ERR_SUCCESS) {
            return fail(broker.config_name + ".tls: " + mosquitto_strerror(rc));
        }
        return {};
    }

    std::string describe_connect_failure(int rc, int error) const {
        const BrokerOptions& broker = options_.broker;
        std::string tls_error = tls_error_;
        while (!tls_error.empty() && (tls_error.back() == '\n' || tls_error.back() == '\r')) {
            tls_error.pop_back();
        }
        if (!tls_error.empty() || rc == MOSQ_ERR_TLS) {
            return "TLS handshake with " + broker.uri + " failed: " +
                   (tls_error.empty() ? std::string(mosquitto_strerror(rc)) : tls_error) +
                   " (check that ca_file '" + broker.ca_file +
                   "' holds the CA that signed the broker's certificate, and that the certificate "
                   "names the host in the uri)";
        }
        if (rc == MOSQ_ERR_ERRNO && error != 0) {
            return "cannot connect to " + broker.uri + ": " + std::strerror(error);
        }
        if (rc == MOSQ_ERR_EAI) return "cannot resolve the host of " + broker.uri;
        return "cannot connect to " + broker.uri + ": " + mosquitto_strerror(rc);
    }

    std::string describe_connack(int rc) const {
        const BrokerOptions& broker = options_.broker;
        if (rc == 4 || rc == 5) {
            return "upstream " + broker.uri + " refused the login of client '" + broker.client_id +
                   "' as user '" + broker.username +
                   "' (check username and password_file): " + mosquitto_connack_string(rc);
        }
        return "upstream " + broker.uri +
               " refused the connection: " + mosquitto_connack_string(rc);
    }

    // One round of socket work: waits up to `timeout` for the socket (or a wake-up), then reads,
    // writes and keeps the connection alive. Returns a libmosquitto error code; `error` is errno
    // when that code is MOSQ_ERR_ERRNO.
    int poll_client(milliseconds timeout, int& error) {
        const int sock = mosquitto_socket(mosq_);
        if (sock < 0) return MOSQ_ERR_NO_CONN;
        pollfd fds[2] = {
            {sock, static_cast<short>(POLLIN | (mosquitto_want_write(mosq_) ? POLLOUT : 0)), 0},
            {wake_fd_, POLLIN, 0}};
        const int ready = ::poll(fds, 2, static_cast<int>(std::max<int64_t>(timeout.count(), 0)));
        if (ready < 0 && errno != EINTR) {
            error = errno;
            return MOSQ_ERR_ERRNO;
        }
        if (ready > 0 && (fds[1].revents & POLLIN) != 0) drain_wake();
        int rc = MOSQ_ERR_SUCCESS;
        errno = 0;
        if (ready > 0 && (fds[0].revents & (POLLIN | POLLERR | POLLHUP)) != 0) {
            // Every PUBACK that has arrived, not one per poll.
            rc = mosquitto_loop_read(mosq_, options_.broker.max_inflight);
            // Acknowledge the broker's segments at once. A broker with Nagle on (mosquitto's
            // default) holds its next PUBACKs until our TCP ACK of the last one; with our ACK
            // delayed, a full window waited on the delayed-ACK timer, and on this project's VMs
            // stalled for minutes (bench_forward reproduced it in bursts mode every run).
            // Linux clears the flag after use: set it after every read.
            const int one = 1;
            ::setsockopt(sock, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof one);
        }
        if (rc == MOSQ_ERR_SUCCESS && ready > 0 && (fds[0].revents & POLLOUT) != 0) {
            rc = mosquitto_loop_write(mosq_, 1);
        }
        if (rc == MOSQ_ERR_SUCCESS) rc = mosquitto_loop_misc(mosq_);  // keep-alive
        error = errno;
        return rc;
    }

    void rewind() {
        for (Stream& stream : streams_) {
            stream.buffer.clear();
            stream.next_seq = 0;
            stream.drained = false;
        }
        last_look_ = Clock::now();
    }

    // One turn of the connected loop: send what the window allows, wait for the socket, read
    // the acknowledgements, delete what is due.
    void pump() {
        if (delete_due()) flush_deletes();
        fill_window();
        publish_stats();
        if (link_lost_) return;

        auto timeout = milliseconds(options_.poll_interval_ms);
        if (undeleted_rows() > 0) {
            const int64_t due_ms =
                options_.delete_interval_ms - ms_between(oldest_ack_at_, Clock::now());
            timeout = std::min(timeout, milliseconds(std::max<int64_t>(due_ms, 0)));
        }
        int error = 0;
        const int rc = poll_client(timeout, error);
        if (!inflight_.empty() && !link_lost_ &&
            ms_between(std::max(last_ack_at_, last_send_at_), Clock::now()) >
                options_.ack_timeout_ms) {
            // The connection looks alive but acknowledges nothing: start over on a new one
            // rather than wait forever (the rows are re-sent; upstream dedupes by id).
            link_lost_ = true;
            lost_cause_ = "no acknowledgement for " + std::to_string(options_.ack_timeout_ms) +
                          " ms with " + std::to_string(inflight_.size()) + " rows in flight";
        }
        if (rc != MOSQ_ERR_SUCCESS && !link_lost_) {
            link_lost_ = true;
            lost_cause_ = rc == MOSQ_ERR_ERRNO && error != 0
                              ? std::string("connection lost: ") + std::strerror(error)
                              : std::string("connection lost: ") + mosquitto_strerror(rc);
        }
        if (notified_.exchange(false, std::memory_order_acq_rel) ||
            ms_between(last_look_, Clock::now()) >= options_.poll_interval_ms) {
            // New rows, or time to look again (an outbox error, rows from elsewhere).
            for (Stream& stream : streams_)
                stream.drained = false;
            last_look_ = Clock::now();
        }
    }

    size_t undeleted_rows() const {
        size_t n = 0;
        for (const Stream& stream : streams_)
            n += stream.to_delete.size();
        return n;
    }

    bool delete_due() const {
        const size_t n = undeleted_rows();
        return n > 0 && (n >= options_.delete_batch_rows ||
                         ms_between(oldest_ack_at_, Clock::now()) >= options_.delete_interval_ms);
    }

    // Hands the acknowledged rows to the deleter thread: an LMDB commit syncs to disk, and the
    // link must not stand idle meanwhile. Rows acknowledged while a commit runs go in the next
    // one, so slower disks get larger transactions.
    void flush_deletes() {
        if (undeleted_rows() == 0) return;
        {
            std::lock_guard lock(delete_mutex_);
            for (size_t i = 0; i < streams_.size(); ++i) {
                auto& rows = streams_[i].to_delete;
                delete_queue_[i].insert(delete_queue_[i].end(), rows.begin(), rows.end());
                delete_queued_rows_ += rows.size();
                rows.clear();
            }
        }
        delete_changed_.notify_all();
    }

    size_t queued_deletes() const {
        std::lock_guard lock(delete_mutex_);
        return delete_queued_rows_;
    }

    // Before re-reading the outbox from its oldest row, or stopping: every acknowledged row
    // deleted, so that none is sent again needlessly.
    void wait_for_deletes(Clock::time_point deadline) {
        flush_deletes();
        std::unique_lock lock(delete_mutex_);
        delete_changed_.wait_until(lock, deadline, [this] { return delete_queued_rows_ == 0; });
    }

    // The deleter thread: source->delivered() for what flush_deletes() handed over.
    void run_deleter() {
        std::unique_lock lock(delete_mutex_);
        while (true) {
            delete_changed_.wait(lock, [this] { return deleter_stop_ || delete_queued_rows_ > 0; });
            if (delete_queued_rows_ == 0) return;  // stopping, nothing left
            bool failed = false;
            for (size_t i = 0; i < streams_.size(); ++i) {
                if (delete_queue_[i].empty()) continue;
                std::vector<uint64_t> batch;
                batch.swap(delete_queue_[i]);
                const size_t handed = batch.size();
                lock.unlock();
                std::sort(batch.begin(), batch.end());
                batch.erase(std::unique(batch.begin(), batch.end()), batch.end());
                auto ok = streams_[i].source->delivered(batch);
                if (!ok) set_error("outbox: cannot delete delivered rows: " + ok.error().message);
                lock.lock();
                if (ok) {
                    delete_queued_rows_ -= handed;
                } else {
                    // Kept for the next attempt; fill_window() stops sending while this
                    // backlog is full.
                    delete_queue_[i].insert(delete_queue_[i].end(), batch.begin(), batch.end());
                    delete_queued_rows_ -= handed - batch.size();
                    failed = true;
                }
            }
            delete_changed_.notify_all();
            wake();  // the forwarder may be held back by the undeleted bound
            if (failed) {
                if (deleter_stop_) return;  // the rows stay in the outbox: re-sent next run
                delete_changed_.wait_for(lock, milliseconds(options_.poll_interval_ms),
                                         [this] { return deleter_stop_; });
            }
        }
    }

    void stop_deleter() {
        {
            std::lock_guard lock(delete_mutex_);
            deleter_stop_ = true;
        }
        delete_changed_.notify_all();
        if (deleter_.joinable()) deleter_.join();
    }

    void fill_window() {
        const size_t max_inflight = static_cast<size_t>(options_.broker.max_inflight);
        // Bound on acknowledged rows not yet deleted (a slow disk, delivered() failing): stop
        // sending more until the deleter catches up.
        const size_t undeleted_rows_max =
            options_.delete_batch_rows + std::max<size_t>(undeleted_rows_floor, 4 * max_inflight);
        if (undeleted_rows() + queued_deletes() >= undeleted_rows_max) return;
        // No refilling in bursts (only once half the window is acknowledged): against a broker
        // with Nagle on (mosquitto's default), PUBACKs then wait for the TCP ACK that our next
        // PUBLISH would have carried, and the drain crawls at the delayed-ACK timer's pace.
        for (uint32_t index = 0; index < streams_.size(); ++index) {
            Stream& stream = streams_[index];
            while (inflight_.size() < max_inflight) {
                if (stream.buffer.empty() && !refill(stream)) break;
                if (!publish(index, stream.buffer.front())) return;  // the link is down
                stream.next_seq = stream.buffer.front().seq + 1;
                stream.buffer.pop_front();
            }
            if (stream.next_seq > stream.claimed) {
                stream.claimed = stream.next_seq;
                stream.source->claimed(stream.claimed);
            }
            if (inflight_.size() >= max_inflight) break;
        }
    }

    bool refill(Stream& stream) {
        if (stream.drained) return false;
        auto rows = stream.source->peek(stream.next_seq, options_.peek_rows);
        if (!rows) {
            set_error("outbox: cannot read rows to forward: " + rows.error().message);
            stream.drained = true;  // retried on notify() or after poll_interval_ms
            return false;
        }
        stream.drained = rows->size() < options_.peek_rows;
        if (rows->empty()) return false;
        TM_ASSERT(rows->front().seq >= stream.next_seq);
        for (auto& row : *rows)
            stream.buffer.push_back(std::move(row));
        return true;
    }

    // False when the link is down. A row no broker can take counts as handled: it is deleted.
    bool publish(uint32_t stream_index, const OutboundRow& row) {
        int mid = 0;
        early_acks_.clear();
        const int rc =
            mosquitto_publish(mosq_, &mid, row.topic.c_str(), static_cast<int>(row.payload.size()),
                              row.payload.data(), options_.qos, /*retain=*/false);
        switch (rc) {
            case MOSQ_ERR_SUCCESS:
                ++sends_;
                if (inflight_.empty()) last_send_at_ = Clock::now();
                inflight_.emplace(mid, InflightRow{stream_index, row.seq});
                if (std::find(early_acks_.begin(), early_acks_.end(), mid) != early_acks_.end()) {
                    acknowledged(mid);
                }
                early_acks_.clear();
                return true;
            case MOSQ_ERR_INVAL:
            case MOSQ_ERR_MALFORMED_UTF8:
            case MOSQ_ERR_PAYLOAD_SIZE:
            case MOSQ_ERR_OVERSIZE_PACKET: {
                // No broker will ever take this row: keeping it would stop every row behind it.
                ++rejected_;
                spdlog::error(
                    "forwarder [{}]: row {} on topic '{}' ({} bytes) cannot be sent over MQTT "
                    "and is deleted: {}",
                    options_.broker.client_id, row.seq, row.topic, row.payload.size(),
                    mosquitto_strerror(rc));
                Stream& stream = streams_[stream_index];
                if (undeleted_rows() == 0) oldest_ack_at_ = Clock::now();
                stream.to_delete.push_back(row.seq);
                return true;
            }
            default:
                if (!link_lost_) {
                    link_lost_ = true;
                    lost_cause_ = std::string("publish failed: ") + mosquitto_strerror(rc);
                }
                return false;
        }
    }

    void publish_stats() {
        std::lock_guard lock(mutex_);
        stats_.sends = sends_;
        stats_.acks = acks_;
        stats_.rejected = rejected_;
        stats_.inflight = inflight_.size();
    }

    // Acknowledged rows are deleted; what was in flight is sent again from the oldest row left.
    void link_down() {
        wait_for_deletes(Clock::now() + milliseconds(options_.poll_interval_ms));
        inflight_.clear();
        destroy_client();
        {
            std::lock_guard lock(mutex_);
            stats_.link_up = false;
            stats_.offline_since_ms = wall_ms();
            stats_.inflight = 0;
        }
        set_error(options_.broker.uri + ": " + lost_cause_);
    }

    void shut_down() {
        Clock::time_point deadline;
        {
            std::lock_guard lock(mutex_);
            deadline = stop_deadline_;
        }
        if (mosq_ != nullptr && !link_lost_) {
            // Let in-flight rows be acknowledged so they need not be sent again next run.
            while (!inflight_.empty() && !link_lost_ && Clock::now() < deadline) {
                int error = 0;
                if (poll_client(milliseconds(std::min<int64_t>(
                                    50, std::max<int64_t>(ms_between(Clock::now(), deadline), 0))),
                                error) != MOSQ_ERR_SUCCESS) {
                    break;
                }
            }
        }
        wait_for_deletes(std::max(deadline, Clock::now() + milliseconds(100)));
        if (mosq_ != nullptr && !link_lost_) {
            mosquitto_disconnect(mosq_);
            while (mosquitto_want_write(mosq_) && Clock::now() < deadline) {
                int error = 0;
                if (poll_client(milliseconds(20), error) != MOSQ_ERR_SUCCESS) break;
            }
        }
        destroy_client();
        publish_stats();
        std::lock_guard lock(mutex_);
        stats_.link_up = false;
        stats_.inflight = 0;
    }

    const ForwarderOptions options_;
    const int wake_fd_;  ///< eventfd: notify() and stop() wake the thread's poll
    std::string host_;
    int port_ = 0;
    std::thread thread_;
    std::thread deleter_;
    std::atomic<bool> stopping_{false};
    std::atomic<bool> notified_{false};

    // Shared with stats() readers and stop().
    mutable std::mutex mutex_;
    Clock::time_point stop_deadline_;
    ForwarderStats stats_;

    // The forwarder's thread only (callbacks included).
    mosquitto* mosq_ = nullptr;
    std::vector<Stream> streams_;
    /// mid -> row, for rows published on the current connection and not yet acknowledged; at
    /// most broker.max_inflight entries.
    std::unordered_map<int, InflightRow> inflight_;
    std::vector<int> early_acks_;  ///< at most one: the publish in progress (QoS0)
    bool link_lost_ = false;
    std::string lost_cause_;
    std::string tls_error_;
    bool connack_received_ = false;
    int connack_rc_ = 0;
    Clock::time_point connected_at_;
    bool first_ack_seen_ = false;
    Clock::time_point oldest_ack_at_;
    Clock::time_point last_look_;
    Clock::time_point last_ack_at_;   ///< the latest acknowledgement
    Clock::time_point last_send_at_;  ///< the latest publish into an empty window
    uint64_t sends_ = 0;
    uint64_t acks_ = 0;
    uint64_t rejected_ = 0;

    // Shared by the forwarder's thread and the deleter.
    mutable std::mutex delete_mutex_;
    std::condition_variable delete_changed_;
    std::vector<std::vector<uint64_t>> delete_queue_;  ///< per stream: handed over, not deleted
    size_t delete_queued_rows_ = 0;  ///< in delete_queue_ or being deleted; bounded by fill_window
    bool deleter_stop_ = false;
};

Result<std::unique_ptr<Forwarder>> Forwarder::create(ForwarderOptions options,
                                                     OutboxSource& source) {
    return create(std::move(options), std::vector<OutboxSource*>{&source});
}

Result<std::unique_ptr<Forwarder>> Forwarder::create(ForwarderOptions options,
                                                     std::vector<OutboxSource*> sources) {
    const BrokerOptions& broker = options.broker;
    if (auto ok = validate(broker); !ok) return std::unexpected(ok.error());
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
    library_init();
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
