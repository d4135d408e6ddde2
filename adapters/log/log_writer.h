// The writing end of the ingest log: appends CRC-framed records to segment files.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "adapters/log/log_options.h"
#include "adapters/log/record.h"
#include "adapters/log/topic_dictionary.h"
#include "core/result.h"

struct iovec;

namespace tidemark::log {

struct LogStats {
    uint64_t records_appended = 0;  // by this writer since open
    uint64_t bytes_appended = 0;    // frame bytes, by this writer since open
    uint64_t append_errors = 0;     // appends that returned an error (nothing was appended)
    uint64_t syncs = 0;             // fdatasync calls that made new data durable
    uint64_t rollovers = 0;
    uint64_t tail_truncations = 0;  // 1 if open() cut a torn tail, else 0
    uint64_t tail_bytes_cut = 0;
    /// Found by open() in the newest segment: runs of invalid bytes with valid records after
    /// them. Left in place (cutting them would cut the records after them too); readers skip
    /// them and count them again in ReaderStats. Non-zero means the storage lost data: alarm.
    uint64_t damaged_regions = 0;
    uint64_t damaged_bytes = 0;
    uint64_t segments_removed = 0;  // by retention since open
    uint64_t bytes_removed = 0;
    uint64_t segments = 0;  // gauges from here on
    uint64_t first_offset = 0;
    uint64_t end_offset = 0;
    uint64_t durable_offset = 0;
    uint64_t total_bytes = 0;   // frame bytes (log offsets) retained
    uint64_t disk_bytes = 0;    // what the retained segments take on disk (retention counts this)
    uint64_t seals = 0;         // counter: seals that wrote blocks (compressed segments)
    uint64_t sealed_bytes = 0;  // counter: frame bytes sealed into blocks by this writer
    uint64_t block_bytes = 0;   // counter: block bytes those seals wrote
    /// Counter: seals whose blocks could not be written (a full disk): the stage was made
    /// durable instead and its frames wait, plain, for the next seal.
    uint64_t seals_deferred = 0;
    /// Gauge: the last seal was deferred and none has succeeded since (LogWriter::seal_error()).
    bool seal_deferred = false;
    int64_t oldest_ingest_ms = ingest_ms_unknown;
    int64_t last_ingest_ms = ingest_ms_unknown;
    bool poisoned = false;  // see LogWriter::poisoned()
};

struct RetentionResult {
    uint64_t segments_removed = 0;
    uint64_t bytes_removed = 0;
    uint64_t first_offset = 0;  // the oldest offset still retained
};

/// Appends records to the log in DIR (see record.h for the frame, segment_files.h for names).
///
/// Operation: open() scans the newest segment (only it: a segment is fsynced before the next
/// one is created, so only the newest can have a torn tail). At an invalid frame it searches
/// further on for a valid one (segment_scan.h): if one follows, the bytes in between are damage
/// in the middle (a bad sector, a flipped bit), left in place and counted in stats()
/// (damaged_regions, damaged_bytes), so that the records after them keep their offsets; if none
/// follows, they are a torn tail, cut at the end of the last valid record and counted
/// (tail_bytes_cut). end_offset() is then the end of the last valid record. open() fdatasyncs
/// what it found, so that durable_offset() starts true. append() writes one compact frame with
/// one pwritev() (no copy of topic or payload; an allocation only for a topic new to the
/// segment), clamps ingest_ms so that it never decreases (also across restarts), and returns the
/// record's offset. Frames (record.h): a segment starts with an anchor and holds compact
/// frames, which carry a topic once per segment (and again after each anchor, every
/// anchor_interval_bytes) and its id after that; an anchor is written with a second pwritev()
/// before the record that needs it. open() goes on appending to a compact active segment with
/// its dictionary (read back by the scan); an active segment of the old format (full frames, a
/// log written before 2026-12-01) or with damage is closed instead, and the first append starts
/// a new segment: old segments are read as they are and leave with retention. A failed write
/// (ENOSPC, EFBIG, EIO) is rolled back by truncating the segment to its last good end, so the
/// writer stays usable and the caller can back off and retry. A failed fdatasync poisons the
/// writer: Linux may have dropped the dirty pages or kept them in the page cache marked clean,
/// where a restarted process would read records the disk never got and its own fdatasync would not
/// say so. So before it gives up, the writer cuts the active segment back to durable_offset() (the
/// end of the last successful sync): after a restart the log holds only what was durable before the
/// failure (the records appended since the last sync are lost, as on a power loss). fdatasync is
/// never retried. A poisoned writer says so (poisoned(), poison_error(), stats().poisoned) and
/// every later call returns that error: the process should exit non-zero and let its supervisor
/// restart it. A failed rollback of a failed write poisons it too (the partial frame stays; the
/// restart cuts it). Why cut on poison rather than keep a durable mark on disk: a mark written and
/// fdatasynced after every successful sync doubles the device flushes (measured on ext4 on the
/// build VM: 5.9 ms per synced record, 10.6 to 13.2 ms with the mark), halving FsyncPolicy::always,
/// to guard a case the writer sees itself when it happens. Limits of the cut: if the ftruncate
/// fails too (the error says so), or the process is killed between the failed fdatasync and
/// the cut, a restart may read records the disk does not hold.
/// Concurrency: every call may come from any thread. append() and append_malformed() hold a
/// mutex for the whole append, so concurrent appends are serialised and each gets the offset of
/// its own frame (the firmware appends from three threads: the MQTT callback's messages, the
/// ticker's idle ticks and the service loop's clock markers; its LogAppender serialises them too,
/// for the redelivery filter). maybe_sync() from two threads at once may sync twice, never wrongly.
/// sync(), apply_retention(), stats() and poison_error() take the same mutex (sync() runs its
/// fdatasync outside it, on a file description of its own, so a checkpoint's sync does not
/// stall ingest and a writeback error is reported to every caller that syncs). end_offset(),
/// durable_offset(), first_offset(), total_bytes(), oldest_ingest_ms() and poisoned() are
/// lock-free. Readers in other threads or processes may tail the files at the same time
/// (LogReader). Only one writer may own a directory; this is not enforced (the runtime holds its
/// own lock on data_dir). Limits: a record body is at most record_body_bytes_max, a topic at most
/// topic_bytes_max; the payload of a malformed record is cut to malformed_payload_bytes_max. Memory
/// is one entry per segment, and the active segment's topic dictionary (topic_ids_max topics,
/// topic_dictionary_bytes_max bytes of topics: past either, a new segment starts). open() looks for
/// damage only in the newest segment; older ones are checked by readers as they pass. Age retention
/// uses the newest ingest time of a segment, which for segments written before open() is bounded by
/// the next segment's first record (kept a little longer, never removed early).
class LogWriter {
  public:
    static Result<std::unique_ptr<LogWriter>> open(const LogOptions& options);
    /// Best-effort fdatasync (errors cannot be reported here: call sync() for a clean stop).
    ~LogWriter();
    LogWriter(const LogWriter&) = delete;
    LogWriter& operator=(const LogWriter&) = delete;

