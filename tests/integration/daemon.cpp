#include "tests/integration/daemon.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace tidemark::test {

namespace {

[[noreturn]] void throw_errno(const std::string& what) {
    throw std::runtime_error(what + ": " + std::strerror(errno));
}

int decode_status(int status) {
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return -1;
}

// Waits up to `timeout` for `pid`; its decoded status, or nullopt while it still runs.
std::optional<int> reap(pid_t pid, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
        int status = 0;
        const pid_t r = ::waitpid(pid, &status, WNOHANG);
        if (r == pid) return decode_status(status);
        if (r < 0 && errno == ECHILD) return -1;
        if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
}

// fork + exec of tidemark with stdout to `out_path` and stderr to `err_path` (both appended).
pid_t spawn(const std::vector<std::string>& args, const std::string& out_path,
            const std::string& err_path) {
    std::vector<std::string> argv_text{tidemark_binary()};
    argv_text.insert(argv_text.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : argv_text)
        argv.push_back(a.data());
    argv.push_back(nullptr);
    // A SIGTERM sent right after start() may arrive between fork and exec: blocked there, and
    // back to the default in the child, so that it never runs the test framework's handler.
    sigset_t term, old_mask;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    ::pthread_sigmask(SIG_BLOCK, &term, &old_mask);
    const pid_t pid = ::fork();
    if (pid < 0) {
        ::pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
        throw_errno("fork");
    }
    if (pid == 0) {
        ::signal(SIGTERM, SIG_DFL);
        ::pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the test
        const int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
        const int err = out_path == err_path
                            ? out
                            : ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (out >= 0) ::dup2(out, STDOUT_FILENO);
        if (err >= 0) ::dup2(err, STDERR_FILENO);
        ::execv(argv[0], argv.data());
        ::_exit(127);
    }
    ::pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
    return pid;
}

}  // namespace

std::string tidemark_binary() {
    return TIDEMARK_BINARY;
}

int64_t now_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

void write_file(const std::string& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out) throw std::runtime_error("cannot write " + path);
}

std::string read_file_text(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

CommandResult run_tidemark(const std::vector<std::string>& args,
                           std::chrono::milliseconds timeout) {
    TempDir dir("tidemark-cmd");
    const std::string out_path = dir.path() + "/out";
    const std::string err_path = dir.path() + "/err";
    const pid_t pid = spawn(args, out_path, err_path);
    CommandResult result;
    auto status = reap(pid, timeout);
    if (!status) {
        ::kill(pid, SIGKILL);
        status = reap(pid, std::chrono::seconds(5));
        result.err = "(killed after timeout) ";
    }
    result.exit_code = status.value_or(-1);
    result.out = read_file_text(out_path);
    result.err += read_file_text(err_path);
    return result;
}

// ---- Daemon ----

Daemon::Daemon(std::string config_path, std::string log_path, std::string command,
               std::vector<std::string> extra_args)
    : config_path_(std::move(config_path)),
      log_path_(std::move(log_path)),
      command_(std::move(command)),
      extra_args_(std::move(extra_args)) {}

Daemon::~Daemon() {
    if (pid_ > 0) kill9();
}

void Daemon::start() {
    if (pid_ > 0) throw std::runtime_error("Daemon::start: already running");
    {
        std::ofstream mark(log_path_, std::ios::app);
        mark << "==== test: start #" << ++starts_ << " ====\n";
    }
    std::vector<std::string> args = {command_, "--config", config_path_};
    args.insert(args.end(), extra_args_.begin(), extra_args_.end());
    pid_ = spawn(args, log_path_, log_path_);
}

bool Daemon::running() {
    if (pid_ <= 0) return false;
    if (auto status = reap(pid_, std::chrono::milliseconds(0))) {
        last_status_ = *status;
        pid_ = -1;
        return false;
    }
    return true;
}

int Daemon::terminate(std::chrono::milliseconds timeout) {
    if (pid_ <= 0) return last_status_;
    ::kill(pid_, SIGTERM);
    auto status = reap(pid_, timeout);
    if (!status) {
        kill9();
        throw std::runtime_error("tidemark did not stop within " + std::to_string(timeout.count()) +
                                 " ms of SIGTERM; log:\n" + log());
    }
    pid_ = -1;
    last_status_ = *status;
    return *status;
}

void Daemon::kill9() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    last_status_ = reap(pid_, std::chrono::seconds(10)).value_or(-1);
    pid_ = -1;
}

