// The deterministic event-time engine: watermarks -> windows -> aggregates -> emissions.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/emission.h"
#include "core/event.h"
#include "core/lag_histogram.h"
#include "core/pipeline.h"
#include "core/result.h"

namespace tidemark::core {

/// One window's count of too-late events (its bounds as in results: [start_ms, end_ms)).
struct TooLateWindow {
    int64_t start_ms = 0;
    int64_t end_ms = 0;
    uint64_t too_late = 0;
    bool operator==(const TooLateWindow&) const = default;
};

/// How many of the windows with the most too-late events PipelineStats lists (health, inspect):
/// a handful for a person to read, out of the engine's bounded per-window table.
inline constexpr size_t too_late_windows_shown = 5;

/// Counters and gauges of one pipeline. Counters are cumulative and part of the checkpoint, so
/// they survive restarts and replay identically.
struct PipelineStats {
    uint64_t events_in = 0;
    uint64_t late_updated = 0;  // late events that updated (and re-fired) a window
    uint64_t too_late = 0;      // late events past the allowed lateness (dropped or side output)
    // Hopping: events applied to some of their windows but too late for older ones (each
    // such window is counted in the per-window too-late table).
    uint64_t too_late_partial = 0;
    // Too-late events the per-window table could not keep against their window: it was full,
    // and every window in it had at least as many too-late events. Each such loss is one
    // event (only a window with a single too-late event is let go), so a listed count is short
    // by at most this much.
    uint64_t too_late_windows_dropped = 0;
    uint64_t side_outputs = 0;
    // late.report: tallies sent to the consumer (LateReport records), and too-late events no
    // tally could hold (the bounded table was full of tallies waiting for their report): the
    // consumer's counts are short by at most this much.
    uint64_t late_reports = 0;
    uint64_t too_late_unreported = 0;
    uint64_t clamped = 0;       // events stamped more than max_future ahead of ingest
    uint64_t keys_refused = 0;  // events refused because keys_max (keys or partitions) was reached
    uint64_t partitions_forgotten = 0;  // idle partitions without keys, dropped from state
    // Scope partition: forgotten partitions whose own start was given up (more than max_keys
    // remembered): new partitions then start no earlier than the watermark it had.
    uint64_t forgotten_evicted = 0;
    uint64_t windows_refused = 0;  // events refused because open_windows_max was reached
    uint64_t emitted_final = 0;
    uint64_t emitted_update = 0;
    uint64_t emitted_retract = 0;
    // Gauges.
    uint64_t keys = 0;
    uint64_t open_windows = 0;  // slices or sessions holding state, plus fired windows kept
    uint64_t state_bytes = 0;
    uint64_t partitions_active = 0;
    uint64_t partitions_idle = 0;
    uint64_t partitions_remembered = 0;  // scope partition: forgotten ones whose start is kept
    int64_t watermark_ms = 0;  // global scope: the pipeline's; partition scope: the minimum
    int64_t ingest_ms = 0;     // the newest ingest time seen
    // The windows with the most too-late events, most first (ties: the earlier window first),
    // too_late_top_size of them; and how many windows the per-window table holds.
    std::array<TooLateWindow, too_late_windows_shown> too_late_top{};
    uint32_t too_late_top_size = 0;
    uint32_t too_late_windows_tracked = 0;
    uint32_t late_tallies = 0;  // late.report: windows with a tally (at most 256)
    LagHistogram lag_ms;        // ingest_ms - event_ms of every event (before clamping)
};

/// How far the watermark is behind the newest ingest time; none while there is no watermark
/// yet (it is at its minimum) or the difference does not fit (a clock decades off).
std::optional<int64_t> watermark_lag_ms(const PipelineStats& stats);

/// Receives the state changes of a checkpoint: opaque keys and values that sort so that a store
/// iterating in key order restores in a deterministic order.
class StateWriter {
  public:
    virtual ~StateWriter() = default;
    virtual void put(std::string_view key, std::string_view value) = 0;
    virtual void erase(std::string_view key) = 0;
};

/// Runs every pipeline of a config over the records of the log.
///
/// Operation: for each log record call advance(ingest_ms) once, then process() once per pipeline
/// that the record matched. The engine's only clock is the ingest time of what it reads, so the
/// same records give the same emissions, byte for byte, live or in replay. Emissions come out in
/// a fixed order: by window end, then key, then window start.
/// Concurrency: single-threaded; one owner calls everything.
/// Limits: live keys, live partitions and open windows per pipeline are bounded by
/// PipelineSpec::limits; past them new ones are refused and counted (and kept as side output
/// where the pipeline keeps too-late events). A key whose windows have all fired and passed
/// their lateness is forgotten, and so is an idle partition without keys: the limits bound what
/// is live at once, never what was ever seen.
class Engine {
  public:
    static Result<std::unique_ptr<Engine>> create(std::string node_id,
                                                  std::vector<PipelineSpec> pipelines);
    ~Engine();