    /// Appends one record and returns its offset. With FsyncPolicy::always it is durable on
    /// return. On error nothing was appended and end_offset() is unchanged.
    /// For RecordType::malformed use append_malformed(), which keeps the reason apart.
    /// `redeliverable` false (a message only): the broker never sends it again (QoS0); read
    /// back with Record::redeliverable false.
    Result<uint64_t> append(RecordType type, int64_t ingest_ms, std::string_view topic,
                            std::string_view payload, bool redeliverable = true);
    /// Appends a malformed record: why it was refused (no tab in it), the topic it came on and
    /// its payload, cut to malformed_payload_bytes_max. Reason, a separator and topic share the
    /// topic field, so together they are at most topic_bytes_max. As append() otherwise.
    Result<uint64_t> append_malformed(int64_t ingest_ms, std::string_view reason,
                                      std::string_view topic, std::string_view payload,
                                      bool redeliverable = true);
    /// FsyncPolicy::interval: syncs when now_ms is fsync_interval_ms past the last sync made
    /// here (now_ms is the caller's clock; no clock is read inside); a compressed log under
    /// FsyncPolicy::always seals on the same interval (its records are durable in the stage
    /// already). Returns whether it synced. A no-op otherwise. The firmware's ticker calls it
    /// every 100 ms.
    Result<bool> maybe_sync(int64_t now_ms);
    /// Makes every record appended so far durable, whatever the policy. A failure poisons the
    /// writer (see the class comment). A compressed log whose seal cannot write its blocks (a
    /// full disk) makes the stage durable instead and succeeds: the seal is deferred, counted
    /// (stats().seals_deferred) and said by seal_error(), and tried again at the next sync.
    Result<void> sync();

