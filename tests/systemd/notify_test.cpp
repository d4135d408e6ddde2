// The sd_notify protocol as systemd sees it: a real unix datagram socket given as NOTIFY_SOCKET.
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "firmware/notify.h"

namespace {

using tidemark::firmware::Notifier;
using namespace std::chrono_literals;

// Plays systemd's side: binds a datagram socket in a fresh directory and points the environment
// at it for the lifetime of the object.
class FakeSystemd {
  public:
    explicit FakeSystemd(std::optional<std::chrono::microseconds> watchdog_interval,
                         std::optional<pid_t> watchdog_pid = std::nullopt) {
        char dir_template[] = "/tmp/tm-notify-XXXXXX";
        REQUIRE(mkdtemp(dir_template) != nullptr);
        dir_ = dir_template;
        path_ = dir_ + "/notify.sock";
        fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        REQUIRE(fd_ >= 0);
        sockaddr_un address{};
        address.sun_family = AF_UNIX;
        REQUIRE(path_.size() < sizeof(address.sun_path));
        path_.copy(address.sun_path, path_.size());
        REQUIRE(bind(fd_, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0);
        setenv("NOTIFY_SOCKET", path_.c_str(), 1);
        if (watchdog_interval) {
            setenv("WATCHDOG_USEC", std::to_string(watchdog_interval->count()).c_str(), 1);
            setenv("WATCHDOG_PID", std::to_string(watchdog_pid.value_or(getpid())).c_str(), 1);
        } else {
            unsetenv("WATCHDOG_USEC");
            unsetenv("WATCHDOG_PID");
        }
    }
    ~FakeSystemd() {
        unsetenv("NOTIFY_SOCKET");
        unsetenv("WATCHDOG_USEC");
        unsetenv("WATCHDOG_PID");
        close(fd_);
        std::error_code ignored;
        std::filesystem::remove_all(dir_, ignored);
    }
    FakeSystemd(const FakeSystemd&) = delete;
    FakeSystemd& operator=(const FakeSystemd&) = delete;

    // The next datagram, or nothing if none arrives within wait.
    std::optional<std::string> receive(std::chrono::milliseconds wait = 1000ms) {
        pollfd ready{fd_, POLLIN, 0};
        if (poll(&ready, 1, static_cast<int>(wait.count())) != 1) return std::nullopt;
        char buffer[4096];
        const ssize_t size = recv(fd_, buffer, sizeof(buffer), 0);
        REQUIRE(size >= 0);
        return std::string(buffer, static_cast<size_t>(size));
    }

    // Every datagram that arrives within wait.
    std::vector<std::string> drain(std::chrono::milliseconds wait) {
        std::vector<std::string> messages;
        const auto deadline = std::chrono::steady_clock::now() + wait;
        while (true) {
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                deadline - std::chrono::steady_clock::now());
            if (left <= 0ms) break;
            if (auto message = receive(left)) messages.push_back(*message);
        }
        return messages;
    }

  private:
    std::string dir_;
    std::string path_;
    int fd_ = -1;
};

int64_t steady_now_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

}  // namespace

