// Issue 13: pipeline versions through the whole process (DESIGN.md sections 4, 7 and 8). A
// changed pipeline, by SIGHUP or by restart, backfills a new version from the log while the old
// one keeps running live, then switches in one step: the version record on the upstream
// results topic + "/version" changes once, the old version emits nothing after it, and the new
// version's results upstream are exactly `tidemark replay` of the new config. A broken reload is
// refused and said so in health; a new pipeline backfills the history already in the log; kill
// -9 during a backfill resumes it and still ends with the replay's results.
//
// Every published message carries a per-device sequence number ("seq"), and the pipelines count
// events and sum seq: a final count equal to what the brokers acknowledged, with the per-device
// seq sums, shows that every message reached the log, and each version, exactly once.
//
// Limits: the backfills here are short (tens of thousands of records at a low backfill.max_share)
// so that the whole file runs in about three minutes; test 4 needs its backfill to last a few
// seconds to be killed during it and says so when it does not.
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <mqtt/async_client.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "tests/integration/daemon.h"

namespace tidemark::test {
namespace {

using namespace std::chrono_literals;

constexpr int64_t second_ms = 1000, minute_ms = 60 * second_ms;

const std::vector<std::string> devices{"d-0", "d-1", "d-2", "d-3", "d-4"};
// Five devices every 100 ms: 50 messages a second.
constexpr auto steady_period = 100ms;

std::string device_topic(const std::string& device) {
    return "sensors/" + device + "/telemetry";
}

// ---- the pipeline and its configs ----

nlohmann::json pipeline(const std::string& name, const std::string& window_size) {
    return {
        {"name", name},
        {"topic", "sensors/+/telemetry"},
        {"key", "topic:1"},
        {"timestamp", {{"pointer", "/ts"}, {"format", "epoch_ms"}}},
        {"fields", {{"seq", "/seq"}}},
        {"window", {{"type", "tumbling"}, {"size", window_size}}},
        // A publisher thread that stalls for a second on a loaded machine makes its events
        // late; allowed_lateness keeps them counted (as updates) rather than dropped.
        {"watermark",
         {{"delay", "1s"}, {"idle_timeout", "1s"}, {"max_future", "1m"}, {"scope", "global"}}},
        {"late", {{"allowed_lateness", "10s"}, {"too_late", "drop"}, {"corrections", "upsert"}}},
        {"aggregates", {{"n", {{"fn", "count"}}}, {"s", {{"fn", "sum"}, {"field", "seq"}}}}},
        {"limits", {{"max_keys", 100}, {"max_open_windows", 100000}}}};
}

// The rig's config with every result kept in the outbox (a compacted update would be missing
// upstream but present in the replay). A slow backfill: 0.5% of the time in 1 ms slices (a
// backfill gathers its share while idle, up to one slice, so the slice bounds its first burst
// too: at the default 200 ms, 30000 records went in one burst). A slice is charged the engine
// thread's CPU time (not its commit's fsync), so the pace follows the engine's speed: per 0.1%
// of share, about 900 records a second on the development machine and 2,100 in CI.
nlohmann::json base(const Rig& rig, bool slow_backfill) {
    auto cfg = rig.config();
    cfg["upstream"]["compact_superseded"] = false;
    if (slow_backfill) cfg["backfill"] = {{"max_share", 0.005}, {"max_live_delay", "1ms"}};
    return cfg;
}

// ---- the daemon's pid, for SIGHUP ----

// Daemon has no pid accessor: the child of this process whose command line is
// `tidemark run --config PATH`.
pid_t daemon_pid(const std::string& config_path) {
    for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
        const std::string name = entry.path().filename().string();
        if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
        const std::string stat = read_file_text(entry.path().string() + "/stat");
        const auto paren = stat.rfind(')');
        if (paren == std::string::npos) continue;
        std::istringstream fields(stat.substr(paren + 1));
        std::string state;
        pid_t ppid = -1;
        fields >> state >> ppid;
        if (ppid != ::getpid()) continue;
        const std::string cmdline = read_file_text(entry.path().string() + "/cmdline");
        const std::string wanted = std::string("run") + '\0' + "--config" + '\0' + config_path;
        if (cmdline.find(wanted) != std::string::npos) return static_cast<pid_t>(std::stoi(name));
    }
    throw std::runtime_error("no tidemark child runs with --config " + config_path);
}

void sighup(const Rig& rig) {
    const pid_t pid = daemon_pid(rig.config_path);
    REQUIRE(::kill(pid, SIGHUP) == 0);
}

// Writes `cfg` over the running config file (the daemon reads it on SIGHUP or restart).
void rewrite_config(const Rig& rig, const nlohmann::json& cfg) {
    write_file(rig.config_path, cfg.dump(2));
}

void restart(Rig& rig) {
    rig.daemon->start();
    rig.wait_health(
        [](const nlohmann::json& h) {
            return h.contains("ingest") && h["ingest"].value("connected", false);
        },
        30s, "ingest.connected after the restart");
}

// ---- history published fast ----

struct Message {
    std::string topic, payload;
};

// QoS1 publishes with up to `window` awaiting their PUBACK, in order on one connection: a few
// thousand messages a second where TestClient (one round trip each) manages a few hundred.
void publish_burst(const std::string& uri, const std::vector<Message>& messages,
                   size_t window = 100) {
    static std::atomic<int> counter{0};
    ::mqtt::async_client client(
        uri, "burst-" + std::to_string(::getpid()) + "-" + std::to_string(counter.fetch_add(1)),
        ::mqtt::create_options(MQTTVERSION_3_1_1),
        static_cast<::mqtt::iclient_persistence*>(nullptr));
    ::mqtt::connect_options options;
    options.set_mqtt_version(MQTTVERSION_3_1_1);
    options.set_clean_session(true);
    options.set_keep_alive_interval(30);
    options.set_connect_timeout(5);
    options.set_max_inflight(static_cast<int>(window));
    client.connect(options)->wait_for(10s);
    if (!client.is_connected()) throw std::runtime_error("publish_burst: cannot connect to " + uri);
    std::deque<::mqtt::delivery_token_ptr> inflight;
    auto settle_one = [&] {
        if (!inflight.front()->wait_for(10s)) {
            throw std::runtime_error("publish_burst: a publish was not acknowledged");
        }
        inflight.pop_front();
    };
    for (const auto& m : messages) {
        if (inflight.size() >= window) settle_one();
        inflight.push_back(client.publish(m.topic, m.payload.data(), m.payload.size(), 1, false));
    }
    while (!inflight.empty())
        settle_one();
    client.disconnect()->wait_for(10s);
}

// What was published: per device, the messages and the sum of their seq fields.
struct Tally {
    std::map<std::string, int64_t> count, seq_sum;
    int64_t total() const {
        int64_t n = 0;
        for (const auto& [d, c] : count)
            n += c;
        return n;
    }
};

// `per_device` messages per device, event times from `first_ts_ms` every `spacing_ms` (the
// devices interleaved in time order), seq from `first_seq` (distinct from the steady
// publisher's, which start at 0).
std::vector<Message> history(int64_t first_ts_ms, int64_t spacing_ms, int64_t per_device,
                             int64_t first_seq, Tally& tally) {
    std::vector<Message> out;
    out.reserve(static_cast<size_t>(per_device) * devices.size());
    for (int64_t i = 0; i < per_device; ++i) {
        for (size_t d = 0; d < devices.size(); ++d) {
            const int64_t ts =
                first_ts_ms + i * spacing_ms + static_cast<int64_t>(d) * (spacing_ms / 10);
            const int64_t seq = first_seq + i;
            out.push_back({device_topic(devices[d]), telemetry_seq(ts, seq)});
            tally.count[devices[d]] += 1;
            tally.seq_sum[devices[d]] += seq;
        }
    }
    return out;
}

// The steady publisher's messages: seq 0..n-1 per device.
void add_steady(const SteadyPublisher& publisher, Tally& tally) {
    for (const auto& [d, n] : publisher.published()) {
        tally.count[d] += n;
        tally.seq_sum[d] += n * (n - 1) / 2;
    }
}

// ---- what arrived upstream ----

// Everything on tidemark/NODE/#, in arrival order: one connection, so results and version
// records keep the order the forwarder sent them in.
struct Upstream {
    explicit Upstream(const Rig& rig)
        : node(rig.node), client(TestClient::connect(rig.upstream.uri())) {
        client.subscribe("tidemark/" + node + "/#", 1);
    }
    std::string node;
    TestClient client;
};

struct Seen {
    size_t index = 0;  // arrival position
    std::string pipeline, version, payload;
    bool is_version_record = false;
    nlohmann::json json;  // null for an empty (cleared) version record
};

std::vector<Seen> seen(const Upstream& up) {
    std::vector<Seen> out;
    const std::string prefix = "tidemark/" + up.node + "/";
    const auto messages = up.client.messages();
    for (size_t i = 0; i < messages.size(); ++i) {
        const auto& m = messages[i];
        if (!m.topic.starts_with(prefix)) continue;
        std::string rest = m.topic.substr(prefix.size());
        Seen s;
        s.index = i;
        s.payload = m.payload;
        if (rest.ends_with("/side") || rest.ends_with("/late")) continue;
        if (rest.ends_with("/version")) {
            s.is_version_record = true;
            rest.resize(rest.size() - std::string("/version").size());
        }
        s.pipeline = rest;
        if (!m.payload.empty()) {
            s.json = nlohmann::json::parse(m.payload, nullptr, false);
            if (s.json.is_discarded()) throw std::runtime_error("not JSON upstream: " + m.payload);
            s.version = s.json.value("version", "");
        }
        out.push_back(std::move(s));
    }
    return out;
}

std::vector<Seen> version_records(const std::vector<Seen>& all, const std::string& pipeline) {
    std::vector<Seen> out;
    for (const auto& s : all) {
        if (s.is_version_record && s.pipeline == pipeline) out.push_back(s);
    }
    return out;
}

std::vector<Seen> results_of(const std::vector<Seen>& all, const std::string& pipeline,
                             const std::string& version) {
    std::vector<Seen> out;
    for (const auto& s : all) {
        if (!s.is_version_record && s.pipeline == pipeline && s.version == version) {
            out.push_back(s);
        }
    }
    return out;
}

// Payloads, a resent id (after a kill -9) kept once, at its first arrival.
std::vector<std::string> payloads_dedup(const std::vector<Seen>& results) {
    std::set<std::string> ids;
    std::vector<std::string> out;
    for (const auto& s : results) {
        if (ids.insert(s.json.at("id").get<std::string>()).second) out.push_back(s.payload);
    }
    return out;
}

std::vector<std::string> payloads(const std::vector<Seen>& results) {
    std::vector<std::string> out;
    for (const auto& s : results)
        out.push_back(s.payload);
    return out;
}

// `tidemark replay --config CONFIG`, the lines of `pipeline` at `version`.
std::vector<std::string> replay(const Rig& rig, const std::string& config_path,
                                const std::string& pipeline, const std::string& version) {
    const std::string out = rig.dir.path() + "/replay-" + pipeline + "-" + version + ".jsonl";
    const auto r = run_tidemark({"replay", "--config", config_path, "--out", out}, 120s);
    INFO("replay stderr: " << r.err);
    REQUIRE(r.exit_code == 0);
    std::vector<std::string> lines;
    std::istringstream in(read_file_text(out));
    std::string line;
    while (std::getline(in, line)) {
        const auto j = nlohmann::json::parse(line);
        if (j.at("pipeline") == pipeline && j.value("version", "") == version) {
            lines.push_back(line);
        }
    }
    return lines;
}

// The consumer's view (highest revision per window) of these payloads, summed per key, over
// the windows that end by `end_max_ms`.
Tally tally_of(const std::vector<std::string>& payload_list, int64_t end_max_ms = INT64_MAX) {
    std::vector<ResultRecord> records;
    for (const auto& p : payload_list)
        records.push_back(parse_result(p));
    Tally t;
    for (const auto& [k, r] : upsert_view(records)) {
        if (k.end_ms > end_max_ms) continue;
        t.count[k.key] += r.values.at("n").get<int64_t>();
        t.seq_sum[k.key] += static_cast<int64_t>(r.values.at("s").get<double>());
    }
    return t;
}

void check_exactly_once(const Tally& got, const Tally& published, const std::string& what) {
    INFO(what);
    CHECK(got.total() == published.total());
    CHECK(got.count == published.count);
    CHECK(got.seq_sum == published.seq_sum);
}

// The first position where two sequences differ, for a readable failure.
void check_same_sequence(const std::vector<std::string>& upstream,
                         const std::vector<std::string>& replayed, const std::string& what) {
    INFO(what << ": " << upstream.size() << " upstream, " << replayed.size() << " replayed");
    CHECK(upstream.size() == replayed.size());
    for (size_t i = 0; i < std::min(upstream.size(), replayed.size()); ++i) {
        if (upstream[i] != replayed[i]) {
            INFO("first difference at " << i << "\nupstream: " << upstream[i]
                                        << "\nreplayed: " << replayed[i]);
            CHECK(upstream[i] == replayed[i]);
            break;
        }
    }
}

// ---- health ----

std::string live_version(const nlohmann::json& h, const std::string& pipeline) {
    if (!h.contains("pipelines") || !h["pipelines"].contains(pipeline)) return "";
    return h["pipelines"][pipeline].value("version", "");
}

std::string backfill_state(const nlohmann::json& h, const std::string& pipeline) {
    if (!h.contains("pipelines") || !h["pipelines"].contains(pipeline)) return "";
    const auto& p = h["pipelines"][pipeline];
    if (!p.contains("backfill") || !p["backfill"].is_object()) return "";
    return p["backfill"].value("state", "");
}

// Publisher stopped: waits until every window of `pipeline` closed (on idleness) and every
// result is acknowledged upstream, then stops the daemon.
void drain_and_stop(Rig& rig, const std::vector<std::string>& pipelines) {
    rig.wait_health(
        [&](const nlohmann::json& h) {
            for (const auto& p : pipelines) {
                if (!h["pipelines"].contains(p)) return false;
                if (h["pipelines"][p].value("open_windows", 1) != 0) return false;
                if (!backfill_state(h, p).empty() && backfill_state(h, p) != "switched") {
                    return false;
                }
            }
            return h["outbox"].value("rows", 1) == 0 && h["upstream"].value("inflight", 1) == 0;
        },
        60s, "every window closed, no backfill running and the outbox drained");
    std::this_thread::sleep_for(1s);  // the last PUBACKed rows reach the subscriber
    REQUIRE(rig.daemon->terminate() == 0);
}

// Publisher stopped, for windows too long to wait for: once the last messages are in, the
// gateway broker stops, so that ingest appends nothing more (no ticks while disconnected) and
// the log the daemon processed is the log replay reads; the daemon stops once nothing more has
// arrived upstream for two seconds. Health (on the gateway broker) is gone from then on.
void freeze_and_stop(Rig& rig, const Upstream& up) {
    std::this_thread::sleep_for(2s);
    rig.gateway.stop();
    size_t last = 0;
    auto quiet_since = std::chrono::steady_clock::now();
    const bool quiet = eventually(
        [&] {
            const size_t n = up.client.messages().size();
            if (n != last) {
                last = n;
                quiet_since = std::chrono::steady_clock::now();
            }
            return std::chrono::steady_clock::now() - quiet_since >= 2s;
        },
        60s);
    REQUIRE(quiet);
    REQUIRE(rig.daemon->terminate() == 0);
}

// Waits for the `n`th version record of `pipeline` upstream.
std::vector<Seen> wait_version_records(Rig& rig, const Upstream& up, const std::string& pipeline,
                                       size_t n, std::chrono::milliseconds timeout) {
    std::vector<Seen> records;
    const bool ok = eventually(
        [&] {
            records = version_records(seen(up), pipeline);
            return records.size() >= n;
        },
        timeout);
    INFO("tidemark log:\n" << rig.daemon_log());
    REQUIRE(ok);
    return records;
}

// Health's pipelines.p.version is the live version: from `from_ms` (a reload or a restart)
// until health says the backfill switched, the old one.
void check_live_until_switch(Rig& rig, int64_t from_ms, const std::string& old_version) {
    std::vector<nlohmann::json> wrong;
    for (const auto& x : health_records(*rig.health_client, rig.health_topic())) {
        if (x.value("time_ms", int64_t{0}) <= from_ms) continue;
        if (backfill_state(x, "p") == "switched") break;
        if (live_version(x, "p") != old_version) wrong.push_back(x);
    }
    INFO(wrong.size() << " health records name another version live before the switch; the first: "
                      << (wrong.empty() ? std::string() : wrong.front().dump()));
    CHECK(wrong.empty());
}

struct Timer {
    std::string name;
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
    ~Timer() {
        const auto s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start);
        std::printf("versions: %s took %.1f s\n", name.c_str(), s.count());
    }
};