    /// Deletes the oldest whole segments while (a) the segment ends at or before
    /// keep_from_offset (the last checkpoint's offset: replay must still find it), (b) it is not
    /// the active segment, and (c) the log is over retention_bytes_max or the segment's newest
    /// record is older than now_ms - retention_age_ms_max. Stops at the first segment that may
    /// not go, so the retained log stays contiguous. A segment whose unlink fails ends the call
    /// with an error naming it; it and the ones after it stay in the log (counted, readable) and
    /// the next call tries them again.
    Result<RetentionResult> apply_retention(uint64_t keep_from_offset, int64_t now_ms);

    uint64_t end_offset() const { return end_offset_.load(std::memory_order_acquire); }
    uint64_t durable_offset() const { return durable_offset_.load(std::memory_order_acquire); }
    uint64_t first_offset() const { return first_offset_.load(std::memory_order_acquire); }
    uint64_t total_bytes() const { return total_bytes_.load(std::memory_order_acquire); }
    /// What the retained segments take on disk: sealed blocks and the stage's unsealed frames.
    uint64_t disk_bytes() const { return disk_bytes_.load(std::memory_order_acquire); }
    int64_t oldest_ingest_ms() const { return oldest_ingest_ms_.load(std::memory_order_acquire); }
    /// Whether a failed fdatasync (or a failed rollback) stopped the writer for good. Then every
    /// call returns poison_error(): exit non-zero and let the supervisor restart the process.
    bool poisoned() const { return poisoned_flag_.load(std::memory_order_acquire); }
    /// The error that poisoned the writer: names the segment file and the errno text, and what
    /// was cut. Empty while poisoned() is false.
    std::string poison_error() const;
    /// Why the last seal was deferred (names the .zlog and the errno text); empty once a seal
    /// succeeds, and for a plain log.
    std::string seal_error() const;
    LogStats stats() const;
    const LogOptions& options() const { return options_; }

  private:
    struct Segment {
        uint64_t first_offset = 0;
        uint64_t bytes = 0;
        int64_t first_ingest_ms = ingest_ms_unknown;
        int64_t max_ingest_ms = ingest_ms_unknown;  // newest ingest time, or an upper bound
        bool compressed = false;                    // a .zlog (with its stage while not all sealed)
        uint64_t sealed_bytes = 0;   // frame bytes in blocks; the rest is in the stage
        uint64_t zlog_bytes = 0;     // the .zlog's size
        uint64_t punched_bytes = 0;  // the stage's prefix punched out
        uint64_t disk() const { return compressed ? zlog_bytes + (bytes - sealed_bytes) : bytes; }
    };
    // What one seal does to one segment (seal_mutex_ held, mutex_ not).
    struct SealJob {
        uint64_t first_offset = 0;
        uint64_t from = 0, to = 0;  // segment positions: [sealed_bytes, bytes) when collected
        uint64_t zlog_bytes = 0;
        bool active = false;
    };