    const std::vector<PipelineSpec>& pipelines() const;
    /// Index of the pipeline with that name, or -1.
    int find_pipeline(std::string_view name) const;

    /// Moves every pipeline's clock to `ingest_ms` (never backwards): idle detection, idle
    /// watermark advance and the windows that this closes.
    void advance(int64_t ingest_ms, EmissionSink& sink);

    /// Feeds one event to one pipeline. The event's ingest_ms must not be older than the last
    /// advance(). `event.fields` has one value per field of the pipeline.
    void process(uint32_t pipeline, const Event& event, EmissionSink& sink);

    /// A hint, with no effect on results: the next process() calls of `pipelines` are for an
    /// event of `key` (in partition `partition`, empty: the key). Starts loading those
    /// pipelines' state of that key side by side, so that several pipelines fed the same
    /// record wait for memory once rather than one after another (issue 31).
    void prefetch(std::span<const uint32_t> pipelines, std::string_view key,
                  std::string_view partition);
    /// Hints for the records ahead, with no effect on results (issue 31): the records before
    /// one are processed while its state loads. With the hash of each one's key (key_hash; 0:
    /// no hint), the rounds for four records, the first the furthest ahead: the hash slots
    /// `pipelines` probe for its key; the key state stored there; that key's newest window and
    /// its partition; the window's quantile sketch and the partition's place in the watermark.
    /// Called once per record, each record gets the four rounds in turn, each loading what the
    /// round before it found. Pipelines whose keys are composite (scope partition) get none.
    static uint64_t key_hash(std::string_view key);
    struct AheadHashes {
        uint64_t slots = 0;
        uint64_t keys = 0;
        uint64_t windows = 0;
        uint64_t states = 0;
    };
    void prefetch_ahead(std::span<const uint32_t> pipelines, const AheadHashes& hashes) const;

    const PipelineStats& stats(uint32_t pipeline) const;

    /// Whether the gateway's clock (the ingest time of the records) can be trusted. While it
    /// cannot (not synchronised since boot), events are not clamped to max_future and idle
    /// watermarks do not follow ingest time. When it can again, at `ingest_ms`, the step
    /// between the two clocks is not taken as time that passed: partitions' silence and idle
    /// watermarks restart from `ingest_ms`, which may be behind the last one seen. The log
    /// records each change, so replay makes the same calls.
    void set_clock(bool trusted, int64_t ingest_ms);
    bool clock_trusted() const;

    /// Ingest listens again after a silence that was ours (the process down, ingest paused or
    /// disconnected): the time since the last record is not the devices' silence. Partitions'
    /// silence and idle watermarks restart from `ingest_ms`, so a backlog the broker kept is
    /// not made late by our own pause. The log records each resumption.
    void resume(int64_t ingest_ms);

    /// Writes every unit of state changed since the last call (windows, partitions, counters)
    /// and erases the removed ones; the next call starts from there. The first call after
    /// create() writes everything that exists; after a restore, the store is taken to hold
    /// exactly what was restored, so the first call writes what changed since.
    void checkpoint(StateWriter& writer);
    /// The transaction that took the last checkpoint() did not commit (map or disk full, I/O
    /// error): the next checkpoint() writes what it held again, with its erasures. Without this
    /// call the next checkpoint() takes the last one as committed.
    void checkpoint_failed();

    /// Restores state written by checkpoint(): call restore_entry for every stored (key, value),
    /// in any order, then restore_finish. Only on a freshly created engine. State written for a
    /// pipeline that no longer exists, or under another definition, is refused with a message.
    Result<void> restore_entry(std::string_view key, std::string_view value);
    Result<void> restore_finish();

    /// The state's keys for a pipeline all start with this prefix (so a store can drop one);
    /// `pipeline_name` is its state name (PipelineSpec::state_name when set, else name).
    static std::string state_prefix(std::string_view pipeline_name);
    /// The pipeline a state key belongs to; none for a key the engine did not write.
    static std::optional<std::string> pipeline_of_state_key(std::string_view key);

  private:
    struct Impl;
    explicit Engine(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace tidemark::core