int Daemon::wait_exit(std::chrono::milliseconds timeout) {
    if (pid_ <= 0) return last_status_;
    auto status = reap(pid_, timeout);
    if (!status) return -1;
    pid_ = -1;
    last_status_ = *status;
    return *status;
}

std::string Daemon::log() const {
    return read_file_text(log_path_);
}

// ---- configs ----

nlohmann::json base_config(const std::string& node, const std::string& data_dir,
                           const std::string& gateway_uri, const std::string& upstream_uri) {
    nlohmann::json c;
    c["node_id"] = node;
    c["data_dir"] = data_dir;
    // The map takes the state twice (a backfill), the outbox twice (LMDB's indexes) and side
    // output beside each other (check-config sums them): 256MiB, a sparse file, for any test.
    c["storage"] = {{"map_size", "256MiB"}, {"fsync", "interval"}, {"fsync_interval", "200ms"}};
    c["checkpoint"] = {{"interval", "1s"}};
    c["source"] = {{"uri", gateway_uri}, {"client_id", "tidemark-" + node}};
    if (!upstream_uri.empty()) {
        c["upstream"] = {{"uri", upstream_uri},
                         {"client_id", node + "-up"},
                         {"topic", "tidemark/{node_id}/{pipeline}"},
                         {"qos", 1},
                         {"max_inflight", 64},
                         {"outbox", {{"max_bytes", "16MiB"}, {"when_full", "pause_ingest"}}}};
    }
    c["health"] = {{"topic", "tidemark/{node_id}/health"}, {"interval", "1s"}};
    c["log_level"] = "info";
    return c;
}

std::string write_config(const std::string& dir, const std::string& name,
                         const nlohmann::json& config) {
    const std::string path = dir + "/" + name;
    write_file(path, config.dump(2));
    return path;
}

// ---- health ----

std::vector<nlohmann::json> health_records(const TestClient& client,
                                           const std::string& health_topic) {
    std::vector<nlohmann::json> out;
    for (const auto& m : client.messages()) {
        if (m.topic != health_topic) continue;
        auto j = nlohmann::json::parse(m.payload, nullptr, /*allow_exceptions=*/false);
        if (j.is_object()) out.push_back(std::move(j));
    }
    return out;
}

nlohmann::json wait_health(TestClient& client, const std::string& health_topic,
                           const std::function<bool(const nlohmann::json&)>& ready,
                           std::chrono::milliseconds timeout, const std::string& what) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    nlohmann::json last;
    while (true) {
        auto records = health_records(client, health_topic);
        if (!records.empty()) {
            last = records.back();
            if (ready(last)) return last;
        }
        if (std::chrono::steady_clock::now() >= deadline) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    throw std::runtime_error(
        "health never showed " + what + " within " + std::to_string(timeout.count()) +
        " ms; last record: " + (last.is_null() ? std::string("(none)") : last.dump()));
}

// ---- results ----

ResultRecord parse_result(const std::string& payload) {
    auto j = nlohmann::json::parse(payload, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) throw std::runtime_error("upstream payload is not JSON: " + payload);
    try {
        ResultRecord r;
        r.raw = payload;
        r.id = j.at("id").get<std::string>();
        r.node = j.at("node").get<std::string>();
        r.pipeline = j.at("pipeline").get<std::string>();
        r.key = j.at("key").get<std::string>();
        r.kind = j.at("kind").get<std::string>();
        r.closed_by = j.at("closed_by").get<std::string>();
        r.start_ms = j.at("window").at("start").get<int64_t>();
        r.end_ms = j.at("window").at("end").get<int64_t>();
        r.revision = j.at("revision").get<int64_t>();
        r.watermark_ms = j.at("watermark").get<int64_t>();
        r.values = j.at("values");
        return r;
    } catch (const std::exception& e) {
        throw std::runtime_error(std::string("not a result record (") + e.what() + "): " + payload);
    }
}

std::vector<ResultRecord> parse_results(const std::vector<ReceivedMessage>& messages) {
    std::vector<ResultRecord> out;
    for (const auto& m : messages) {
        // Side output, the retained version records (DESIGN.md section 4) and too-late
        // tallies (late.report): not results.
        if (m.topic.ends_with("/side") || m.topic.ends_with("/version") ||
            m.topic.ends_with("/late"))
            continue;
        out.push_back(parse_result(m.payload));
    }
    return out;
}