TEST_CASE("READY, STATUS and WATCHDOG arrive at the notify socket in order", "[notify]") {
    FakeSystemd systemd(2s);
    Notifier notifier;
    REQUIRE(notifier.enabled());
    REQUIRE(notifier.watchdog_interval() == std::chrono::microseconds(2s));

    notifier.status("recovering 1200 records");
    notifier.ready();
    notifier.status("connected");
    REQUIRE(notifier.watchdog(10'000));
    notifier.reloading();
    notifier.ready();
    notifier.extend_timeout(30s);
    notifier.stopping();

    CHECK(systemd.receive() == "STATUS=recovering 1200 records");
    CHECK(systemd.receive() == "READY=1");
    CHECK(systemd.receive() == "STATUS=connected");
    CHECK(systemd.receive() == "WATCHDOG=1");
    const auto reloading = systemd.receive();
    REQUIRE(reloading);
    CHECK(reloading->starts_with("RELOADING=1\nMONOTONIC_USEC="));
    CHECK(systemd.receive() == "READY=1");
    CHECK(systemd.receive() == "EXTEND_TIMEOUT_USEC=30000000");
    CHECK(systemd.receive() == "STOPPING=1");
    CHECK(systemd.receive(100ms) == std::nullopt);
    CHECK(notifier.send_failures() == 0);
}

TEST_CASE("keep-alives are sent at most once per half watchdog interval", "[notify]") {
    FakeSystemd systemd(2s);  // half interval: 1000 ms
    Notifier notifier;

    CHECK(notifier.watchdog(5'000));  // the first one goes out at once
    CHECK_FALSE(notifier.watchdog(5'001));
    CHECK_FALSE(notifier.watchdog(5'999));
    CHECK(notifier.watchdog(6'000));
    CHECK_FALSE(notifier.watchdog(6'500));
    CHECK(notifier.watchdog(9'000));

    CHECK(systemd.drain(200ms) ==
          std::vector<std::string>{"WATCHDOG=1", "WATCHDOG=1", "WATCHDOG=1"});
}

TEST_CASE("a stalled engine loop stops the keep-alives", "[notify]") {
    FakeSystemd systemd(100ms);  // keep-alives every 50 ms while the loop runs
    Notifier notifier;
    std::atomic<bool> stalled = false;
    std::atomic<bool> stop = false;

    // The engine loop: calls watchdog() every iteration, unless stuck.
    std::thread loop([&] {
        while (!stop.load()) {
            if (!stalled.load()) notifier.watchdog(steady_now_ms());
            std::this_thread::sleep_for(5ms);
        }
    });

    const auto running = systemd.drain(300ms);
    stalled = true;
    std::this_thread::sleep_for(20ms);  // a keep-alive the loop sent just before the stall
    systemd.drain(10ms);
    const auto while_stalled = systemd.drain(400ms);
    stalled = false;
    const auto resumed = systemd.receive(1000ms);
    stop = true;
    loop.join();

    // ~6 expected in 300 ms; a loose lower bound keeps the test steady on a loaded machine.
    CHECK(running.size() >= 2);
    CHECK(running.size() <= 8);
    // Nothing keeps systemd happy behind the engine's back: a stuck engine gets restarted.
    CHECK(while_stalled.empty());
    CHECK(resumed == "WATCHDOG=1");
}

TEST_CASE("a status line cannot inject another assignment", "[notify]") {
    FakeSystemd systemd(std::nullopt);
    Notifier notifier;

    notifier.status("upstream offline: broker said\nREADY=1");
    CHECK(systemd.receive() == "STATUS=upstream offline: broker said READY=1");

    notifier.status(std::string(1000, 'x'));
    const auto cut = systemd.receive();
    REQUIRE(cut);
    CHECK(cut->size() == std::string("STATUS=").size() + Notifier::status_bytes_max);
}

TEST_CASE("without a watchdog, or with one meant for another process, no keep-alives", "[notify]") {
    SECTION("no WATCHDOG_USEC") {
        FakeSystemd systemd(std::nullopt);
        Notifier notifier;
        CHECK(notifier.enabled());
        CHECK(notifier.watchdog_interval() == std::nullopt);
        CHECK_FALSE(notifier.watchdog(1'000));
        CHECK(systemd.receive(100ms) == std::nullopt);
    }
    SECTION("WATCHDOG_PID names the parent") {
        FakeSystemd systemd(1s, getppid());
        Notifier notifier;
        CHECK(notifier.watchdog_interval() == std::nullopt);
        CHECK_FALSE(notifier.watchdog(1'000));
        CHECK(systemd.receive(100ms) == std::nullopt);
    }
}

TEST_CASE("outside systemd every call is a no-op", "[notify]") {
    unsetenv("NOTIFY_SOCKET");
    setenv("WATCHDOG_USEC", "1000000", 1);
    setenv("WATCHDOG_PID", std::to_string(getpid()).c_str(), 1);
    Notifier notifier;
    unsetenv("WATCHDOG_USEC");
    unsetenv("WATCHDOG_PID");

    CHECK_FALSE(notifier.enabled());
    CHECK(notifier.watchdog_interval() == std::nullopt);
    notifier.ready();
    notifier.status("idle");
    CHECK_FALSE(notifier.watchdog(1'000));
    notifier.stopping();
    CHECK(notifier.send_failures() == 0);
}

TEST_CASE("a vanished notify socket is counted, not fatal", "[notify]") {
    std::optional<Notifier> notifier;
    {
        FakeSystemd systemd(std::nullopt);
        notifier.emplace();
    }
    // The socket file is gone and NOTIFY_SOCKET unset: sends fail quietly.
    notifier->ready();
    CHECK(notifier->send_failures() == 1);
}
