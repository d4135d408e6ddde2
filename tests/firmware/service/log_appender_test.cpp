// The ingest handler (LogAppender) over a real log and store (no broker): redeliveries are
// logged once when QoS0 messages sit between them, live and after a restart seeded from the
// log (issue 25, finding 4), and an oversized QoS1 message kept as malformed is recognised when
// it comes back.
//
// The harness shape of the issue: A (QoS1), Q (QoS0), B (QoS1), then the link drops before the
// broker reads the acknowledgements: A and B come back with DUP. Q had put packet id 0 into
// the filter's window: A matched, the filter then expected Q, B did not match and was logged
// again, and so was every later redelivery of the run.
#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <vector>

#include "adapters/config/config.h"
#include "adapters/log/log_reader.h"
#include "adapters/log/log_writer.h"
#include "adapters/mqtt/ingest.h"
#include "firmware/clock.h"
#include "firmware/service/log_appender.h"
#include "firmware/service/service_parts.h"
#include "tests/firmware/service/parts_support.h"
#include "tests/support/broker.h"

using namespace tidemark;
using mqtt::HandleResult;
using mqtt::IncomingMessage;
using tidemark::test::open_parts;
using tidemark::test::TempDir;

namespace {

config::Config load(const std::string& data_dir) {
    const std::string json = R"({"node_id": "gw", "data_dir": ")" + data_dir + R"(",
      "storage": {"fsync": "never"},
      "source": {"uri": "tcp://127.0.0.1:1883", "max_payload": "1KiB"},
      "pipelines": [{"name": "p", "topic": "t/+", "key": "topic:1",
        "window": {"type": "tumbling", "size": "10s"},
        "aggregates": {"n": {"fn": "count"}}}]})";
    auto c = config::parse_config(json, "/");
    INFO((c ? std::string() : config::format_errors(c.error())));
    REQUIRE(c);
    return *c;
}

struct Message {
    std::string topic, payload;
    int qos = 1;
    int packet_id = 0;
};

std::unique_ptr<firmware::LogAppender> open_appender(const config::Config& c,
                                                     firmware::ServiceParts& parts,
                                                     const core::Clock& clock) {
    auto appender = firmware::LogAppender::open(c, parts.host().log(), parts.alarms(), clock);
    INFO((appender ? std::string() : appender.error().message));
    REQUIRE(appender);
    return std::move(*appender);
}

// One process's ingest: its parts (recovered) and handler (its filter seeded from the log).
struct Process {
    explicit Process(const config::Config& c)
        : parts(open_parts(c)), appender(open_appender(c, *parts, clock)) {}
    // Delivers `m` on broker connection `connection`, flagged DUP when `duplicate`.
    void deliver(const Message& m, uint64_t connection, bool duplicate) {
        const IncomingMessage in{.topic = m.topic,
                                 .payload = m.payload,
                                 .duplicate = duplicate,
                                 .retained = false,
                                 .qos = m.qos,
                                 .packet_id = m.qos > 0 ? m.packet_id : 0,
                                 .connection = connection};
        REQUIRE(appender->handle(in) == HandleResult::accepted);
    }
    // The log's messages and malformed records, in order: "topic payload-prefix".
    std::vector<std::string> records() {
        auto reader = log::LogReader::open(parts->host().log().options().dir);
        REQUIRE(reader);
        std::vector<std::string> out;
        log::Record rec;
        for (;;) {
            auto next = (*reader)->next(rec, parts->host().log().end_offset());
            REQUIRE(next);
            if (!*next) break;
            if (rec.type == log::RecordType::tick) continue;
            out.push_back(std::string(rec.topic) + " " + std::string(rec.payload.substr(0, 8)));
        }
        return out;
    }
    firmware::SystemClock clock;
    std::unique_ptr<firmware::ServiceParts> parts;
    std::unique_ptr<firmware::LogAppender> appender;
};

}  // namespace

TEST_CASE(
    "a QoS0 message between two QoS1 redeliveries: each is logged once, live and after "
    "a restart",
    "[redelivery]") {
    TempDir dir("tm-appender");
    const config::Config c = load(dir.path());
    const Message a{"t/a", "A-reading", 1, 17}, q{"t/q", "Q-reading", 0, 0},
        b{"t/b", "B-reading", 1, 18}, big{"t/m", std::string(2000, 'M'), 1, 19},
        c1{"t/c", "C-reading", 1, 20};
    const std::vector<std::string> logged{"t/a A-readin", "t/q Q-readin", "t/b B-readin",
                                          "t/m MMMMMMMM",  // malformed: oversized
                                          "t/c C-readin"};
    {
        Process first(c);
        for (const Message* m : {&a, &q, &b, &big, &c1})
            first.deliver(*m, 1, /*duplicate=*/false);
        // The link drops before the broker reads the PUBACKs: it resends the QoS1 ones, DUP.
        for (const Message* m : {&a, &b, &big, &c1})
            first.deliver(*m, 2, /*duplicate=*/true);
        INFO("live, the second connection");
        CHECK(first.records() == logged);
        // ... and once more: the broker resends what is still unacknowledged (all of them:
        // this connection's PUBACKs were lost too), then the process is killed.
        for (const Message* m : {&a, &b, &big, &c1})
            first.deliver(*m, 3, /*duplicate=*/true);
        CHECK(first.records() == logged);
    }
    // A restart (the process died with the PUBACKs): the filter is seeded from the log, whose
    // QoS0 record says it is never redelivered and whose malformed record is known by what the
    // log keeps of it.
    Process second(c);
    for (const Message* m : {&a, &b, &big, &c1})
        second.deliver(*m, 4, /*duplicate=*/true);
    INFO("after the restart");
    CHECK(second.records() == logged);
    // A message flagged DUP that was never logged (sent, never read) is new.
    const Message d{"t/d", "D-reading", 1, 21};
    second.deliver(d, 4, /*duplicate=*/true);
    auto expected = logged;
    expected.push_back("t/d D-readin");
    CHECK(second.records() == expected);
}
