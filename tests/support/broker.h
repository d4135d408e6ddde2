// Test fixtures: a real mosquitto on a free loopback port, temporary directories, and a small
// synchronous MQTT client. Failures throw std::runtime_error (Catch reports the message).
#pragma once

#include <sys/types.h>
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tidemark::test {

/// A 127.0.0.1 TCP port that was free a moment ago (bound to port 0, then released): the
/// caller retries with another when a server it starts there finds it taken.
int free_loopback_port();

/// A fresh directory under /tmp named PREFIX.XXXXXX. The caller removes it (or uses TempDir).
std::string temp_dir(std::string_view prefix);

/// A temporary directory removed with everything in it when this goes out of scope.
class TempDir {
  public:
    explicit TempDir(std::string_view prefix = "tidemark-test");
    ~TempDir();
    TempDir(TempDir&& other) noexcept;
    TempDir& operator=(TempDir&&) = delete;
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    const std::string& path() const { return path_; }

  private:
    std::string path_;
};

/// Operation: runs /usr/sbin/mosquitto -c CONF in the foreground as a child process, listening
/// on 127.0.0.1 only, on a port that was free when it started (picked by binding port 0;
/// retried if another process took it first). Anonymous clients are allowed.
/// Limits: max_inflight_messages is bounded (mosquitto crawls with it unlimited); at most
/// 100000 queued messages per persistent session. With persistence on, mosquitto writes its
/// store on stop() (SIGTERM) and every second; kill() loses what came after the last save.
class Broker {
  public:
    struct Options {
        bool persistence = false;
        int max_inflight = 100;  ///< mosquitto max_inflight_messages, 1..65535
        std::string extra_conf;  ///< lines appended to mosquitto.conf, e.g. a TLS listener
    };

    /// Starts the broker and waits (up to 5 s) until it accepts connections.
    static Broker start(Options options);
    static Broker start() { return start(Options{}); }
    ~Broker();
    Broker(Broker&& other) noexcept;
    Broker& operator=(Broker&&) = delete;
    Broker(const Broker&) = delete;
    Broker& operator=(const Broker&) = delete;

    int port() const { return port_; }
    std::string uri() const;                         ///< tcp://127.0.0.1:PORT
    const std::string& dir() const { return dir_; }  ///< conf, log and persistence store
    bool running() const { return pid_ > 0; }

    void stop();     ///< SIGTERM and wait (SIGKILL after 5 s); persistence is saved
    void kill();     ///< SIGKILL and wait
    void restart();  ///< stop() then start again: same port, conf and persistence store
    /// mosquitto's own log (its stderr and stdout), for failure messages.
    std::string log() const;

  private:
    Broker() = default;
    void launch();  // start the process on port_ and wait until it accepts connections
    Options options_;
    std::string dir_;
    int port_ = 0;
    pid_t pid_ = -1;
};

/// A received message, as a test sees it.
struct ReceivedMessage {
    std::string topic;
    std::string payload;
    int qos = 0;
    bool duplicate = false;
    bool retained = false;
};

/// A small synchronous MQTT 3.1.1 client over Paho C++ for tests: every call waits for the
/// broker's answer (at most 10 s) and throws on failure.
class TestClient {
  public:
    /// Connects to `uri`; clean session unless `clean_session` is false.
    static TestClient connect(const std::string& uri, const std::string& client_id = "",
                              bool clean_session = true);
    ~TestClient();
    TestClient(TestClient&&) noexcept;
    TestClient& operator=(TestClient&&) noexcept;

    /// Publishes and, for QoS 1 and 2, waits for the broker's acknowledgement.
    void publish(const std::string& topic, std::string_view payload, int qos = 1,
                 bool retained = false);
    /// Subscribes and waits for the SUBACK. Messages are collected from then on.
    void subscribe(const std::string& filter, int qos = 1);
    /// Waits until at least `count` messages were collected, or `timeout`; returns all
    /// collected so far (fewer than `count` on timeout).
    std::vector<ReceivedMessage> wait_for(std::size_t count, std::chrono::milliseconds timeout);
    std::vector<ReceivedMessage> messages() const;
    void disconnect();

  private:
    struct Impl;
    explicit TestClient(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace tidemark::test