// A version record (DESIGN.md section 4): {"node", "pipeline", "version": V, "since_ms": N,
// "previous": P | null, "switch_ms", "aggregates": {name: fn}}.
void check_version_record(const Seen& r, const std::string& version,
                          const std::optional<std::string>& previous) {
    INFO("version record " << r.payload);
    REQUIRE(r.json.is_object());
    CHECK(r.json.at("version") == version);
    CHECK(r.json.at("since_ms").is_number_integer());
    CHECK(r.json.at("node").is_string());
    CHECK(r.json.at("pipeline").is_string());
    CHECK(r.json.at("switch_ms").is_number_integer());
    CHECK(r.json.at("aggregates").is_object());
    for (const auto& [name, fn] : r.json.at("aggregates").items())
        CHECK(fn.is_string());
    if (previous) {
        CHECK(r.json.at("previous") == *previous);
    } else {
        CHECK(r.json.at("previous").is_null());
    }
}

bool is_version_text(const std::string& v) {
    return v.size() == 8 && std::all_of(v.begin(), v.end(), [](char c) {
               return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
           });
}

// The scene of tests 1 and 5: history, then steady traffic on pipeline "p" with 2 s windows.
struct WidenScene {
    static constexpr int64_t history_spacing_ms = 100;

    // `history_per_device` x 5 messages of history: 20000 make a backfill of a few seconds.
    WidenScene(const std::string& node, int64_t history_per_device_)
        : rig(node, {}, {}),
          up(rig),
          publisher(rig.gateway.uri(), devices, steady_period),
          history_per_device(history_per_device_) {}

