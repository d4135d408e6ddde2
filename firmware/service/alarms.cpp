#include "firmware/service/alarms.h"

#include <spdlog/spdlog.h>
#include <cerrno>
#include <cstring>

namespace tidemark::firmware {

void Alarms::set_outbox(const std::string& alarm) {
    std::lock_guard<std::mutex> lk(mutex_);
    if (alarm != outbox_) {
        if (!alarm.empty())
            spdlog::warn("{}: ingest paused until the outbox can take the results", alarm);
        else if (!outbox_.empty())
            spdlog::info("{} cleared: ingest resumed", outbox_);
    }
    outbox_ = alarm;
    paused_.store(!alarm.empty());
}

std::string Alarms::outbox() const {
    std::lock_guard<std::mutex> lk(mutex_);
    return outbox_;
}

void Alarms::set_checkpoint(const std::string& alarm) {
    std::lock_guard<std::mutex> lk(mutex_);
    if (alarm.empty() && !checkpoint_.empty()) spdlog::info("checkpoints commit again");
    checkpoint_ = alarm;
}

void Alarms::append_failed(const std::string& message) {
    ++append_errors_;
    std::lock_guard<std::mutex> lk(mutex_);
    if (append_error_ != message) spdlog::error("log append: {}", message);
    append_error_ = message;
    append_alarm_.store(true);
}

void Alarms::append_succeeded() {
    if (!append_alarm_.load(std::memory_order_relaxed)) return;
    std::lock_guard<std::mutex> lk(mutex_);
    if (!append_error_.empty()) spdlog::info("log append works again");
    append_error_.clear();
    append_alarm_.store(false);
}

void Alarms::set_clock(const ClockStatus& status) {
    std::lock_guard<std::mutex> lk(mutex_);
    clock_ = status;
}

namespace {

bool says_disk_full(const std::string& append_error) {
    return append_error.find(std::strerror(ENOSPC)) != std::string::npos ||
           append_error.find(std::strerror(EDQUOT)) != std::string::npos;
}

}  // namespace

bool Alarms::disk_full() const {
    std::lock_guard<std::mutex> lk(mutex_);
    return outbox_ == "disk_full" || says_disk_full(append_error_);
}

Alarms::Snapshot Alarms::snapshot() const {
    std::lock_guard<std::mutex> lk(mutex_);
    Snapshot s;
    s.clock = clock_;
    if (!outbox_.empty()) s.alarms.push_back(outbox_);
    // The one name for a full disk, whichever write found it first (alerts match on it).
    if (outbox_ != "disk_full" && says_disk_full(append_error_)) s.alarms.push_back("disk_full");
    if (!checkpoint_.empty()) s.alarms.push_back(checkpoint_);
    if (!clock_.trusted) s.alarms.push_back("clock_unsynchronised");
    if (!append_error_.empty()) s.alarms.push_back("log_append_failed: " + append_error_);
    return s;
}

}  // namespace tidemark::firmware
