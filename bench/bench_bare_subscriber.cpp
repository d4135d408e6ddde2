// bench_bare_subscriber: the floor for `scripts/bench ingest`. A Paho C subscriber with the
// same client settings as tidemark's Ingest (MQTT 3.1.1, persistent session, QoS1, keep-alive
// 30 s, callback on Paho's receive thread, PUBACK after it returns) that only counts.
//   bench_bare_subscriber --uri U --filter F --count C [--client-id ID] [--timeout-s S]
// Prints "subscribed" when ready, then, after C messages (or the timeout), its figures:
//   msgs_per_s, cpu_us_per_msg (user+sys of this process between the first and the last
//   message, per message) and rss_anon_kib (/proc/self/status RssAnon).
#include <MQTTAsync.h>
#include <sys/resource.h>

#include <unistd.h>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <string>

namespace {

double cpu_us() {
    rusage usage{};
    ::getrusage(RUSAGE_SELF, &usage);
    const auto us = [](const timeval& t) {
        return t.tv_sec * 1e6 + static_cast<double>(t.tv_usec);
    };
    return us(usage.ru_utime) + us(usage.ru_stime);
}

long rss_anon_kib() {
    std::ifstream status("/proc/self/status");
    std::string key;
    while (status >> key) {
        if (key == "RssAnon:") {
            long kib = 0;
            status >> kib;
            return kib;
        }
        status.ignore(1 << 12, '\n');
    }
    return -1;
}

struct Counter {
    long count_wanted = 0;
    std::atomic<long> received{0};
    double first_cpu_us = 0, last_cpu_us = 0;
    std::chrono::steady_clock::time_point first_at, last_at;
    std::mutex mutex;
    std::condition_variable changed;
    bool connect_done = false, connected = false, subscribed = false, done = false;
};

int on_message(void* context, char* topic, int, MQTTAsync_message* message) {
    auto* c = static_cast<Counter*>(context);
    const long n = c->received.fetch_add(1, std::memory_order_relaxed) + 1;
    if (n == 1) {
        c->first_cpu_us = cpu_us();
        c->first_at = std::chrono::steady_clock::now();
    }
    if (n == c->count_wanted) {
        c->last_cpu_us = cpu_us();
        c->last_at = std::chrono::steady_clock::now();
        std::lock_guard lock(c->mutex);
        c->done = true;
        c->changed.notify_all();
    }
    MQTTAsync_freeMessage(&message);
    MQTTAsync_free(topic);
    return 1;
}

void signal_state(Counter* c, bool Counter::*flag) {
    std::lock_guard lock(c->mutex);
    c->*flag = true;
    c->connect_done = true;
    c->changed.notify_all();
}

[[noreturn]] void usage(const char* why) {
    std::fprintf(stderr,
                 "bench_bare_subscriber: %s\nusage: bench_bare_subscriber --uri U --filter F "
                 "--count C [--client-id ID] [--timeout-s S]\n",
                 why);
    std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
    std::string uri, filter, client_id = "bench-bare-subscriber";
    long count = 0, timeout_s = 300;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (i + 1 >= argc) usage(("missing value for " + arg).c_str());
        const char* value = argv[++i];
        if (arg == "--uri")
            uri = value;
        else if (arg == "--filter")
            filter = value;
        else if (arg == "--count")
            count = std::atol(value);
        else if (arg == "--client-id")
            client_id = value;
        else if (arg == "--timeout-s")
            timeout_s = std::atol(value);
        else
            usage(("unknown option " + arg).c_str());
    }
    if (uri.empty() || filter.empty() || count < 1) usage("--uri, --filter and --count >= 1");

    Counter counter;
    counter.count_wanted = count;
    MQTTAsync client = nullptr;
    MQTTAsync_createOptions create = MQTTAsync_createOptions_initializer;
    create.MQTTVersion = MQTTVERSION_3_1_1;
    if (MQTTAsync_createWithOptions(&client, uri.c_str(), client_id.c_str(),
                                    MQTTCLIENT_PERSISTENCE_NONE, nullptr,
                                    &create) != MQTTASYNC_SUCCESS) {
        usage("cannot create the client: check --uri");
    }
    MQTTAsync_setCallbacks(client, &counter, nullptr, &on_message, nullptr);
    MQTTAsync_connectOptions connect = MQTTAsync_connectOptions_initializer;
    connect.MQTTVersion = MQTTVERSION_3_1_1;
    connect.cleansession = 0;  // as Ingest: persistent session
    connect.keepAliveInterval = 30;
    connect.maxInflight = 64;
    connect.retryInterval = 0;
    connect.context = &counter;
    connect.onSuccess = [](void* c, MQTTAsync_successData*) {
        signal_state(static_cast<Counter*>(c), &Counter::connected);
    };
    connect.onFailure = [](void* c, MQTTAsync_failureData*) {
        signal_state(static_cast<Counter*>(c), &Counter::connect_done);
    };
    MQTTAsync_connect(client, &connect);
    std::unique_lock lock(counter.mutex);
    counter.changed.wait_for(lock, std::chrono::seconds(10), [&] { return counter.connect_done; });
    if (!counter.connected) {
        std::fprintf(stderr, "bench_bare_subscriber: cannot connect to %s\n", uri.c_str());
        return 1;
    }
    counter.connect_done = false;
    MQTTAsync_responseOptions subscribe = MQTTAsync_responseOptions_initializer;
    subscribe.context = &counter;
    subscribe.onSuccess = [](void* c, MQTTAsync_successData*) {
        signal_state(static_cast<Counter*>(c), &Counter::subscribed);
    };
    subscribe.onFailure = [](void* c, MQTTAsync_failureData*) {
        signal_state(static_cast<Counter*>(c), &Counter::connect_done);
    };
    MQTTAsync_subscribe(client, filter.c_str(), 1, &subscribe);
    counter.changed.wait_for(lock, std::chrono::seconds(10), [&] { return counter.connect_done; });
    if (!counter.subscribed) {
        std::fprintf(stderr, "bench_bare_subscriber: subscription to %s refused\n", filter.c_str());
        return 1;
    }
    std::printf("subscribed\n");
    std::fflush(stdout);
    const bool complete = counter.changed.wait_for(lock, std::chrono::seconds(timeout_s),
                                                   [&] { return counter.done; });
    lock.unlock();
    const long received = counter.received.load();
    if (!complete) {
        std::fprintf(stderr, "bench_bare_subscriber: timeout after %ld of %ld messages\n", received,
                     count);
        counter.last_cpu_us = cpu_us();
        counter.last_at = std::chrono::steady_clock::now();
    }
    const double seconds =
        std::chrono::duration<double>(counter.last_at - counter.first_at).count();
    const long measured = complete ? count : received;
    MQTTAsync_disconnectOptions disconnect = MQTTAsync_disconnectOptions_initializer;
    MQTTAsync_disconnect(client, &disconnect);
    std::printf("received: %ld msgs\n", received);
    std::printf("msgs_per_s: %.0f msgs/s\n", seconds > 0 ? measured / seconds : 0.0);
    std::printf("cpu_us_per_msg: %.2f us\n",
                measured > 0 ? (counter.last_cpu_us - counter.first_cpu_us) / measured : 0.0);
    std::printf("rss_anon_kib: %ld KiB\n", rss_anon_kib());
    return complete ? 0 : 1;
}