    // Starts with the 2 s window, publishes the history and runs live for a few seconds.
    void start_old() {
        old_cfg = base(rig, true);
        if (backfill_share) old_cfg["backfill"]["max_share"] = *backfill_share;
        old_cfg["pipelines"] = {pipeline("p", "2s")};
        new_cfg = old_cfg;
        new_cfg["pipelines"] = {pipeline("p", "6s")};
        rig.start(old_cfg);
        old_path = write_config(rig.dir.path(), "old.json", old_cfg);
        new_path = write_config(rig.dir.path(), "new.json", new_cfg);

        const int64_t span_ms = history_per_device * history_spacing_ms;
        history_first_ts_ms = (now_ms() - span_ms - 30 * second_ms) / minute_ms * minute_ms;
        publish_burst(rig.gateway.uri(), history(history_first_ts_ms, history_spacing_ms,
                                                 history_per_device, 1'000'000, published));
        publisher.start();
        const auto h = rig.wait_health(
            [&](const nlohmann::json& x) {
                return x["pipelines"]["p"].value("events_in", int64_t{0}) >=
                           published.total() + 100 &&
                       !live_version(x, "p").empty();
            },
            60s, "the history and some live traffic in");
        old_version = live_version(h, "p");
        CHECK(is_version_text(old_version));
        // Old-version results from live windows, not only the history's.
        std::this_thread::sleep_for(3s);
    }

