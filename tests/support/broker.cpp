#include "tests/support/broker.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <mqtt/async_client.h>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace tidemark::test {

namespace {

constexpr auto broker_ready_timeout = std::chrono::seconds(5);
constexpr auto broker_stop_timeout = std::chrono::seconds(5);
constexpr int port_attempts_max = 5;
constexpr auto client_call_timeout = std::chrono::seconds(10);
constexpr std::size_t collected_messages_max = 2'000'000;

[[noreturn]] void throw_errno(const std::string& what) {
    throw std::runtime_error(what + ": " + std::strerror(errno));
}

}  // namespace

int free_loopback_port() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) throw_errno("socket");
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = 0;
    socklen_t length = sizeof address;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
        ::close(fd);
        throw_errno("bind 127.0.0.1:0");
    }
    ::close(fd);
    return ntohs(address.sin_port);
}

namespace {

bool accepts_connections(int port) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return false;
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(static_cast<std::uint16_t>(port));
    const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
    ::close(fd);
    return ok;
}

// Waits up to `timeout` for `pid` to exit; true when it did (and was reaped).
bool wait_exit(pid_t pid, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
        int status = 0;
        const pid_t r = ::waitpid(pid, &status, WNOHANG);
        if (r == pid || (r < 0 && errno == ECHILD)) return true;
        if (std::chrono::steady_clock::now() >= deadline) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
}

std::string next_client_id() {
    static std::atomic<int> counter{0};
    return "tm-test-" + std::to_string(::getpid()) + "-" + std::to_string(++counter);
}

}  // namespace

std::string temp_dir(std::string_view prefix) {
    std::string pattern = "/tmp/" + std::string(prefix) + ".XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) throw_errno("mkdtemp " + pattern);
    return pattern;
}

TempDir::TempDir(std::string_view prefix) : path_(temp_dir(prefix)) {}

TempDir::~TempDir() {
    if (path_.empty()) return;
    // For a post-mortem of a failed run: its brokers' and daemons' directories stay.
    if (std::getenv("TIDEMARK_KEEP_TMP")) {
        std::fprintf(stderr, "TIDEMARK_KEEP_TMP: kept %s\n", path_.c_str());
        return;
    }
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
}

TempDir::TempDir(TempDir&& other) noexcept : path_(std::move(other.path_)) {
    other.path_.clear();
}

// ---- Broker ----

Broker Broker::start(Options options) {
    if (options.max_inflight < 1 || options.max_inflight > 65535) {
        throw std::invalid_argument(
            "Broker::Options::max_inflight must be 1..65535 (0 means "
            "unlimited to mosquitto, which makes it crawl)");
    }
    Broker broker;
    broker.options_ = std::move(options);
    broker.dir_ = temp_dir("tidemark-mosquitto");
    std::string last_error;
    for (int attempt = 0; attempt < port_attempts_max; ++attempt) {
        broker.port_ = free_loopback_port();
        try {
            broker.launch();
            return broker;
        } catch (const std::exception& e) {
            last_error = e.what();  // most likely the port was taken meanwhile: try another
        }
    }
    throw std::runtime_error("mosquitto did not start after " + std::to_string(port_attempts_max) +
                             " attempts: " + last_error);
}

void Broker::launch() {
    const std::string conf_path = dir_ + "/mosquitto.conf";
    {
        std::ofstream conf(conf_path, std::ios::trunc);
        conf << "listener " << port_ << " 127.0.0.1\n"
             << "allow_anonymous true\n"
             << "max_inflight_messages " << options_.max_inflight << "\n"
             << "max_queued_messages 100000\n"
             << "log_dest stderr\n"
             << "log_type error\nlog_type warning\nlog_type notice\nlog_type information\n";
        if (options_.persistence) {
            conf << "persistence true\n"
                 << "persistence_location " << dir_ << "/\n"
                 << "autosave_interval 1\n";
        } else {
            conf << "persistence false\n";
        }
        // As root, mosquitto drops to the user `mosquitto`, which cannot write our temp dir.
        if (::geteuid() == 0) conf << "user root\n";
        conf << options_.extra_conf << "\n";
        if (!conf) throw std::runtime_error("cannot write " + conf_path);
    }
    const std::string log_path = dir_ + "/mosquitto.log";
    const pid_t pid = ::fork();
    if (pid < 0) throw_errno("fork");
    if (pid == 0) {
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the test
        const int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            ::dup2(fd, STDOUT_FILENO);
            ::dup2(fd, STDERR_FILENO);
            ::close(fd);
        }
        ::execl("/usr/sbin/mosquitto", "mosquitto", "-c", conf_path.c_str(),
                static_cast<char*>(nullptr));
        ::_exit(127);
    }
    pid_ = pid;
    const auto deadline = std::chrono::steady_clock::now() + broker_ready_timeout;
    while (std::chrono::steady_clock::now() < deadline) {
        int status = 0;
        if (::waitpid(pid_, &status, WNOHANG) == pid_) {
            pid_ = -1;
            throw std::runtime_error("mosquitto exited on port " + std::to_string(port_) + ": " +
                                     log());
        }
        if (accepts_connections(port_)) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    kill();
    throw std::runtime_error("mosquitto did not accept connections on 127.0.0.1:" +
                             std::to_string(port_) + " within 5 s: " + log());
}