std::map<WindowKey, ResultRecord> upsert_view(const std::vector<ResultRecord>& results) {
    std::set<std::string> seen;
    std::map<WindowKey, ResultRecord> kept;
    for (const auto& r : results) {
        if (!seen.insert(r.id).second) continue;
        const WindowKey k{r.pipeline, r.key, r.start_ms, r.end_ms};
        auto it = kept.find(k);
        if (it == kept.end()) {
            kept.emplace(k, r);
            continue;
        }
        const ResultRecord& old = it->second;
        const bool newer =
            r.revision > old.revision || (r.revision == old.revision && r.kind == "retract");
        if (newer) it->second = r;
    }
    std::erase_if(kept, [](const auto& kv) { return kv.second.kind == "retract"; });
    return kept;
}

nlohmann::json test_pipeline(const std::string& name, const TestPipeline& p) {
    return {{"name", name},
            {"topic", "sensors/+/telemetry"},
            {"key", "topic:1"},
            {"timestamp", {{"pointer", "/ts"}, {"format", "epoch_ms"}}},
            {"fields", {{"v", "/v"}}},
            {"window", p.window},
            {"watermark",
             {{"delay", p.delay},
              {"idle_timeout", p.idle_timeout},
              {"max_future", "1m"},
              {"scope", "global"}}},
            {"late",
             {{"allowed_lateness", p.allowed_lateness},
              {"too_late", "drop"},
              {"corrections", p.corrections}}},
            {"aggregates", p.aggregates},
            {"limits", {{"max_keys", 100}, {"max_open_windows", p.max_open_windows}}}};
}

std::string telemetry(int64_t ts_ms, int64_t value) {
    return "{\"ts\":" + std::to_string(ts_ms) + ",\"v\":" + std::to_string(value) + "}";
}

std::string telemetry_seq(int64_t ts_ms, int64_t seq) {
    return "{\"ts\":" + std::to_string(ts_ms) + ",\"seq\":" + std::to_string(seq) + ",\"v\":1}";
}

// ---- SteadyPublisher ----

struct SteadyPublisher::Impl {
    std::string uri;
    std::vector<std::string> devices;
    std::chrono::milliseconds period;
    std::vector<std::thread> threads;
    mutable std::mutex mutex;
    std::condition_variable changed;
    bool stopping = false;
    bool holding = false;
    size_t parked = 0;
    std::map<std::string, int64_t> published;
    int64_t retries = 0;
    std::vector<std::string> errors;

    // Connects, retrying for up to 30 s (a broker that restarts comes back within that).
    std::unique_ptr<TestClient> connect() {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        while (true) {
            try {
                return std::make_unique<TestClient>(TestClient::connect(uri));
            } catch (const std::exception& e) {
                if (std::chrono::steady_clock::now() >= deadline) throw;
                std::this_thread::sleep_for(std::chrono::milliseconds(200));
            }
        }
    }

    void run(const std::string& device) {
        try {
            auto client = connect();
            int64_t seq = 0;
            auto next = std::chrono::steady_clock::now();
            while (true) {
                {
                    std::unique_lock lock(mutex);
                    if (holding) {
                        ++parked;
                        changed.notify_all();
                        changed.wait(lock, [&] { return !holding || stopping; });
                        --parked;
                    }
                    if (stopping) return;
                }
                const std::string topic = "sensors/" + device + "/telemetry";
                while (true) {
                    try {
                        client->publish(topic, telemetry_seq(now_ms(), seq), 1);
                        break;
                    } catch (const std::exception&) {
                        {
                            std::lock_guard lock(mutex);
                            ++retries;
                        }
                        client.reset();
                        client = connect();
                    }
                }
                {
                    std::lock_guard lock(mutex);
                    ++published[device];
                }
                ++seq;
                next += period;
                std::this_thread::sleep_until(next);
            }
        } catch (const std::exception& e) {
            std::lock_guard lock(mutex);
            errors.push_back(device + ": " + e.what());
        }
    }
};

