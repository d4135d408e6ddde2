// The forwarder's rows: read from the sources in priority order, published within the
// in-flight window, acknowledged, and handed in batches to the deleter thread.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>

#include "adapters/mqtt/forwarder_impl.h"

namespace tidemark::mqtt {
namespace {

// Acknowledged rows waiting for their delete, at least (more with a larger max_inflight):
// beyond it sending pauses until the disk catches up.
constexpr size_t undeleted_rows_floor = 4096;

}  // namespace

size_t undeleted_rows_max(const ForwarderOptions& options) {
    const auto max_inflight = static_cast<size_t>(options.broker.max_inflight);
    return options.delete_batch_rows + std::max<size_t>(undeleted_rows_floor, 4 * max_inflight);
}

size_t crash_resend_rows_max(const ForwarderOptions& options) {
    // fill_window() sends only while acknowledged-undeleted rows are below undeleted_rows_max,
    // and then at most a window: those rows only move from in flight to acknowledged until the
    // next fill checks again.
    return undeleted_rows_max(options) - 1 + static_cast<size_t>(options.broker.max_inflight);
}

void Forwarder::Impl::rewind() {
    for (Stream& stream : streams_) {
        stream.buffer.clear();
        stream.next_seq = 0;
        stream.drained = false;
    }
    timers_.looked();
}

// One turn of the connected loop: send what the window allows, wait for the socket, read
// the acknowledgements, delete what is due.
void Forwarder::Impl::pump() {
    if (delete_due()) flush_deletes();
    fill_window();
    publish_stats();
    if (link_lost_) return;

    int64_t timeout_ms = options_.poll_interval_ms;
    if (undeleted_rows() > 0) timeout_ms = std::min(timeout_ms, timers_.delete_due_in_ms());
    int error = 0;
    const int rc = poll_client(timeout_ms, error);
    if (!inflight_.empty() && timers_.ack_overdue()) {
        // The connection looks alive but acknowledges nothing: start over on a new one
        // rather than wait forever (the rows are re-sent; upstream dedupes by id).
        lose_link("no acknowledgement for " + std::to_string(options_.ack_timeout_ms) +
                  " ms with " + std::to_string(inflight_.size()) + " rows in flight");
    }
    if (rc != MOSQ_ERR_SUCCESS) {
        lose_link(rc == MOSQ_ERR_ERRNO && error != 0
                      ? std::string("connection lost: ") + std::strerror(error)
                      : std::string("connection lost: ") + mosquitto_strerror(rc));
    }
    if (notified_.exchange(false, std::memory_order_acq_rel) || timers_.look_due()) {
        // New rows, or time to look again (an outbox error, rows from elsewhere).
        for (Stream& stream : streams_)
            stream.drained = false;
        timers_.looked();
    }
}

void Forwarder::Impl::fill_window() {
    const size_t max_inflight = static_cast<size_t>(options_.broker.max_inflight);
    // Bound on acknowledged rows not yet deleted (a slow disk, delivered() failing): stop
    // sending more until the deleter catches up. It is also what a crash re-sends.
    if (undeleted_rows() + queued_deletes() >= undeleted_rows_max(options_)) return;
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
        if (inflight_.size() >= max_inflight) break;
    }
}