Broker::~Broker() {
    if (pid_ > 0) kill();
    if (!dir_.empty()) {
        std::error_code ignored;
        std::filesystem::remove_all(dir_, ignored);
    }
}

Broker::Broker(Broker&& other) noexcept
    : options_(std::move(other.options_)),
      dir_(std::move(other.dir_)),
      port_(other.port_),
      pid_(other.pid_) {
    other.dir_.clear();
    other.pid_ = -1;
}

std::string Broker::uri() const {
    return "tcp://127.0.0.1:" + std::to_string(port_);
}

void Broker::stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    if (!wait_exit(pid_, broker_stop_timeout)) {
        ::kill(pid_, SIGKILL);
        wait_exit(pid_, broker_stop_timeout);
    }
    pid_ = -1;
}

void Broker::kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    wait_exit(pid_, broker_stop_timeout);
    pid_ = -1;
}

void Broker::restart() {
    stop();
    launch();
}

std::string Broker::log() const {
    std::ifstream in(dir_ + "/mosquitto.log");
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

// ---- TestClient ----

struct TestClient::Impl {
    std::unique_ptr<::mqtt::async_client> client;
    mutable std::mutex mutex;
    std::condition_variable arrived;
    std::vector<ReceivedMessage> received;
};

TestClient::TestClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TestClient::~TestClient() {
    if (impl_ == nullptr) return;
    try {
        disconnect();
    } catch (...) {  // a destructor must not throw; the broker drops the connection anyway
    }
}
TestClient::TestClient(TestClient&&) noexcept = default;
TestClient& TestClient::operator=(TestClient&&) noexcept = default;

TestClient TestClient::connect(const std::string& uri, const std::string& client_id,
                               bool clean_session) {
    auto impl = std::make_unique<Impl>();
    const std::string id = client_id.empty() ? next_client_id() : client_id;
    impl->client =
        std::make_unique<::mqtt::async_client>(uri, id, ::mqtt::create_options(MQTTVERSION_3_1_1),
                                               static_cast<::mqtt::iclient_persistence*>(nullptr));
    Impl* raw = impl.get();
    impl->client->set_message_callback([raw](::mqtt::const_message_ptr m) {
        std::lock_guard lock(raw->mutex);
        if (raw->received.size() >= collected_messages_max) return;
        raw->received.push_back(ReceivedMessage{m->get_topic(), m->get_payload_str(), m->get_qos(),
                                                m->is_duplicate(), m->is_retained()});
        raw->arrived.notify_all();
    });
    ::mqtt::connect_options options;
    options.set_mqtt_version(MQTTVERSION_3_1_1);
    options.set_clean_session(clean_session);
    options.set_keep_alive_interval(30);
    options.set_connect_timeout(5);
    try {
        impl->client->connect(options)->wait_for(client_call_timeout);
    } catch (const std::exception& e) {
        throw std::runtime_error("TestClient: cannot connect to " + uri + ": " + e.what());
    }
    if (!impl->client->is_connected()) {
        throw std::runtime_error("TestClient: no CONNACK from " + uri);
    }
    return TestClient(std::move(impl));
}

void TestClient::publish(const std::string& topic, std::string_view payload, int qos,
                         bool retained) {
    auto token = impl_->client->publish(topic, payload.data(), payload.size(), qos, retained);
    if (!token->wait_for(client_call_timeout)) {
        throw std::runtime_error("TestClient: publish to '" + topic + "' not acknowledged");
    }
}

void TestClient::subscribe(const std::string& filter, int qos) {
    if (!impl_->client->subscribe(filter, qos)->wait_for(client_call_timeout)) {
        throw std::runtime_error("TestClient: no SUBACK for '" + filter + "'");
    }
}

std::vector<ReceivedMessage> TestClient::wait_for(std::size_t count,
                                                  std::chrono::milliseconds timeout) {
    std::unique_lock lock(impl_->mutex);
    impl_->arrived.wait_for(lock, timeout, [&] { return impl_->received.size() >= count; });
    return impl_->received;
}

std::vector<ReceivedMessage> TestClient::messages() const {
    std::lock_guard lock(impl_->mutex);
    return impl_->received;
}

void TestClient::disconnect() {
    if (impl_->client->is_connected()) {
        impl_->client->disconnect()->wait_for(client_call_timeout);
    }
}

}  // namespace tidemark::test
