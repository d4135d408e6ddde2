#include "tests/support/nats_cluster.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "tests/support/broker.h"

namespace tidemark::test {
namespace {

constexpr auto formed_timeout = std::chrono::seconds(60);

// The body of GET `path` on 127.0.0.1:`port`, "" when nothing answers.
std::string http_get(int port, const std::string& path) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return {};
    timeval tv{2, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    std::string out;
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
        const std::string request =
            "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
        if (::write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size())) {
            char buf[4096];
            ssize_t n = 0;
            while ((n = ::read(fd, buf, sizeof buf)) > 0)
                out.append(buf, static_cast<size_t>(n));
        }
    }
    ::close(fd);
    const size_t body = out.find("\r\n\r\n");
    return body == std::string::npos ? std::string() : out.substr(body + 4);
}

// The meta leader a node's /jsz names ("" before the cluster has one). A string search: the
// tests' JSON library is not linked here, and the field is a plain string.
std::string meta_leader(int http_port) {
    const std::string body = http_get(http_port, "/jsz?leader-only=false");
    const size_t meta = body.find("\"meta_cluster\"");
    if (meta == std::string::npos) return {};
    const size_t key = body.find("\"leader\"", meta);
    if (key == std::string::npos) return {};
    const size_t open = body.find('"', body.find(':', key) + 1);
    const size_t close = open == std::string::npos ? open : body.find('"', open + 1);
    if (close == std::string::npos) return {};
    return body.substr(open + 1, close - open - 1);
}

}  // namespace

NatsCluster NatsCluster::start() {
    NatsCluster c;
    c.dir_ = temp_dir("tidemark-nats");
    for (int i = 0; i < nodes; ++i) {
        Node& n = c.node_[i];
        n.name = "n" + std::to_string(i);
        n.client_port = free_loopback_port();
        n.route_port = free_loopback_port();
        n.http_port = free_loopback_port();
        n.mqtt_port = free_loopback_port();
        n.conf = c.dir_ + "/" + n.name + ".conf";
        n.log = c.dir_ + "/" + n.name + ".log";
    }
    for (int i = 0; i < nodes; ++i) {
        Node& n = c.node_[i];
        std::ofstream conf(n.conf, std::ios::trunc);
        conf << "server_name: " << n.name << "\n"
             << "listen: 127.0.0.1:" << n.client_port << "\n"
             << "http: 127.0.0.1:" << n.http_port << "\n"
             << "jetstream { store_dir: \"" << c.dir_ << "/" << n.name << "-js\" }\n"
             << "cluster {\n  name: tidemark-test\n  listen: 127.0.0.1:" << n.route_port
             << "\n  routes: [\n";
        for (int j = 0; j < nodes; ++j)
            if (j != i) conf << "    nats-route://127.0.0.1:" << c.node_[j].route_port << "\n";
        conf << "  ]\n}\n"
             << "mqtt { listen: 127.0.0.1:" << n.mqtt_port << "\n  stream_replicas: 3\n}\n";
        if (!conf) throw std::runtime_error("cannot write " + n.conf);
    }
    for (int i = 0; i < nodes; ++i)
        c.launch(i);
    c.wait_formed(formed_timeout);
    return c;
}

NatsCluster::~NatsCluster() {
    for (int i = 0; i < nodes; ++i)
        if (node_[i].pid > 0) kill(i);
    if (!dir_.empty()) {
        std::error_code ignored;
        std::filesystem::remove_all(dir_, ignored);
    }
}

NatsCluster::NatsCluster(NatsCluster&& other) noexcept : dir_(std::move(other.dir_)) {
    for (int i = 0; i < nodes; ++i) {
        node_[i] = other.node_[i];
        other.node_[i].pid = -1;
    }
    other.dir_.clear();
}

std::string NatsCluster::mqtt_uri(int node) const {
    return "tcp://127.0.0.1:" + std::to_string(node_[node].mqtt_port);
}

std::vector<std::string> NatsCluster::mqtt_uris() const {
    std::vector<std::string> out;
    for (int i = 0; i < nodes; ++i)
        out.push_back(mqtt_uri(i));
    return out;
}

int NatsCluster::node_of_port(int port) const {
    for (int i = 0; i < nodes; ++i)
        if (node_[i].mqtt_port == port) return i;
    return -1;
}

void NatsCluster::launch(int i) {
    Node& n = node_[i];
    const pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
    if (pid == 0) {
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the test
        const int fd = ::open(n.log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            ::dup2(fd, STDOUT_FILENO);
            ::dup2(fd, STDERR_FILENO);
            ::close(fd);
        }
        ::execl("/usr/sbin/nats-server", "nats-server", "-c", n.conf.c_str(),
                static_cast<char*>(nullptr));
        ::_exit(127);
    }
    n.pid = pid;
}

void NatsCluster::kill(int i) {
    Node& n = node_[i];
    if (n.pid <= 0) return;
    ::kill(n.pid, SIGKILL);
    int status = 0;
    ::waitpid(n.pid, &status, 0);
    n.pid = -1;
}

void NatsCluster::restart(int i) {
    if (node_[i].pid > 0) kill(i);
    launch(i);
    wait_formed(formed_timeout);
    // Back in the meta group is not yet caught up: /healthz answers ok once the node's streams
    // and consumers are current (nats-server 2.9), and traffic before that was seen to stall.
    const auto deadline = std::chrono::steady_clock::now() + formed_timeout;
    std::string last;
    while (std::chrono::steady_clock::now() < deadline) {
        last = http_get(node_[i].http_port, "/healthz");
        if (last.find("\"ok\"") != std::string::npos) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    throw std::runtime_error("nats-server " + node_[i].name + " never said healthz ok: " + last);
}

void NatsCluster::wait_formed(std::chrono::milliseconds timeout) const {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::string seen;
    while (std::chrono::steady_clock::now() < deadline) {
        std::string leader;
        bool same = true;
        std::ostringstream what;
        for (int i = 0; i < nodes; ++i) {
            if (node_[i].pid <= 0) continue;
            int status = 0;
            if (::waitpid(node_[i].pid, &status, WNOHANG) == node_[i].pid)
                throw std::runtime_error("nats-server " + node_[i].name + " exited: " + log(i));
            const std::string l = meta_leader(node_[i].http_port);
            what << node_[i].name << ": '" << l << "' ";
            if (l.empty() || (!leader.empty() && l != leader)) same = false;
            if (leader.empty()) leader = l;
        }
        seen = what.str();
        if (same && !leader.empty()) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    throw std::runtime_error("the nats cluster did not agree on a JetStream meta leader: " + seen);
}

std::string NatsCluster::log(int i) const {
    std::ifstream in(node_[i].log);
    std::ostringstream out;
    out << in.rdbuf();
    return out.str();
}

}  // namespace tidemark::test