bool Forwarder::Impl::refill(Stream& stream) {
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
bool Forwarder::Impl::publish(uint32_t stream_index, const OutboundRow& row) {
    int mid = 0;
    early_acks_.clear();
    const int rc =
        mosquitto_publish(mosq_, &mid, row.topic.c_str(), static_cast<int>(row.payload.size()),
                          row.payload.data(), options_.qos, row.retain);
    switch (rc) {
        case MOSQ_ERR_SUCCESS:
            ++sends_;
            if (inflight_.empty()) timers_.sent_into_empty_window();
            inflight_.emplace(mid, InflightRow{stream_index, row.seq});
            if (std::find(early_acks_.begin(), early_acks_.end(), mid) != early_acks_.end()) {
                acknowledged(mid);
            }
            early_acks_.clear();
            return true;
        case MOSQ_ERR_INVAL:
        case MOSQ_ERR_MALFORMED_UTF8:
        case MOSQ_ERR_PAYLOAD_SIZE:
        case MOSQ_ERR_OVERSIZE_PACKET:
            // No broker will ever take this row: keeping it would stop every row behind it.
            ++rejected_;
            spdlog::error(
                "forwarder [{}]: row {} on topic '{}' ({} bytes) cannot be sent over MQTT "
                "and is deleted: {}",
                options_.broker.client_id, row.seq, row.topic, row.payload.size(),
                mosquitto_strerror(rc));
            mark_for_delete(streams_[stream_index], row.seq);
            return true;
        default:
            lose_link(std::string("publish failed: ") + mosquitto_strerror(rc));
            return false;
    }
}

// A PUBACK (QoS1), or the PUBLISH written to the socket (QoS0).
void Forwarder::Impl::acknowledged(int mid) {
    timers_.acknowledged();
    const auto it = inflight_.find(mid);
    if (it == inflight_.end()) {
        // At QoS0 the callback may run inside mosquitto_publish(), before publish() has
        // recorded the mid; publish() looks here afterwards.
        early_acks_.push_back(mid);
        return;
    }
    mark_for_delete(streams_[it->second.stream], it->second.seq);
    inflight_.erase(it);
    ++acks_;
    if (!first_ack_seen_) {
        first_ack_seen_ = true;
        std::lock_guard lock(mutex_);
        stats_.first_row_after_reconnect_ms = timers_.since_connected_ms();
        if (outage_started_ms_ >= 0) {
            stats_.last_outage_ms = timers_.now_ms() - outage_started_ms_;
            outage_started_ms_ = -1;
        }
    }
}

void Forwarder::Impl::mark_for_delete(Stream& stream, uint64_t seq) {
    if (undeleted_rows() == 0) timers_.first_undeleted();
    stream.to_delete.push_back(seq);
}

size_t Forwarder::Impl::undeleted_rows() const {
    size_t n = 0;
    for (const Stream& stream : streams_)
        n += stream.to_delete.size();
    return n;
}

bool Forwarder::Impl::delete_due() const {
    const size_t n = undeleted_rows();
    return n > 0 && (n >= options_.delete_batch_rows || timers_.delete_due());
}

// Hands the acknowledged rows to the deleter thread: an LMDB commit syncs to disk, and the
// link must not stand idle meanwhile. Rows acknowledged while a commit runs go in the next
// one, so slower disks get larger transactions.
void Forwarder::Impl::flush_deletes() {
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

size_t Forwarder::Impl::queued_deletes() const {
    std::lock_guard lock(delete_mutex_);
    return delete_queued_rows_;
}

// Before re-reading the outbox from its oldest row, or stopping: every acknowledged row
// deleted, so that none is sent again needlessly.
void Forwarder::Impl::wait_for_deletes(int64_t deadline_ms) {
    flush_deletes();
    const auto left =
        std::chrono::milliseconds(std::max<int64_t>(deadline_ms - clock_.steady_ms(), 0));
    std::unique_lock lock(delete_mutex_);
    delete_changed_.wait_for(lock, left, [this] { return delete_queued_rows_ == 0; });
}

// The deleter thread: source->delivered() for what flush_deletes() handed over.
void Forwarder::Impl::run_deleter() {
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
            // A real-time pause before the retry, not a decision: the clock is not read here.
            delete_changed_.wait_for(lock, std::chrono::milliseconds(options_.poll_interval_ms),
                                     [this] { return deleter_stop_; });
        }
    }
}

void Forwarder::Impl::stop_deleter() {
    {
        std::lock_guard lock(delete_mutex_);
        deleter_stop_ = true;
    }
    delete_changed_.notify_all();
    if (deleter_.joinable()) deleter_.join();
}

}  // namespace tidemark::mqtt
