// A TCP proxy on 127.0.0.1 for the fault tests: sits between a client and a real broker and, per
// connection, passes bytes or stalls the link in one of the ways a broken middlebox (a NAT that
// lost its mapping, a half-dead radio link) does: the TCP connection stays up, nothing comes back.
//
// Operation: connection i (from 0) follows plan[i], every later one `pass`. A stalled connection
// stays stalled until its client closes it; the proxy never closes it first (that would be an
// ordinary outage, which forwarding_outage_test covers). MQTT packets are counted by their fixed
// header (type byte, remaining-length varint) so that a stall starts on a packet boundary.
// Concurrency: one accept thread and one thread per connection; the accessors are atomic.
// Limits: loopback only, meant for a handful of connections; stop() (or the destructor) shuts
// every socket down and joins the threads.
#pragma once

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace tidemark::test {

class StallProxy {
  public:
    enum class Mode {
        pass,                   ///< bytes both ways, untouched
        swallow_after_connect,  ///< the client's CONNECT reaches the broker, then none of its bytes
        acks_lost,              ///< the client's bytes all reach the broker; only the CONNACK
                                ///< comes back (publishes arrive, their PUBACKs never do)
        black_hole,             ///< accepts and reads, never talks to the broker (no CONNACK)
    };

    StallProxy(int broker_port, std::vector<Mode> plan)
        : broker_port_(broker_port), plan_(std::move(plan)) {
        listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
        if (listener_ < 0) throw std::runtime_error("stall proxy: socket failed");
        const int one = 1;
        ::setsockopt(listener_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        sockaddr_in addr = loopback(0);
        if (::bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
            ::listen(listener_, 16) != 0) {
            ::close(listener_);
            throw std::runtime_error("stall proxy: cannot listen on 127.0.0.1");
        }
        socklen_t len = sizeof addr;
        ::getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len);
        port_ = ntohs(addr.sin_port);
        accept_thread_ = std::thread([this] { accept_loop(); });
    }
    ~StallProxy() { stop(); }
    StallProxy(const StallProxy&) = delete;
    StallProxy& operator=(const StallProxy&) = delete;

    int port() const { return port_; }
    std::string uri() const { return "tcp://127.0.0.1:" + std::to_string(port_); }
    /// Connections accepted so far.
    int connections() const { return connections_.load(); }
    /// Bytes read from either side and dropped by a stall.
    uint64_t swallowed_bytes() const { return swallowed_.load(); }

    void stop() {
        if (stopping_.exchange(true)) return;
        ::shutdown(listener_, SHUT_RDWR);
        if (accept_thread_.joinable()) accept_thread_.join();
        ::close(listener_);
        std::vector<std::thread> threads;
        {
            std::lock_guard lock(mutex_);
            threads.swap(threads_);
        }
        for (auto& t : threads)
            t.join();
    }

  private:
    // Counts MQTT packets in a byte stream: passable() says how many of the next bytes still
    // belong to the first `packets` packets; everything after them is to be dropped.
    struct PacketGate {
        long packets = -1;  // packets still to pass; -1: no limit
        int state = 0;      // 0: expects a type byte, 1: in the remaining-length varint, 2: body
        uint64_t remaining = 0;
        int shift = 0;

        size_t passable(const char* data, size_t n) {
            if (packets < 0) return n;
            size_t i = 0;
            while (i < n && packets > 0) {
                const auto byte = static_cast<unsigned char>(data[i]);
                if (state == 0) {
                    state = 1;
                    remaining = 0;
                    shift = 0;
                    ++i;
                } else if (state == 1) {
                    remaining |= uint64_t{byte & 0x7Fu} << shift;
                    shift += 7;
                    ++i;
                    if ((byte & 0x80u) == 0) {
                        state = remaining == 0 ? 0 : 2;
                        if (state == 0) --packets;
                    }
                } else {
                    const size_t take = std::min<uint64_t>(remaining, n - i);
                    i += take;
                    remaining -= take;
                    if (remaining == 0) {
                        state = 0;
                        --packets;
                    }
                }
            }
            return i;
        }
    };

    static sockaddr_in loopback(int port) {
        sockaddr_in addr{};
        addr.sin_family = AF_INET;
        addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        addr.sin_port = htons(static_cast<uint16_t>(port));
        return addr;
    }

    void accept_loop() {
        for (;;) {
            const int client = ::accept(listener_, nullptr, nullptr);
            if (client < 0 || stopping_.load()) {
                if (client >= 0) ::close(client);
                return;
            }
            const int index = connections_.fetch_add(1);
            const Mode mode = index < static_cast<int>(plan_.size()) ? plan_[index] : Mode::pass;
            std::lock_guard lock(mutex_);
            threads_.emplace_back([this, client, mode] { relay(client, mode); });
        }
    }

    void relay(int client, Mode mode) {
        int broker = -1;
        PacketGate up, down;  // client -> broker, broker -> client
        if (mode == Mode::black_hole) {
            up.packets = 0;
        } else {
            broker = ::socket(AF_INET, SOCK_STREAM, 0);
            sockaddr_in addr = loopback(broker_port_);
            if (broker < 0 || ::connect(broker, reinterpret_cast<sockaddr*>(&addr), sizeof addr)) {
                if (broker >= 0) ::close(broker);
                ::close(client);
                return;
            }
            if (mode == Mode::swallow_after_connect) up.packets = 1;
            if (mode == Mode::acks_lost) down.packets = 1;
        }
        const bool stalls = mode != Mode::pass;
        char buffer[16384];
        while (!stopping_.load()) {
            pollfd fds[2] = {{client, POLLIN, 0}, {broker, POLLIN, 0}};
            const int ready = ::poll(fds, broker >= 0 ? 2 : 1, 100);
            if (ready <= 0) continue;
            if (fds[0].revents != 0) {
                const ssize_t n = ::recv(client, buffer, sizeof buffer, 0);
                if (n <= 0) break;  // the client gave up on this connection
                const size_t pass = up.passable(buffer, static_cast<size_t>(n));
                if (pass > 0 && broker >= 0 && !send_all(broker, buffer, pass)) break;
                swallowed_ += static_cast<size_t>(n) - pass;
            }
            if (broker >= 0 && fds[1].revents != 0) {
                const ssize_t n = ::recv(broker, buffer, sizeof buffer, 0);
                if (n <= 0) {
                    // The broker dropped its side (keep-alive): a stalled link stays up for the
                    // client, a passing one closes as a real broker's would.
                    ::close(broker);
                    broker = -1;
                    if (!stalls) break;
                    continue;
                }
                const size_t pass = down.passable(buffer, static_cast<size_t>(n));
                if (pass > 0 && !send_all(client, buffer, pass)) break;
                swallowed_ += static_cast<size_t>(n) - pass;
            }
        }
        if (broker >= 0) ::close(broker);
        ::close(client);
    }

    static bool send_all(int fd, const char* data, size_t n) {
        while (n > 0) {
            const ssize_t w = ::send(fd, data, n, MSG_NOSIGNAL);
            if (w <= 0) return false;
            data += w;
            n -= static_cast<size_t>(w);
        }
        return true;
    }

    const int broker_port_;
    const std::vector<Mode> plan_;
    int listener_ = -1;
    int port_ = 0;
    std::atomic<bool> stopping_{false};
    std::atomic<int> connections_{0};
    std::atomic<uint64_t> swallowed_{0};
    std::thread accept_thread_;
    std::mutex mutex_;
    std::vector<std::thread> threads_;
};

}  // namespace tidemark::test