    Rig rig;
    Upstream up;
    SteadyPublisher publisher;
    Tally published;
    nlohmann::json old_cfg, new_cfg;
    std::string old_path, new_path, old_version;
    int64_t history_per_device = 0;
    int64_t history_first_ts_ms = 0;
    std::optional<double> backfill_share;  // unset: base()'s
};

// After the switch and the stop: the checks tests 1 and 5 share. Returns the new version.
std::string check_widened(WidenScene& s, bool resends_possible) {
    const auto all = seen(s.up);
    const auto records = version_records(all, "p");
    INFO("version records: " << records.size());
    REQUIRE(records.size() == 2);  // the first start's and the switch's: once, no more
    check_version_record(records[0], s.old_version, std::nullopt);
    const std::string new_version = records[1].version;
    CHECK(is_version_text(new_version));
    CHECK(new_version != s.old_version);
    check_version_record(records[1], new_version, s.old_version);
    // A sink orders the two by switch_ms.
    CHECK(records[1].json.at("switch_ms").get<int64_t>() >
          records[0].json.at("switch_ms").get<int64_t>());

    // The old version emits nothing after the switch's record; the new one emitted its
    // backfill before it and its live results after it.
    const auto old_results = results_of(all, "p", s.old_version);
    const auto new_results = results_of(all, "p", new_version);
    REQUIRE(!old_results.empty());
    REQUIRE(!new_results.empty());
    CHECK(old_results.back().index < records[1].index);
    CHECK(new_results.front().index < records[1].index);
    CHECK(new_results.back().index > records[1].index);
    for (const auto& r : all) {
        if (!r.is_version_record && r.pipeline == "p") {
            INFO("result " << r.payload);
            CHECK((r.version == s.old_version || r.version == new_version));
        }
    }

    // The new version's history: since_ms is the oldest event it covers, and its first
    // windows start at the first history event (on a minute boundary, so on the 6 s grid).
    int64_t first_start_ms = INT64_MAX;
    for (const auto& r : new_results)
        first_start_ms = std::min(first_start_ms, r.json["window"]["start"].get<int64_t>());
    CHECK(first_start_ms == s.history_first_ts_ms);
    CHECK(records[1].json.value("since_ms", int64_t{-1}) == s.history_first_ts_ms);

    // Upstream equals replay: the new version whole, the old version up to its switch.
    const auto new_upstream =
        resends_possible ? payloads_dedup(new_results) : payloads(new_results);
    const auto old_upstream =
        resends_possible ? payloads_dedup(old_results) : payloads(old_results);
    check_same_sequence(new_upstream, replay(s.rig, s.new_path, "p", new_version),
                        "new version upstream vs replay of the new config");
    auto old_replayed = replay(s.rig, s.old_path, "p", s.old_version);
    CHECK(old_upstream.size() <= old_replayed.size());
    old_replayed.resize(std::min(old_replayed.size(), old_upstream.size()));
    check_same_sequence(old_upstream, old_replayed,
                        "old version upstream vs the start of the replay of the old config");

    // Every acknowledged message counted once by the new version, and once in the log (the
    // old config replayed over all of it).
    add_steady(s.publisher, s.published);
    check_exactly_once(tally_of(new_upstream), s.published, "new version upstream");
    check_exactly_once(tally_of(replay(s.rig, s.old_path, "p", s.old_version)), s.published,
                       "replay of the old config over the whole log");
    return new_version;
}

}  // namespace

