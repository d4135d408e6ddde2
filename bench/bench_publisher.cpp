// bench_publisher: small JSON telemetry at QoS1, as fast as the broker takes it, with at most
// --max-inflight unacknowledged publishes (so no backlog of more than that builds up).
//   bench_publisher --uri U [--topic-prefix sensors] [--devices N] [--rate-max R]
//                   [--count C] [--qos 1] [--max-inflight K]
// Topics: PREFIX/dev-I/telemetry. Payload: {"ts": <ms>, "seq": n, "temp": x}.
#include <MQTTAsync.h>

#include <unistd.h>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>

namespace {

struct Window {
    std::mutex mutex;
    std::condition_variable changed;
    long inflight = 0;
    long acked = 0;
    long failed = 0;
};

void on_sent(void* context, MQTTAsync_successData*) {
    auto* w = static_cast<Window*>(context);
    std::lock_guard lock(w->mutex);
    --w->inflight;
    ++w->acked;
    w->changed.notify_all();
}

void on_send_failed(void* context, MQTTAsync_failureData*) {
    auto* w = static_cast<Window*>(context);
    std::lock_guard lock(w->mutex);
    --w->inflight;
    ++w->failed;
    w->changed.notify_all();
}

[[noreturn]] void usage(const char* why) {
    std::fprintf(stderr,
                 "bench_publisher: %s\nusage: bench_publisher --uri U [--topic-prefix P] "
                 "[--devices N] [--rate-max R msgs/s, 0 = unlimited] [--count C] [--qos Q] "
                 "[--max-inflight K]\n",
                 why);
    std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
    std::string uri, prefix = "sensors";
    long devices = 10, rate_max = 0, count = 100000, qos = 1, max_inflight = 1000;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (i + 1 >= argc) usage(("missing value for " + arg).c_str());
        const char* value = argv[++i];
        if (arg == "--uri")
            uri = value;
        else if (arg == "--topic-prefix")
            prefix = value;
        else if (arg == "--devices")
            devices = std::atol(value);
        else if (arg == "--rate-max")
            rate_max = std::atol(value);
        else if (arg == "--count")
            count = std::atol(value);
        else if (arg == "--qos")
            qos = std::atol(value);
        else if (arg == "--max-inflight")
            max_inflight = std::atol(value);
        else
            usage(("unknown option " + arg).c_str());
    }
    if (uri.empty()) usage("--uri is required");
    if (devices < 1 || count < 1 || qos < 0 || qos > 2 || max_inflight < 1 ||
        max_inflight > 65535) {
        usage("--devices and --count >= 1, --qos 0..2, --max-inflight 1..65535");
    }

    MQTTAsync client = nullptr;
    MQTTAsync_createOptions create = MQTTAsync_createOptions_initializer;
    create.MQTTVersion = MQTTVERSION_3_1_1;
    // Paho's command queue bound applies while connected too: room for the whole window.
    create.maxBufferedMessages = static_cast<int>(max_inflight) + 16;
    const std::string id = "bench-publisher-" + std::to_string(::getpid());
    if (MQTTAsync_createWithOptions(&client, uri.c_str(), id.c_str(), MQTTCLIENT_PERSISTENCE_NONE,
                                    nullptr, &create) != MQTTASYNC_SUCCESS) {
        usage("cannot create the client: check --uri");
    }
    Window window;
    bool connected = false, connect_done = false;
    struct ConnectState {
        Window* w;
        bool* connected;
        bool* done;
    } connect_state{&window, &connected, &connect_done};
    MQTTAsync_connectOptions connect = MQTTAsync_connectOptions_initializer;
    connect.MQTTVersion = MQTTVERSION_3_1_1;
    connect.cleansession = 1;
    connect.keepAliveInterval = 30;
    connect.maxInflight = static_cast<int>(max_inflight) + 1;
    connect.context = &connect_state;
    connect.onSuccess = [](void* c, MQTTAsync_successData*) {
        auto* s = static_cast<ConnectState*>(c);
        std::lock_guard lock(s->w->mutex);
        *s->connected = *s->done = true;
        s->w->changed.notify_all();
    };
    connect.onFailure = [](void* c, MQTTAsync_failureData*) {
        auto* s = static_cast<ConnectState*>(c);
        std::lock_guard lock(s->w->mutex);
        *s->done = true;
        s->w->changed.notify_all();
    };
    MQTTAsync_connect(client, &connect);
    {
        std::unique_lock lock(window.mutex);
        window.changed.wait_for(lock, std::chrono::seconds(10), [&] { return connect_done; });
        if (!connected) {
            std::fprintf(stderr, "bench_publisher: cannot connect to %s\n", uri.c_str());
            return 1;
        }
    }

    const auto start = std::chrono::steady_clock::now();
    std::string topic, payload;
    MQTTAsync_responseOptions response = MQTTAsync_responseOptions_initializer;
    response.onSuccess = &on_sent;
    response.onFailure = &on_send_failed;
    response.context = &window;
    for (long seq = 0; seq < count; ++seq) {
        if (rate_max > 0) {
            const auto due = start + std::chrono::microseconds(seq * 1'000'000 / rate_max);
            std::this_thread::sleep_until(due);
        }
        {
            std::unique_lock lock(window.mutex);
            window.changed.wait(lock, [&] { return window.inflight < max_inflight; });
            ++window.inflight;
        }
        const long device = seq % devices;
        topic = prefix + "/dev-" + std::to_string(device) + "/telemetry";
        const long ts_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count();
        payload = "{\"ts\": " + std::to_string(ts_ms) + ", \"seq\": " + std::to_string(seq) +
                  ", \"temp\": " + std::to_string(20.0 + static_cast<double>(seq % 100) / 10.0) +
                  "}";
        MQTTAsync_message message = MQTTAsync_message_initializer;
        message.payload = payload.data();
        message.payloadlen = static_cast<int>(payload.size());
        message.qos = static_cast<int>(qos);
        int rc;
        while ((rc = MQTTAsync_sendMessage(client, topic.c_str(), &message, &response)) ==
                   MQTTASYNC_MAX_MESSAGES_INFLIGHT ||
               rc == MQTTASYNC_MAX_BUFFERED_MESSAGES) {
            std::this_thread::sleep_for(std::chrono::microseconds(100));
        }
        if (rc != MQTTASYNC_SUCCESS) {
            std::fprintf(stderr, "bench_publisher: publish failed: %s\n", MQTTAsync_strerror(rc));
            return 1;
        }
    }
    {
        std::unique_lock lock(window.mutex);
        window.changed.wait_for(lock, std::chrono::seconds(60),
                                [&] { return window.inflight == 0; });
    }
    const double elapsed_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    MQTTAsync_disconnectOptions disconnect = MQTTAsync_disconnectOptions_initializer;
    MQTTAsync_disconnect(client, &disconnect);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    MQTTAsync_destroy(&client);
    std::printf("published: %ld msgs\n", window.acked);
    std::printf("failed: %ld msgs\n", window.failed);
    std::printf("elapsed: %.3f s\n", elapsed_s);
    std::printf("publish_rate: %.0f msgs/s\n", static_cast<double>(window.acked) / elapsed_s);
    return window.failed == 0 && window.acked == count ? 0 : 1;
}