SteadyPublisher::SteadyPublisher(std::string uri, std::vector<std::string> devices,
                                 std::chrono::milliseconds period)
    : impl_(std::make_unique<Impl>()) {
    impl_->uri = std::move(uri);
    impl_->devices = std::move(devices);
    impl_->period = period;
    for (const auto& d : impl_->devices)
        impl_->published[d] = 0;
}

SteadyPublisher::~SteadyPublisher() {
    stop();
}

void SteadyPublisher::start() {
    for (const auto& d : impl_->devices) {
        impl_->threads.emplace_back([this, d] { impl_->run(d); });
    }
}

void SteadyPublisher::stop() {
    {
        std::lock_guard lock(impl_->mutex);
        impl_->stopping = true;
    }
    impl_->changed.notify_all();
    for (auto& t : impl_->threads)
        t.join();
    impl_->threads.clear();
}

void SteadyPublisher::hold() {
    std::unique_lock lock(impl_->mutex);
    impl_->holding = true;
    // A thread that failed for good is not parked: count only the live ones.
    impl_->changed.wait(
        lock, [&] { return impl_->parked + impl_->errors.size() >= impl_->devices.size(); });
}

void SteadyPublisher::release() {
    {
        std::lock_guard lock(impl_->mutex);
        impl_->holding = false;
    }
    impl_->changed.notify_all();
}

std::map<std::string, int64_t> SteadyPublisher::published() const {
    std::lock_guard lock(impl_->mutex);
    return impl_->published;
}

int64_t SteadyPublisher::retries() const {
    std::lock_guard lock(impl_->mutex);
    return impl_->retries;
}

std::vector<std::string> SteadyPublisher::errors() const {
    std::lock_guard lock(impl_->mutex);
    return impl_->errors;
}

// ---- Rig ----

Rig::Rig(std::string node_id, Broker::Options gateway_options, Broker::Options upstream_options,
         bool persistent_collector)
    : node(std::move(node_id)),
      gateway(Broker::start(std::move(gateway_options))),
      upstream(Broker::start(std::move(upstream_options))),
      dir("tidemark-it"),
      persistent_collector_(persistent_collector) {
    health_client = std::make_unique<TestClient>(TestClient::connect(gateway.uri()));
    health_client->subscribe(health_topic(), 1);
    reconnect_collector();
}

Rig::~Rig() {
    if (daemon) daemon->kill9();
}

void Rig::reconnect_collector() {
    if (collector) {
        auto old = collector->messages();
        earlier_results_.insert(earlier_results_.end(), old.begin(), old.end());
        try {
            collector->disconnect();
        } catch (...) {  // the broker it talked to may be gone; its session is what matters
        }
        collector.reset();
    }
    collector = std::make_unique<TestClient>(
        TestClient::connect(upstream.uri(), "collector-" + node, !persistent_collector_));
    collector->subscribe(results_filter(), 1);
}

void Rig::reconnect_health() {
    health_client.reset();
    health_client = std::make_unique<TestClient>(TestClient::connect(gateway.uri()));
    health_client->subscribe(health_topic(), 1);
}

nlohmann::json Rig::config() const {
    return base_config(node, dir.path() + "/data", gateway.uri(), upstream.uri());
}

void Rig::start(const nlohmann::json& cfg) {
    config_path = write_config(dir.path(), "tidemark.json", cfg);
    daemon = std::make_unique<Daemon>(config_path, dir.path() + "/tidemark.log");
    daemon->start();
    wait_health(
        [](const nlohmann::json& h) {
            return h.contains("ingest") && h["ingest"].value("connected", false);
        },
        std::chrono::seconds(15), "ingest.connected");
}

nlohmann::json Rig::wait_health(const std::function<bool(const nlohmann::json&)>& ready,
                                std::chrono::milliseconds timeout, const std::string& what) {
    try {
        return test::wait_health(*health_client, health_topic(), ready, timeout, what);
    } catch (const std::exception& e) {
        throw std::runtime_error(std::string(e.what()) + "\ntidemark log:\n" + daemon_log());
    }
}

std::vector<ResultRecord> Rig::results() const {
    std::vector<ReceivedMessage> all = earlier_results_;
    auto now = collector->messages();
    all.insert(all.end(), now.begin(), now.end());
    return parse_results(all);
}

bool eventually(const std::function<bool()>& predicate, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
        if (predicate()) return true;
        if (std::chrono::steady_clock::now() >= deadline) return predicate();
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
}

}  // namespace tidemark::test
