// The forwarder's inside (internal to adapters/mqtt), one class over three files by job:
// forwarder.cpp (the thread: connect, backoff, link lost, stop), forwarder_link.cpp (the
// libmosquitto connection: options, TLS, socket work, messages) and forwarder_rows.cpp (rows
// out of the sources and their deletes).
#pragma once

#include <mosquitto.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "adapters/mqtt/forwarder.h"
#include "adapters/mqtt/forwarder_timing.h"
#include "adapters/mqtt/mosquitto_options.h"
#include "adapters/mqtt/node_rotation.h"

namespace tidemark::mqtt {

class Forwarder::Impl {
  public:
    Impl(ForwarderOptions options, std::vector<OutboxSource*> sources, int wake_fd);
    ~Impl();

    Result<void> start();
    void notify();
    void stop(std::chrono::milliseconds timeout);
    ForwarderStats stats() const;

  private:
    // One source of rows, e.g. the results' outbox or the side output.
    struct Stream {
        OutboxSource* source = nullptr;
        std::deque<OutboundRow> buffer;   ///< at most peek_rows rows
        uint64_t next_seq = 0;            ///< the next row to read
        bool drained = false;             ///< the last peek came back short: wait for news
        std::vector<uint64_t> to_delete;  ///< acknowledged, not yet deleted
    };
    struct InflightRow {
        uint32_t stream = 0;
        uint64_t seq = 0;
    };

    // forwarder.cpp: the thread.
    void wake();
    void drain_wake();
    void wait_for_wake(int64_t timeout_ms);
    void set_error(const std::string& message);
    void run();
    void connect_failed(const std::string& message);
    void connected(bool again);
    void link_down();
    void shut_down();
    void publish_stats();

    // forwarder_link.cpp: the libmosquitto connection; callbacks run inside mosquitto_* calls
    // on the forwarder's thread.
    static void on_connect(mosquitto*, void* self, int rc);
    static void on_disconnect(mosquitto*, void* self, int rc);
    static void on_publish(mosquitto*, void* self, int mid);
    static void on_log(mosquitto*, void* self, int level, const char* text);
    Result<void> connect();
    Result<void> set_options(const BrokerAddress& node);
    Result<void> wait_for_connack();
    void destroy_client();
    int poll_client(int64_t timeout_ms, int& error);
    void lose_link(std::string cause);
    std::string describe_connect_failure(int rc, int error) const;
    std::string describe_connack(int rc) const;

    // forwarder_rows.cpp: rows out, acknowledgements in, deletes.
    void pump();
    void rewind();
    void fill_window();
    bool refill(Stream& stream);
    bool publish(uint32_t stream_index, const OutboundRow& row);
    void acknowledged(int mid);
    void mark_for_delete(Stream& stream, uint64_t seq);
    size_t undeleted_rows() const;
    bool delete_due() const;
    void flush_deletes();
    size_t queued_deletes() const;
    void wait_for_deletes(int64_t deadline_ms);
    void run_deleter();
    void stop_deleter();

    const ForwarderOptions options_;
    const core::Clock& clock_;
    const int wake_fd_;  ///< eventfd: notify() and stop() wake the thread's poll
    std::thread thread_;
    std::thread deleter_;
    std::atomic<bool> stopping_{false};
    std::atomic<bool> notified_{false};

    // Shared with stats() readers and stop().
    mutable std::mutex mutex_;
    int64_t stop_deadline_ms_ = 0;  ///< steady
    ForwarderStats stats_;

    // The forwarder's thread only (callbacks included).
    NodeRotation rotation_;
    std::string address_;  ///< the node of the current attempt or link, for messages
    /// Steady ms since the link was lost or the first attempt failed; -1 while none is running
    /// (ended by the first acknowledged row after it).
    int64_t outage_started_ms_ = -1;
    mosquitto* mosq_ = nullptr;
    LinkTimers timers_;
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
    bool first_ack_seen_ = false;
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

}  // namespace tidemark::mqtt