    explicit LogWriter(LogOptions options);
    // The topic field is topic_parts[0..2] written back to back (reason, separator, topic for
    // a malformed record; the topic alone otherwise).
    Result<uint64_t> append_frame(RecordType type, int64_t ingest_ms,
                                  const std::string_view (&topic_parts)[3],
                                  std::string_view payload, bool redeliverable);
    // mutex_ held from here on
    Result<void> write_anchor(int64_t ingest_ms);
    Result<uint64_t> write_compact(RecordType type, int64_t ingest_ms,
                                   const std::string_view (&topic_parts)[3],
                                   std::string_view payload, const TopicDictionary::Use& use,
                                   bool redeliverable);
    uint64_t compact_frame_bytes(RecordType type, int64_t ingest_ms, uint64_t topic_bytes,
                                 uint64_t payload_bytes, const TopicDictionary::Use& use,
                                 bool after_anchor) const;
    Result<void> write_iov(iovec* iov, int count);
    void account(uint64_t offset, uint64_t frame, int64_t ingest_ms);
    Result<void> recover();
    // How seal_range failed: reading the stage (an error, the range stays staged), making or
    // writing the blocks (cut back: the seal may be deferred), or syncing them (poison).
    enum class SealFailure { none, write, sync };
    /// Compresses the stage's [from, to) into blocks appended to the .zlog and fdatasyncs it.
    /// Returns the .zlog's new size. On failure seal_failure_ says which kind.
    Result<uint64_t> seal_range(const SealJob& job);
    /// A deferred seal's stand-in: fdatasyncs the job's stage and moves durable_offset() to its
    /// end. Takes mutex_.
    Result<void> sync_stage(const SealJob& job);
    /// Seals every compressed segment's unsealed frames (the active one's up to end_offset()):
    /// for a compressed active segment, what sync() is. Takes seal_mutex_.
    Result<void> seal();
    void punch_stage(Segment& segment);  // mutex_ held
    Result<void> roll();                 // mutex_ held
    Error poison(std::string message);   // mutex_ held; keeps the first error
    Error poison_after_failed_sync(const std::string& path, int err);  // mutex_ held
    void publish_extent();                                             // mutex_ held

    const LogOptions options_;
    int dir_fd_ = -1;

    std::mutex retention_mutex_;  // held through apply_retention, taken before mutex_
    std::mutex seal_mutex_;       // held through a seal, taken before mutex_
    mutable std::mutex mutex_;
    std::deque<Segment> segments_;  // oldest first; back() is the active segment
    int active_fd_ = -1;
    std::string active_path_;
    int64_t last_ingest_ms_ = ingest_ms_unknown;
    TopicDictionary dictionary_;  // the active segment's
    bool roll_due_ = false;       // open() found an old-format or damaged active segment
    bool recovered_ = false;      // open() finished: the destructor may seal
    SealFailure seal_failure_ = SealFailure::none;  // seal_range's last (seal_mutex_ held)
    std::string seal_error_;  // under mutex_: why the last seal was deferred, "" once one succeeds
    std::optional<std::string> poisoned_;
    LogStats counters_;  // the counter fields only; gauges are filled in by stats()

    std::atomic<bool> poisoned_flag_{false};  // poisoned_ has a value
    std::atomic<int64_t> last_sync_ms_{ingest_ms_unknown};
    std::atomic<uint64_t> end_offset_{0};
    std::atomic<uint64_t> durable_offset_{0};
    std::atomic<uint64_t> first_offset_{0};
    std::atomic<uint64_t> total_bytes_{0};
    std::atomic<uint64_t> disk_bytes_{0};
    std::atomic<int64_t> oldest_ingest_ms_{ingest_ms_unknown};
};

}  // namespace tidemark::log
