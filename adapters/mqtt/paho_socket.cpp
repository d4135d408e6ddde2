#include "adapters/mqtt/paho_socket.h"

#include <MQTTAsync.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <string_view>

namespace tidemark::mqtt::paho_socket {
namespace {

// Paho's protocol message 0 (Messages.c): "%d %s -> CONNECT version %d clean: %d (%d)".
constexpr std::string_view connect_marker = " -> CONNECT version ";
// CONNECT lines remembered (newest last): one per client connecting at once is all that is
// needed; the bound keeps a storm of reconnects from growing it.
constexpr size_t connect_lines_max = 64;

struct Registry {
    std::mutex mutex;
    int connecting = 0;
    std::deque<std::string> lines;  // "... SOCKET CLIENT_ID", the text before the marker
};

Registry& registry() {
    static Registry r;
    return r;
}

// Called by Paho with its log mutex held, from whichever of its threads traces: takes only our
// own mutex and calls nothing of Paho's.
void on_trace(enum MQTTASYNC_TRACE_LEVELS, char* message) {
    if (message == nullptr) return;
    const std::string_view text(message);
    const size_t at = text.find(connect_marker);
    if (at == std::string_view::npos) return;
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    r.lines.emplace_back(text.substr(0, at));
    if (r.lines.size() > connect_lines_max) r.lines.pop_front();
}

void set_level(int connecting) {
    MQTTAsync_setTraceLevel(connecting > 0 ? MQTTASYNC_TRACE_PROTOCOL : MQTTASYNC_TRACE_ERROR);
}

bool peer_matches(const sockaddr_storage& peer, const std::string& host, int port) {
    in_addr v4{};
    in6_addr v6{};
    if (peer.ss_family == AF_INET) {
        const auto& a = reinterpret_cast<const sockaddr_in&>(peer);
        if (ntohs(a.sin_port) != port) return false;
        if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return a.sin_addr.s_addr == v4.s_addr;
        return inet_pton(AF_INET6, host.c_str(), &v6) != 1;  // a name: the port must do
    }
    if (peer.ss_family == AF_INET6) {
        const auto& a = reinterpret_cast<const sockaddr_in6&>(peer);
        if (ntohs(a.sin6_port) != port) return false;
        if (inet_pton(AF_INET6, host.c_str(), &v6) == 1)
            return std::memcmp(&a.sin6_addr, &v6, sizeof v6) == 0;
        return inet_pton(AF_INET, host.c_str(), &v4) != 1;  // IPv4-mapped or a name
    }
    return false;
}

}  // namespace

void connect_starting() {
    static std::once_flag once;
    std::call_once(once, [] { MQTTAsync_setTraceCallback(&on_trace); });
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    set_level(++r.connecting);
}

void connect_finished() {
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    if (r.connecting > 0) --r.connecting;
    set_level(r.connecting);
}

bool connected_to(int fd, const std::string& host, int port) {
    int type = 0;
    socklen_t type_size = sizeof type;
    if (::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &type_size) != 0 || type != SOCK_STREAM)
        return false;
    sockaddr_storage peer{};
    socklen_t peer_size = sizeof peer;
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_size) != 0) return false;
    return peer_matches(peer, host, port);
}

int find(const std::string& client_id, const std::string& host, int port) {
    const std::string suffix = " " + client_id;
    int fd = -1;
    {
        Registry& r = registry();
        std::lock_guard lock(r.mutex);
        for (auto line = r.lines.rbegin(); line != r.lines.rend() && fd < 0; ++line) {
            if (!line->ends_with(suffix)) continue;
            // "DATE TIME.MS SOCKET" before the client id: the last word is the socket.
            const std::string_view head(line->data(), line->size() - suffix.size());
            const size_t space = head.rfind(' ');
            const std::string word(head.substr(space == std::string_view::npos ? 0 : space + 1));
            char* end = nullptr;
            const long value = std::strtol(word.c_str(), &end, 10);
            if (!word.empty() && end != nullptr && *end == '\0' && value >= 0 && value < 1 << 30)
                fd = static_cast<int>(value);
        }
    }
    return fd >= 0 && connected_to(fd, host, port) ? fd : -1;
}

int shutdown_all_connected_to(const std::string& host, int port) {
    DIR* dir = ::opendir("/proc/self/fd");
    if (dir == nullptr) return 0;
    int cut = 0;
    const int own = ::dirfd(dir);
    while (const dirent* entry = ::readdir(dir)) {
        char* end = nullptr;
        const long fd = std::strtol(entry->d_name, &end, 10);
        if (end == entry->d_name || *end != '\0' || fd == own) continue;
        if (connected_to(static_cast<int>(fd), host, port) &&
            ::shutdown(static_cast<int>(fd), SHUT_RDWR) == 0)
            ++cut;
    }
    ::closedir(dir);
    return cut;
}

}  // namespace tidemark::mqtt::paho_socket
