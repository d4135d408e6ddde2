// Helper process for ingest_test: an ingest whose log is full. It prints "ready" once
// subscribed and "held" when the first message reaches the handler, then refuses it
// (retry_later: the connection is cut unacknowledged, and the message comes back on every
// reconnect) until the test kills it with SIGKILL - a crash between receipt and append.
#include <cstdio>
#include <thread>

#include "adapters/mqtt/ingest.h"
#include "tests/support/broker_options.h"

int main(int argc, char** argv) {
    if (argc != 4) {
        std::fprintf(stderr, "usage: %s URI CLIENT_ID FILTER\n", argv[0]);
        return 2;
    }
    tidemark::mqtt::BrokerOptions options;
    tidemark::test::set_address(options, argv[1]);
    options.client_id = argv[2];
    bool announced = false;
    auto ingest = tidemark::mqtt::Ingest::create(
        options, {argv[3]}, [&](const tidemark::mqtt::IncomingMessage&) {
            if (!announced) {
                announced = true;
                std::printf("held\n");
                std::fflush(stdout);
            }
            return tidemark::mqtt::HandleResult::retry_later;
        });
    if (!ingest || !(*ingest)->start(std::chrono::seconds(5))) return 1;
    std::printf("ready\n");
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::minutes(2));
    return 0;
}
