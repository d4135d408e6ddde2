#include "tests/integration/sink_support.h"

#include <sstream>
#include <thread>

namespace tidemark::test {

namespace {

using json = nlohmann::json;

// (revision, retract wins a tie), as DESIGN.md section 4 says, written out again here.
bool outranks(int64_t revision, const std::string& kind, int64_t old_revision,
              const std::string& old_kind) {
    if (revision != old_revision) return revision > old_revision;
    return kind == "retract" && old_kind != "retract";
}

std::string describe(const WindowId& w) {
    std::ostringstream s;
    s << std::get<0>(w) << "/" << std::get<1>(w) << "@" << std::get<2>(w) << " key "
      << std::get<3>(w) << " [" << std::get<4>(w) << ", " << std::get<5>(w) << ")";
    return s.str();
}

std::string describe(const CurrentRow& r) {
    return "rev " + std::to_string(r.revision) + " " + r.closed_by + " " + r.values.dump() +
           " id " + r.id;
}

// Numbers compared as doubles: jsonb prints 1e300 with all its digits, 60 as 60.
bool same_values(const json& a, const json& b) {
    if (!a.is_object() || !b.is_object() || a.size() != b.size()) return false;
    for (auto it = a.begin(); it != a.end(); ++it) {
        if (!b.contains(it.key())) return false;
        const json& x = it.value();
        const json& y = b.at(it.key());
        if (x.is_null() != y.is_null()) return false;
        if (!x.is_null() && x.get<double>() != y.get<double>()) return false;
    }
    return true;
}

}  // namespace

json sink_config(const std::string& broker_uri, const Postgres& pg, const std::string& client_id,
                 const std::string& spool_dir, std::vector<std::string> topics, uint64_t max_rows) {
    return {{"sink",
             {{"source", {{"uri", broker_uri}, {"client_id", client_id}, {"topics", topics}}},
              {"postgres", {{"conninfo", pg.conninfo()}}},
              {"health", {{"topic", "tidemark-sink/{client_id}/health"}, {"interval", "1s"}}},
              {"spool", {{"dir", spool_dir}, {"max_bytes", "64MiB"}}},
              {"batch", {{"max_rows", max_rows}, {"max_delay", "20ms"}}},
              {"log_level", "info"}}}};
}

SinkProcess::SinkProcess(const std::string& dir, const json& config, const std::string& broker_uri)
    : broker_uri_(broker_uri) {
    const std::string client = config["sink"]["source"]["client_id"].get<std::string>();
    health_topic_ = "tidemark-sink/" + client + "/health";
    const std::string path = write_config(dir, client + ".json", config);
    daemon_ = std::make_unique<Daemon>(path, dir + "/" + client + ".log", "sink");
    reconnect_health();
}

void SinkProcess::reconnect_health() {
    health_.reset();
    health_ = std::make_unique<TestClient>(TestClient::connect(broker_uri_));
    health_->subscribe(health_topic_, 1);
}

void SinkProcess::start() {
    daemon_->start();
    const int64_t since = now_ms();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    json last;
    while (true) {
        // A sink that exits (a config it refuses) fails the start at once, with its log.
        if (!daemon_->running())
            throw std::runtime_error("the sink exited at its start:\n" + log());
        const auto records = health_records(*health_, health_topic_);
        if (!records.empty()) {
            last = records.back();
            if (last.value("time_ms", int64_t{0}) >= since && last["broker"]["link_up"] == true &&
                last["postgres"]["up"] == true)
                return;
        }
        if (std::chrono::steady_clock::now() >= deadline)
            throw std::runtime_error(
                "the sink's health never showed broker.link_up and "
                "postgres.up within 30 s; last record: " +
                last.dump() + "\nsink log:\n" + log());
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
}

json SinkProcess::wait_health(const std::function<bool(const json&)>& ready,
                              std::chrono::milliseconds timeout, const std::string& what) {
    const int64_t since = now_ms();
    try {
        return test::wait_health(
            *health_, health_topic_,
            [&](const json& h) { return h.value("time_ms", int64_t{0}) >= since && ready(h); },
            timeout, what);
    } catch (const std::exception& e) {
        throw std::runtime_error(std::string(e.what()) + "\nsink log:\n" + log());
    }
}

json SinkProcess::wait_committed(std::chrono::milliseconds timeout) {
    return wait_health(
        [](const json& h) {
            return h["spool"]["backlog_bytes"] == 0 && h["postgres"]["up"] == true &&
                   h["alarms"].empty();
        },
        timeout, "everything spooled committed, no alarm");
}

CurrentView consumer_view(const std::vector<ReceivedMessage>& messages) {
    struct Version {
        std::string version;
        int64_t switch_ms = INT64_MIN;
    };
    std::map<std::pair<std::string, std::string>, Version> versions;
    std::map<std::string, std::pair<std::string, std::string>> version_topics;
    struct Kept {
        CurrentRow row;
        std::string kind;
    };
    std::map<WindowId, Kept> kept;
    for (const auto& m : messages) {
        if (m.payload.empty()) {
            if (auto it = version_topics.find(m.topic); it != version_topics.end())
                versions.erase(it->second);
            continue;
        }
        const json j = json::parse(m.payload, nullptr, false);
        if (!j.is_object()) continue;  // a poison message: not the consumer's business
        if (j.contains("switch_ms")) {
            const auto key =
                std::make_pair(j["node"].get<std::string>(), j["pipeline"].get<std::string>());
            version_topics[m.topic] = key;
            Version& v = versions[key];
            const int64_t switch_ms = j["switch_ms"].get<int64_t>();
            if (switch_ms > v.switch_ms) v = {j["version"].get<std::string>(), switch_ms};
            continue;
        }
        if (!j.contains("kind") || !j.contains("window")) continue;  // side output
        const WindowId id{j["node"].get<std::string>(),
                          j["pipeline"].get<std::string>(),
                          j.value("version", ""),
                          j["key"].get<std::string>(),
                          j["window"]["start"].get<int64_t>(),
                          j["window"]["end"].get<int64_t>()};
        Kept candidate{{j["id"].get<std::string>(), j["closed_by"].get<std::string>(),
                        j["revision"].get<int64_t>(), j["values"]},
                       j["kind"].get<std::string>()};
        auto it = kept.find(id);
        if (it == kept.end())
            kept.emplace(id, std::move(candidate));
        else if (outranks(candidate.row.revision, candidate.kind, it->second.row.revision,
                          it->second.kind))
            it->second = std::move(candidate);
    }
    CurrentView view;
    for (const auto& [id, k] : kept) {
        if (k.kind == "retract") continue;
        auto v = versions.find({std::get<0>(id), std::get<1>(id)});
        if (v == versions.end() || v->second.version != std::get<2>(id)) continue;
        view.emplace(id, k.row);
    }
    return view;
}

CurrentView current_view(const Postgres& pg, const std::string& schema) {
    CurrentView view;
    const auto rows = pg.query(
        "SELECT node, pipeline, version, key, "
        "(extract(epoch FROM window_start) * 1000)::bigint, "
        "(extract(epoch FROM window_end) * 1000)::bigint, revision, closed_by, "
        "aggregates::text, id FROM " +
        schema + ".current");
    for (const auto& r : rows) {
        const WindowId id{*r[0], *r[1], *r[2], *r[3], std::stoll(*r[4]), std::stoll(*r[5])};
        view.emplace(id, CurrentRow{*r[9], *r[7], std::stoll(*r[6]), json::parse(*r[8])});
    }
    return view;
}

std::string view_difference(const CurrentView& expected, const CurrentView& actual) {
    std::ostringstream out;
    int shown = 0;
    for (const auto& [id, row] : expected) {
        auto it = actual.find(id);
        if (it == actual.end()) {
            if (shown++ < 5) out << "missing " << describe(id) << ": " << describe(row) << "\n";
        } else if (it->second.revision != row.revision || it->second.id != row.id ||
                   it->second.closed_by != row.closed_by ||
                   !same_values(it->second.values, row.values)) {
            if (shown++ < 5)
                out << "differs " << describe(id) << ": expected " << describe(row) << ", found "
                    << describe(it->second) << "\n";
        }
    }
    for (const auto& [id, row] : actual) {
        if (!expected.contains(id) && shown++ < 5)
            out << "extra " << describe(id) << ": " << describe(row) << "\n";
    }
    if (shown > 0)
        out << "(" << shown << " differences; " << expected.size() << " rows expected, "
            << actual.size() << " found)";
    return out.str();
}

std::string wait_for_view(const Postgres& pg, const CurrentView& expected,
                          std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::string difference;
    while (true) {
        difference = view_difference(expected, current_view(pg));
        if (difference.empty() || std::chrono::steady_clock::now() >= deadline) return difference;
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
}

std::string result_json(const std::string& node, const std::string& pipeline,
                        const std::string& version, const std::string& key, int64_t start_ms,
                        int64_t end_ms, int64_t revision, const std::string& kind,
                        const json& values) {
    json j;
    j["id"] = node + "|" + pipeline + "|" + version + "|" + key + "|" + std::to_string(start_ms) +
              "|" + std::to_string(revision) + kind;
    j["node"] = node;
    j["pipeline"] = pipeline;
    j["version"] = version;
    j["key"] = key;
    j["window"] = {{"start", start_ms}, {"end", end_ms}};
    j["kind"] = kind;
    j["revision"] = revision;
    j["closed_by"] = revision == 0 ? "watermark" : "late";
    j["values"] = values;
    j["watermark"] = end_ms + 1000;
    return j.dump();
}

std::string version_json(const std::string& node, const std::string& pipeline,
                         const std::string& version, int64_t switch_ms, const json& aggregates) {
    return json{
        {"node", node},        {"pipeline", pipeline},   {"version", version},      {"since_ms", 0},
        {"previous", nullptr}, {"switch_ms", switch_ms}, {"aggregates", aggregates}}
        .dump();
}

std::vector<ReceivedMessage> wait_quiet(TestClient& client, std::chrono::milliseconds quiet,
                                        std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    size_t count = client.messages().size();
    auto last_change = std::chrono::steady_clock::now();
    while (std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        const size_t now = client.messages().size();
        if (now != count) {
            count = now;
            last_change = std::chrono::steady_clock::now();
        } else if (std::chrono::steady_clock::now() - last_change >= quiet) {
            break;
        }
    }
    return client.messages();
}

}  // namespace tidemark::test
