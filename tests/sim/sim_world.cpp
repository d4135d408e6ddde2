// The simulated gateway's life: starts and crashes, traffic, the appliance's work per tick, the
// end (sim_faults.cpp has the reloads and the injected faults).
#include "tests/sim/sim_world.h"

#include <map>

#include "adapters/log/log_reader.h"
#include "firmware/service/versions.h"
#include "tests/sim/sim_config.h"

namespace tidemark::sim {

World::World(const Scenario& scenario, std::string dir, Reporter fail, Reporter note)
    : s_(scenario),
      dir_(std::move(dir)),
      fail_(std::move(fail)),
      note_(std::move(note)),
      clock_(scenario.t0_ms, 1'000),
      rng_(scenario.seed ^ 0xA5A5A5A5ull) {}

World::~World() {
    host_.reset();  // before the config and alarms it refers to
}

// The first time each failure is seen, with where; repeats are counted (said at the end).
void World::failure(const std::string& text) {
    if (repeats_[text]++ == 0) fail_(where_ + ": " + text);
}

void World::say_repeats() {
    for (const auto& [text, n] : repeats_)
        if (n > 1) fail_("(" + std::to_string(n - 1) + " more times) " + text.substr(0, 160));
    repeats_.clear();
}

std::vector<Candidate> World::candidates(int config) {
    std::vector<Candidate> out;
    auto parsed = parse(s_.configs[static_cast<size_t>(config)], dir_);
    if (!parsed) return out;
    for (size_t i = 0; i < parsed->pipelines.size(); ++i)
        out.push_back({s_.configs[static_cast<size_t>(config)].pipelines[i], parsed->pipelines[i]});
    return out;
}

void World::observe_plan(const std::string& why) {
    if (auto d = rec_.versions.differs(host_->versions())) failure(*d + " (" + why + ")");
}

bool World::open(int config, const std::string& why) {
    auto parsed = parse(s_.configs[static_cast<size_t>(config)], dir_);
    if (!parsed) {
        failure(parsed.error().message);
        stopped_ = true;
        return false;
    }
    config_ = std::make_unique<config::Config>(std::move(*parsed));
    alarms_ = std::make_unique<firmware::Alarms>();
    auto host = firmware::EngineHost::open(*config_, clock_, *alarms_);
    if (!host) {
        failure("the appliance does not start (" + why + "): " + host.error().message);
        stopped_ = true;
        return false;
    }
    auto registry = firmware::read_registry((*host)->store());
    auto recovered = (*host)->recover([] { return false; });
    if (!recovered || !registry) {
        failure("the appliance does not recover (" + why +
                "): " + (recovered ? registry.error().message : recovered.error().message));
        stopped_ = true;
        return false;
    }
    auto filter = std::make_unique<mqtt::RedeliveryFilter>();
    if (auto seeded = firmware::seed_redelivery_filter((*host)->log(), *filter); !seeded) {
        failure("the redelivery filter is not seeded (" + why + "): " + seeded.error().message);
        stopped_ = true;
        return false;
    }
    host_ = std::move(*host);
    filter_ = std::move(filter);
    switches_seen_ = 0;
    running_ = config;
    if (*registry)
        rec_.versions.plan(candidates(config), host_->log().first_offset(), clock_.wall_ms(), why);
    else
        rec_.versions.fresh_start(candidates(config), host_->log().first_offset(), why);
    rec_.versions.live_progress(host_->consumed_offset());
    observe_plan(why);
    upstream_.attach(&host_->store());
    rec_.compaction_ever |= s_.configs[static_cast<size_t>(config)].compact_superseded;
    if (note_)
        note_(where_ + ": started with config " + std::to_string(config) + " (" + why + "), " +
              std::to_string(*recovered) + " records replayed; " + rec_.versions.summary());
    return true;
}

// Every object goes without a last checkpoint; the broker keeps what it had not seen
// acknowledged, and resends the end of the last connection's messages when ingest is back.
void World::crash() {
    upstream_.detach();
    filter_.reset();
    host_.reset();
    alarms_.reset();
    config_.reset();
}

std::string topic_of(const Scenario& s, const Message& m) {
    return "dev/" + s.devices[static_cast<size_t>(m.device)].name +
           (m.shape == Message::Shape::other_topic ? "/status" : "/m");
}

std::string payload_of(const Scenario& s, const Message& m, int index) {
    const std::string site = s.devices[static_cast<size_t>(m.device)].site;
    const std::string rest = "\"v\": " + std::to_string(m.value) + ", \"site\": \"" + site +
                             "\", \"m\": " + std::to_string(index) + "}";
    switch (m.shape) {
        case Message::Shape::no_timestamp:
            return "{" + rest;
        case Message::Shape::not_json:
            return "{\"ts\": " + std::to_string(m.event_ms) + ", \"v\"";
        default:
            return "{\"ts\": " + std::to_string(m.event_ms) + ", " + rest;
    }
}

void World::append_message(int index, bool redelivered) {
    const Message& m = s_.messages[static_cast<size_t>(index)];
    const std::string topic = topic_of(s_, m), payload = payload_of(s_, m, index);
    const int packet_id = index % 65535 + 1;
    mqtt::RedeliveryFilter& filter = *filter_;
    if (redelivered) {
        if (filter.is_redelivery(packet_id, topic, payload)) return;
        failure("the broker's redelivery of message " + std::to_string(index) +
                " (already in the log) was logged again");
    }
    auto offset = host_->log().append(log::RecordType::message, clock_.wall_ms(), topic, payload);
    if (!offset) {
        failure("a log append failed: " + offset.error().message);
        stopped_ = true;
        return;
    }
    filter.remember(packet_id, topic, payload);
    rec_.log.push_back(
        {*offset, host_->log().end_offset(), clock_.wall_ms(), false, index, topic, payload});
    connection_messages_.push_back(index);
}

void World::traffic(int64_t tick) {
    static_assert(tick_ms > 0);
    const int64_t tick_start = s_.t0_ms + tick * tick_ms;
    clock_.advance(tick_start - clock_.wall_ms());
    bool any = false;
    for (; next_message_ < s_.messages.size() &&
           s_.messages[next_message_].arrival_ms < (tick + 1) * tick_ms && !stopped_;
         ++next_message_) {
        const int64_t at = s_.t0_ms + s_.messages[next_message_].arrival_ms;
        if (at > clock_.wall_ms()) clock_.advance(at - clock_.wall_ms());
        append_message(static_cast<int>(next_message_), false);
        any = true;
    }
    if (!any && !stopped_) {
        auto offset = host_->log().append(log::RecordType::tick, clock_.wall_ms(), {}, {});
        if (!offset) {
            failure("a tick append failed: " + offset.error().message);
            stopped_ = true;
            return;
        }
        rec_.log.push_back(
            {*offset, host_->log().end_offset(), clock_.wall_ms(), true, -1, {}, {}});
    }
    clock_.advance(tick_start + tick_ms - clock_.wall_ms());
}

bool World::checkpoint(const std::string& why, bool fault_expected) {
    if (!host_->can_checkpoint()) return false;
    auto ok = host_->checkpoint();
    if (!ok && !fault_expected)
        failure("a checkpoint failed without a fault (" + why + "): " + ok.error().message);
    if (note_ && ok) {
        auto stats = host_->store().outbox_stats();
        std::string backfills;
        for (const firmware::BackfillFigures& f : host_->backfill_figures())
            backfills += " " + f.pipeline + "@" + std::to_string(f.offset);
        note_(where_ + ": checkpoint at log offset " + std::to_string(host_->consumed_offset()) +
              ", outbox seq_next " + (stats ? std::to_string(stats->seq_next) : "?") +
              (backfills.empty() ? "" : ", backfills" + backfills));
    }
    return ok.has_value();
}

size_t World::backfill_step(size_t records_max, const std::string& why) {
    auto n = host_->backfill_step(records_max);
    if (!n) {
        failure("a backfill step failed: " + n.error().message);
        stopped_ = true;
        return 0;
    }
    for (const firmware::BackfillFigures& f : host_->backfill_figures())
        rec_.versions.backfill_progress(f.pipeline, f.offset);
    const auto& switches = host_->switches();
    for (; switches_seen_ < switches.size(); ++switches_seen_) {
        const firmware::SwitchFigures& sw = switches[switches_seen_];
        if (auto unexpected =
                rec_.versions.switched(sw.pipeline, sw.version, host_->consumed_offset(), why))
            failure(*unexpected);
        if (note_)
            note_(where_ + ": switch of '" + sw.pipeline + "' to " + sw.version + " at offset " +
                  std::to_string(host_->consumed_offset()));
        observe_plan("after the switch of '" + sw.pipeline + "'");
    }
    return *n;
}

void World::work(int64_t tick) {
    if (tick % s_.step_every == 0) {
        auto n = host_->step(static_cast<size_t>(s_.step_records_max), false);
        if (!n) {
            failure("a step failed: " + n.error().message);
            stopped_ = true;
            return;
        }
        rec_.versions.live_progress(host_->consumed_offset());
    }
    for (int i = 0; i < s_.backfill_steps && host_->backfilling() && !stopped_; ++i)
        backfill_step(static_cast<size_t>(s_.backfill_records_max), "tick");
    if (tick % s_.checkpoint_every == 0)
        checkpoint("every " + std::to_string(s_.checkpoint_every) + " ticks", false);
    if (rng_.chance(s_.upstream_pump_chance))
        if (auto ok = upstream_.pump(rng_, static_cast<size_t>(s_.upstream_batch_max)); !ok)
            failure(ok.error().message);
}

// The end: the upstream up, the live log read to its end, each backfill to its switch (a
// switch that cannot commit is tried again a bounded number of times), a last checkpoint,
// the outbox drained.
void World::drain() {
    where_ = "the end";
    upstream_.set_up(true);
    for (int idle = 0; idle < 50 && !stopped_;) {
        clock_.advance(1'000);
        auto n = host_->step(4096, /*drain=*/true);
        if (!n) {
            failure("a step failed: " + n.error().message);
            stopped_ = true;
            return;
        }
        rec_.versions.live_progress(host_->consumed_offset());
        const size_t switches = host_->switches().size();
        const size_t read = host_->backfilling() ? backfill_step(4096, "the end") : 0;
        if (!host_->backfilling() && *n == 0) break;
        idle = *n == 0 && read == 0 && host_->switches().size() == switches ? idle + 1 : 0;
    }
    if (host_->backfilling()) failure("a backfill never switched: " + rec_.versions.summary());
    checkpoint("the end", false);
    if (auto ok = upstream_.drain(rng_); !ok) failure(ok.error().message);
}

// The log as the real reader reads it back must be what was appended.
void World::read_back() {
    auto reader = log::LogReader::open(dir_ + "/log");
    if (!reader) return failure("the log does not open for reading: " + reader.error().message);
    log::Record r;
    size_t i = 0;
    for (;; ++i) {
        auto next = (*reader)->next(r);
        if (!next) return failure("reading the log back: " + next.error().message);
        if (!*next) break;
        if (i >= rec_.log.size()) return failure("the log holds more records than were appended");
        const LogEntry& e = rec_.log[i];
        if (r.offset != e.offset || r.ingest_ms != e.ingest_ms ||
            (r.type == log::RecordType::tick) != e.tick || r.topic != e.topic ||
            r.payload != e.payload)
            return failure("the log record at offset " + std::to_string(r.offset) +
                           " is not the one appended at offset " + std::to_string(e.offset));
    }
    if (i != rec_.log.size())
        failure("the log holds " + std::to_string(i) + " records, " +
                std::to_string(rec_.log.size()) + " were appended");
}

Recording World::run() {
    where_ = "tick 0";
    struct SayRepeats {
        World& w;
        ~SayRepeats() { w.say_repeats(); }
    } say{*this};
    if (!open(0, "first start")) return std::move(rec_);
    filter_->connection_started();
    size_t next_op = 0;
    for (int64_t tick = 0; tick < s_.ticks && !stopped_; ++tick) {
        where_ = "tick " + std::to_string(tick);
        for (; next_op < s_.ops.size() && s_.ops[next_op].tick <= tick && !stopped_; ++next_op)
            apply_op(s_.ops[next_op]);
        if (stopped_) break;
        traffic(tick);
        if (!stopped_) work(tick);
    }
    if (stopped_) return std::move(rec_);
    drain();
    if (stopped_) return std::move(rec_);
    for (const config::PipelineConfig& p : host_->live_config().pipelines) {
        const int index = host_->processor().engine().find_pipeline(p.spec.name);
        if (index < 0) continue;
        rec_.figures.push_back({p.spec.name, p.spec.version,
                                host_->processor().engine().stats(static_cast<uint32_t>(index)),
                                host_->processor().decode_counters()[static_cast<size_t>(index)]});
    }
    rec_.end_of_log = host_->log().end_offset();
    rec_.versions.close(rec_.end_of_log);
    read_back();
    rec_.upstream = upstream_.received();
    rec_.finished = true;
    return std::move(rec_);
}

}  // namespace tidemark::sim