TEST_CASE("reload widens a window: a new version backfills, then switches once", "[versions]") {
    Timer timer{"reload widens a window"};
    WidenScene s("reload", 4'000);
    // The old version's 2 s windows close every 2 s (1 s after their end): the backfill must
    // last longer than that for the old version to emit during it. At base()'s 0.5% CI read
    // the 20000 records in about 2 s and once switched before any closed (stop 45); at 0.2%
    // the switch came 4.1 s after the reload on the development machine, so 0.1% here.
    s.backfill_share = 0.001;
    s.start_old();

    const size_t old_results_at_reload = results_of(seen(s.up), "p", s.old_version).size();
    rewrite_config(s.rig, s.new_cfg);
    const int64_t reload_ms = now_ms();
    sighup(s.rig);
    bool saw_running = false;
    const auto h = s.rig.wait_health(
        [&](const nlohmann::json& x) {
            if (backfill_state(x, "p") == "running") saw_running = true;
            return x.contains("last_reload") && live_version(x, "p") != s.old_version &&
                   !live_version(x, "p").empty();
        },
        180s, "the new version live");
    INFO("health after the switch " << h.dump());
    CHECK(h["last_reload"].value("ok", false));
    CHECK(backfill_state(h, "p") == "switched");
    CHECK(saw_running);
    const auto records = wait_version_records(s.rig, s.up, "p", 2, 30s);
    std::printf(
        "versions: the widened window switched %.1f s after the reload\n",
        static_cast<double>(records[1].json.value("switch_ms", reload_ms) - reload_ms) / 1000.0);
    check_live_until_switch(s.rig, reload_ms, s.old_version);

    // Results of the old version kept coming while the new one backfilled.
    CHECK(results_of(seen(s.up), "p", s.old_version).size() > old_results_at_reload);
    std::this_thread::sleep_for(4s);  // live results of the new version
    s.publisher.stop();
    CHECK(s.publisher.errors().empty());
    drain_and_stop(s.rig, {"p"});
    check_widened(s, /*resends_possible=*/false);
}

TEST_CASE("reload with a broken config is refused; a good one then applies", "[versions]") {
    Timer timer{"reload with a broken config"};
    Rig rig("refuse", {}, {});
    Upstream up(rig);
    auto cfg = base(rig, false);
    cfg["pipelines"] = {pipeline("p", "2s")};
    rig.start(cfg);
    SteadyPublisher publisher(rig.gateway.uri(), devices, steady_period);
    publisher.start();
    const auto h0 = rig.wait_health(
        [](const nlohmann::json& x) { return !live_version(x, "p").empty(); }, 20s, "a version");
    const std::string version = live_version(h0, "p");
    CHECK_FALSE(h0.contains("last_reload"));  // absent before the first SIGHUP
    REQUIRE(eventually([&] { return !results_of(seen(up), "p", version).empty(); }, 20s));

    auto bad = cfg;
    bad["unknown_key"] = 1;
    bad["pipelines"][0]["window"]["size"] = "0s";
    rewrite_config(rig, bad);
    sighup(rig);
    const auto refused = rig.wait_health(
        [](const nlohmann::json& x) { return x.contains("last_reload"); }, 20s, "last_reload");
    INFO("health " << refused.dump());
    const auto& reload = refused["last_reload"];
    CHECK(reload.value("ok", true) == false);
    CHECK(reload.at("time_ms").is_number_integer());
    bool names_key = false, names_size = false;
    for (const auto& e : reload.at("errors")) {
        const std::string text = e.get<std::string>();
        names_key = names_key || text.starts_with("/unknown_key");
        names_size = names_size || text.starts_with("/pipelines/0/window/size");
    }
    CHECK(names_key);
    CHECK(names_size);
    CHECK(rig.daemon_log().find("/pipelines/0/window/size") != std::string::npos);

    // Still running, the same version, results still coming.
    REQUIRE(rig.daemon->running());
    const size_t before = results_of(seen(up), "p", version).size();
    const auto later = rig.wait_health(
        [&](const nlohmann::json& x) {
            return results_of(seen(up), "p", version).size() >= before + devices.size() &&
                   x.contains("last_reload");
        },
        20s, "more results of the running version");
    CHECK(live_version(later, "p") == version);
    CHECK(backfill_state(later, "p").empty());

    // A good reload: a limit changes (applied in place, the version stays).
    auto good = cfg;
    good["pipelines"][0]["limits"]["max_keys"] = 200;
    rewrite_config(rig, good);
    sighup(rig);
    const int64_t refused_ms = reload.at("time_ms").get<int64_t>();
    const auto applied = rig.wait_health(
        [&](const nlohmann::json& x) {
            return x.contains("last_reload") &&
                   x["last_reload"].value("time_ms", int64_t{0}) > refused_ms;
        },
        20s, "a second last_reload");
    INFO("health " << applied.dump());
    CHECK(applied["last_reload"].value("ok", false));
    CHECK(applied["last_reload"].value("errors", nlohmann::json::array()).empty());
    CHECK(live_version(applied, "p") == version);
    CHECK(backfill_state(applied, "p").empty());
    const size_t after_good = results_of(seen(up), "p", version).size();
    CHECK(eventually(
        [&] { return results_of(seen(up), "p", version).size() >= after_good + devices.size(); },
        10s));
    publisher.stop();
    REQUIRE(rig.daemon->terminate() == 0);
    const auto records = version_records(seen(up), "p");
    CHECK(records.size() == 1);  // neither reload made a version
    if (!records.empty()) check_version_record(records[0], version, std::nullopt);
}

TEST_CASE("a new pipeline backfills the history already in the log", "[versions]") {
    Timer timer{"new pipeline backfills"};
    Rig rig("backfill", {}, {});
    Upstream up(rig);
    auto cfg = base(rig, false);
    cfg["pipelines"] = {pipeline("a", "2s")};
    rig.start(cfg);

    // 2000 messages over an hour that ended at least 10 minutes ago, starting on a 10-minute
    // boundary: B's windows up to history_end_ms hold history only.
    Tally published;
    const int64_t first_ts_ms = (now_ms() - 70 * minute_ms) / (10 * minute_ms) * (10 * minute_ms);
    const int64_t history_end_ms = first_ts_ms + 60 * minute_ms;
    publish_burst(rig.gateway.uri(),
                  history(first_ts_ms, 9 * second_ms, 400, 1'000'000, published));
    const auto h = rig.wait_health(
        [&](const nlohmann::json& x) {
            return x["pipelines"]["a"].value("events_in", int64_t{0}) == published.total();
        },
        30s, "the history in");
    const std::string version_a = live_version(h, "a");
    REQUIRE(rig.daemon->terminate() == 0);

    auto cfg2 = cfg;
    cfg2["pipelines"].push_back(pipeline("b", "10m"));
    rewrite_config(rig, cfg2);
    restart(rig);
    SteadyPublisher publisher(rig.gateway.uri(), devices, steady_period);
    publisher.start();
    const auto records_b = wait_version_records(rig, up, "b", 1, 60s);
    const int64_t live_from_ms = now_ms();
    std::this_thread::sleep_for(5s);
    publisher.stop();
    freeze_and_stop(rig, up);

    const auto all = seen(up);
    const auto b_records = version_records(all, "b");
    REQUIRE(b_records.size() == 1);
    const std::string version_b = b_records[0].version;
    CHECK(is_version_text(version_b));
    check_version_record(b_records[0], version_b, std::nullopt);
    CHECK(b_records[0].json.value("since_ms", int64_t{-1}) == first_ts_ms);
    // A's definition did not change: its record stays the first start's.
    for (const auto& r : version_records(all, "a"))
        check_version_record(r, version_a, std::nullopt);

    const auto b_results = results_of(all, "b", version_b);
    REQUIRE(!b_results.empty());
    int64_t first_start_ms = INT64_MAX;
    for (const auto& r : b_results)
        first_start_ms = std::min(first_start_ms, r.json["window"]["start"].get<int64_t>());
    CHECK(first_start_ms == first_ts_ms);
    CHECK(b_results.front().index < b_records[0].index);  // the history before the record
    check_same_sequence(payloads(b_results), replay(rig, rig.config_path, "b", version_b),
                        "b upstream vs replay");
    check_exactly_once(tally_of(payloads(b_results), history_end_ms), published,
                       "b upstream, the history's windows");

    // A went on: windows of the live traffic after the restart; over both runs, what replay
    // gives, the history counted once.
    const auto a_results = results_of(all, "a", version_a);
    CHECK(std::any_of(a_results.begin(), a_results.end(), [&](const Seen& r) {
        return r.json["window"]["end"].get<int64_t>() > live_from_ms;
    }));
    check_same_sequence(payloads_dedup(a_results), replay(rig, rig.config_path, "a", version_a),
                        "a upstream (both runs) vs replay");
    check_exactly_once(tally_of(payloads(a_results), history_end_ms), published,
                       "a upstream, the history's windows");
}

TEST_CASE("kill -9 during a backfill: the restart resumes it and ends with replay's results",
          "[versions]") {
    Timer timer{"kill -9 during a backfill"};
    Rig rig("bfkill", {}, {});
    Upstream up(rig);
    // The share is charged by the engine thread's CPU time, so the pace is the engine's, not the
    // disk's: at 0.5% a backfill read 10,500 records a second in CI and had all but finished at
    // the kill. 0.1% here (900-2,100 a second), and after the kill 0.02% (a fifth of that).
    auto old_cfg = base(rig, true);
    old_cfg["backfill"]["max_share"] = 0.001;
    old_cfg["pipelines"] = {pipeline("p", "5s")};
    rig.start(old_cfg);
    const std::string old_path = write_config(rig.dir.path(), "old.json", old_cfg);

    // 40000 messages over an hour in chunks, each let into the log before the next (the broker
    // queues at most 100000 messages for tidemark's session): about ten seconds of backfill.
    Tally published;
    constexpr int64_t chunks = 2, per_device_per_chunk = 4'000, spacing_ms = 500;
    const int64_t first_ts_ms = (now_ms() - 2 * 60 * minute_ms) / minute_ms * minute_ms;
    const int64_t history_end_ms = first_ts_ms + chunks * per_device_per_chunk * spacing_ms;
    for (int64_t c = 0; c < chunks; ++c) {
        publish_burst(
            rig.gateway.uri(),
            history(first_ts_ms + c * per_device_per_chunk * spacing_ms, spacing_ms,
                    per_device_per_chunk, 1'000'000 + c * per_device_per_chunk, published));
    }
    SteadyPublisher publisher(rig.gateway.uri(), devices, steady_period);
    publisher.start();
    const auto h0 = rig.wait_health(
        [&](const nlohmann::json& x) {
            return x["pipelines"]["p"].value("events_in", int64_t{0}) >= published.total() + 100;
        },
        90s, "the history in");
    const std::string old_version = live_version(h0, "p");

    auto new_cfg = old_cfg;
    new_cfg["pipelines"] = {pipeline("p", "10s")};
    const std::string new_path = write_config(rig.dir.path(), "new.json", new_cfg);
    rewrite_config(rig, new_cfg);
    sighup(rig);
    const auto progress = rig.wait_health(
        [](const nlohmann::json& x) {
            return backfill_state(x, "p") == "running" &&
                   x["pipelines"]["p"]["backfill"].value("records", int64_t{0}) >= 1'000;
        },
        90s, "backfill running, 1000 records in");
    const int64_t progress_offset = progress["pipelines"]["p"]["backfill"]["offset"].get<int64_t>();
    // Past a checkpoint interval (1 s) after that position, so that a checkpoint holds it.
    std::this_thread::sleep_for(1500ms);
    const auto before_kill = health_records(*rig.health_client, rig.health_topic()).back();
    INFO("health at the kill " << before_kill.dump());
    REQUIRE(backfill_state(before_kill, "p") == "running");  // else: more history needed
    rig.daemon->kill9();
    const int64_t kill_ms = now_ms();
    const size_t old_before_restart = payloads_dedup(results_of(seen(up), "p", old_version)).size();
    // Slower after the restart, so that the old version's live windows close before the switch
    // (the backfill's settings make no new version).
    auto slow_cfg = new_cfg;
    slow_cfg["backfill"]["max_share"] = 0.0002;
    rewrite_config(rig, slow_cfg);
    restart(rig);

    // The first backfill figures after the restart: resumed from the checkpoint, not from the
    // start of the log.
    const auto resumed = rig.wait_health(
        [&](const nlohmann::json& x) {
            return x.value("time_ms", int64_t{0}) > kill_ms && !backfill_state(x, "p").empty();
        },
        30s, "the backfill in health after the restart");
    INFO("health after the restart " << resumed.dump());
    std::printf(
        "versions: backfill at %lld before the kill, %s at the kill, %s after the restart\n",
        static_cast<long long>(progress_offset),
        before_kill["pipelines"]["p"]["backfill"].dump().c_str(),
        resumed["pipelines"]["p"].value("backfill", nlohmann::json()).dump().c_str());
    if (backfill_state(resumed, "p") == "running") {
        CHECK(resumed["pipelines"]["p"]["backfill"]["offset"].get<int64_t>() >= progress_offset);
        CHECK(resumed["pipelines"]["p"]["backfill"]["version"] ==
              before_kill["pipelines"]["p"]["backfill"]["version"]);
    }
    // The old version runs live while the resumed backfill goes on: a result of it after the
    // restart, before the switch.
    const bool old_ran = eventually(
        [&] {
            const auto all = seen(up);
            return payloads_dedup(results_of(all, "p", old_version)).size() > old_before_restart ||
                   version_records(all, "p").size() >= 2;
        },
        60s);
    REQUIRE(old_ran);
    CHECK(version_records(seen(up), "p").size() == 1);
    // Then the rest at the default pace (a reload changes backfill settings and no version):
    // at 0.5% the rest would have taken 500 s in CI (its eta_s there).
    auto fast_cfg = new_cfg;
    fast_cfg.erase("backfill");
    rewrite_config(rig, fast_cfg);
    sighup(rig);
    wait_version_records(rig, up, "p", 2, 120s);
    check_live_until_switch(rig, kill_ms, old_version);
    std::this_thread::sleep_for(3s);
    publisher.stop();
    freeze_and_stop(rig, up);

    const auto all = seen(up);
    const auto all_records = version_records(all, "p");
    REQUIRE(all_records.size() == 2);
    check_version_record(all_records[0], old_version, std::nullopt);
    const std::string new_version = all_records[1].version;
    CHECK(new_version != old_version);
    check_version_record(all_records[1], new_version, old_version);

    const auto upstream_new = payloads_dedup(results_of(all, "p", new_version));
    const auto replayed_new = replay(rig, new_path, "p", new_version);
    CHECK(std::set<std::string>(upstream_new.begin(), upstream_new.end()) ==
          std::set<std::string>(replayed_new.begin(), replayed_new.end()));
    check_same_sequence(upstream_new, replayed_new, "new version upstream (deduplicated)");
    check_exactly_once(tally_of(upstream_new, history_end_ms), published,
                       "new version upstream, the history's windows");
    // No old-version result after the switch record; before it, a start of the old replay.
    const auto old_results = results_of(all, "p", old_version);
    REQUIRE(!old_results.empty());
    CHECK(old_results.back().index < all_records[1].index);
    const auto old_upstream = payloads_dedup(old_results);
    auto old_replayed = replay(rig, old_path, "p", old_version);
    CHECK(old_upstream.size() <= old_replayed.size());
    old_replayed.resize(std::min(old_replayed.size(), old_upstream.size()));
    check_same_sequence(old_upstream, old_replayed,
                        "old version upstream vs the start of the replay of the old config");
}

TEST_CASE("restart with a changed pipeline behaves as a reload", "[versions]") {
    Timer timer{"restart with a changed pipeline"};
    WidenScene s("restartv", 1'000);
    s.start_old();
    REQUIRE(s.rig.daemon->terminate() == 0);
    rewrite_config(s.rig, s.new_cfg);
    const int64_t restart_ms = now_ms();
    restart(s.rig);  // once refused with exit 78
    std::this_thread::sleep_for(2s);
    INFO("tidemark log:\n" << s.rig.daemon_log());
    REQUIRE(s.rig.daemon->running());
    wait_version_records(s.rig, s.up, "p", 2, 90s);
    s.rig.wait_health([](const nlohmann::json& x) { return backfill_state(x, "p") == "switched"; },
                      10s, "the switch");
    check_live_until_switch(s.rig, restart_ms, s.old_version);
    std::this_thread::sleep_for(4s);  // live results of the new version
    s.publisher.stop();
    CHECK(s.publisher.errors().empty());
    drain_and_stop(s.rig, {"p"});
    // The old version ran after the restart too, until the switch; a row sent before the stop
    // but not acknowledged may come again.
    check_widened(s, /*resends_possible=*/true);
}

}  // namespace tidemark::test
