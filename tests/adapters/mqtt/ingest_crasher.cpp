// Helper process for ingest_backlog_test: ingest with a log (topic TAB payload a line, appended
// with write(2) before the handler returns, as the runtime does) and the runtime's use of
// RedeliveryFilter: seeded from the log at start, connection_started() on each connection. It
// prints "ready" once connected and, when KILL_AFTER > 0, kills itself with SIGKILL after
// appending that many records - a kill -9 while the broker still sends the backlog.
#include <fcntl.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "adapters/mqtt/ingest.h"
#include "adapters/mqtt/redelivery_filter.h"
#include "tests/support/broker_options.h"

int main(int argc, char** argv) {
    if (argc != 6) {
        std::fprintf(stderr, "usage: %s URI CLIENT_ID FILTER LOG KILL_AFTER\n", argv[0]);
        return 2;
    }
    using namespace tidemark::mqtt;
    static RedeliveryFilter filter;  // 1 MiB: not on the stack
    {
        std::ifstream in(argv[4]);
        std::string line;
        while (std::getline(in, line)) {
            const auto tab = line.find('\t');
            if (tab != std::string::npos) filter.seed(line.substr(0, tab), line.substr(tab + 1));
        }
    }
    const int log = ::open(argv[4], O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (log < 0) return 1;
    const long kill_after = std::strtol(argv[5], nullptr, 10);
    long appended = 0;
    std::uint64_t connection_seen = 0;
    BrokerOptions options;
    tidemark::test::set_address(options, argv[1]);
    options.client_id = argv[2];
    auto ingest = Ingest::create(options, {argv[3]}, [&](const IncomingMessage& m) {
        if (m.connection != connection_seen) {
            filter.connection_started();
            connection_seen = m.connection;
        }
        if (m.duplicate && filter.is_redelivery(m.packet_id, m.topic, m.payload))
            return HandleResult::accepted;
        const std::string line = std::string(m.topic) + "\t" + std::string(m.payload) + "\n";
        if (::write(log, line.data(), line.size()) != static_cast<ssize_t>(line.size()))
            std::abort();
        filter.remember(m.packet_id, m.topic, m.payload);
        if (++appended == kill_after) std::raise(SIGKILL);
        return HandleResult::accepted;
    });
    if (!ingest) return 1;
    if (auto ok = (*ingest)->start(std::chrono::seconds(5)); !ok) {
        std::fprintf(stderr, "%s\n", ok.error().message.c_str());
        return 1;
    }
    std::printf("ready\n");
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::minutes(2));
    return 0;
}
