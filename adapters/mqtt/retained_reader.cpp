#include "adapters/mqtt/retained_reader.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include "adapters/mqtt/mosquitto_options.h"

namespace tidemark::mqtt {
namespace {

constexpr std::size_t filters_max = 16;
constexpr int64_t slice_ms = 50;
// libmosquitto refuses a keep-alive below 5 s; a read lasts seconds, so this is never used.
constexpr int keep_alive_s = 10;
constexpr int subscribe_qos = 0;  // nothing to acknowledge: a read, not a session

struct Reader {
    Reader(const RetainedReadOptions& o, std::string marker)
        : options(o), marker_topic(std::move(marker)) {}

    const RetainedReadOptions& options;
    std::string marker_topic;
    RetainedRead read;
    std::size_t bytes = 0;
    bool connack_received = false;
    int connack_rc = 0;
    bool link_lost = false;
    int subscribe_mid = -1;
    bool subscribed = false;
    std::string refused_filter;
    int64_t last_activity_ms = 0;

    static void on_connect(mosquitto*, void* self, int rc) {
        auto* r = static_cast<Reader*>(self);
        r->connack_received = true;
        r->connack_rc = rc;
    }
    static void on_disconnect(mosquitto*, void* self, int) {
        static_cast<Reader*>(self)->link_lost = true;
    }
    static void on_subscribe(mosquitto*, void* self, int mid, int count, const int* granted) {
        auto* r = static_cast<Reader*>(self);
        if (mid != r->subscribe_mid) return;
        for (int i = 0; i < count; ++i) {
            // 0x80: the broker refused this filter (an ACL, a filter it does not take).
            if (granted[i] == 0x80 && r->refused_filter.empty()) {
                r->refused_filter = static_cast<std::size_t>(i) < r->options.filters.size()
                                        ? r->options.filters[static_cast<std::size_t>(i)]
                                        : r->marker_topic;
            }
        }
        r->subscribed = true;
        r->last_activity_ms = r->options.clock->steady_ms();
    }
    static void on_message(mosquitto*, void* self, const mosquitto_message* m) {
        static_cast<Reader*>(self)->take(m);
    }

    void take(const mosquitto_message* m) {
        last_activity_ms = options.clock->steady_ms();
        const std::string topic(m->topic);
        if (topic == marker_topic) {
            read.complete = true;
            return;
        }
        if (read.truncated) return;
        const auto size = static_cast<std::size_t>(std::max(m->payloadlen, 0));
        if (size == 0) return;  // a cleared retained message
        if (size > options.payload_bytes_max) {
            ++read.oversized;
            return;
        }
        auto it = read.topics.find(topic);
        if (it == read.topics.end()) {
            if (read.topics.size() >= options.topics_max ||
                bytes + topic.size() + size > options.bytes_max) {
                read.truncated = true;
                return;
            }
            bytes += topic.size() + size;
            read.topics.emplace(topic, std::string(static_cast<const char*>(m->payload), size));
            return;
        }
        // A newer message on a topic already read (published during the read): it replaces.
        if (bytes - it->second.size() + size > options.bytes_max) {
            read.truncated = true;
            return;
        }
        bytes = bytes - it->second.size() + size;
        it->second.assign(static_cast<const char*>(m->payload), size);
    }
};

struct MosquittoDeleter {
    void operator()(mosquitto* m) const { mosquitto_destroy(m); }
};

Result<void> connect(Reader& r, mosquitto* mosq, const BrokerAddress& node, int64_t deadline_ms) {
    if (auto ok = apply_mosquitto_options(mosq, r.options.broker, node); !ok) return ok;
    mosquitto_connect_callback_set(mosq, Reader::on_connect);
    mosquitto_disconnect_callback_set(mosq, Reader::on_disconnect);
    mosquitto_subscribe_callback_set(mosq, Reader::on_subscribe);
    mosquitto_message_callback_set(mosq, Reader::on_message);
    errno = 0;
    const int rc = mosquitto_connect_async(mosq, node.host.c_str(), node.port, keep_alive_s);
    if (rc != MOSQ_ERR_SUCCESS) {
        return fail("cannot connect to " + r.read.address + ": " +
                    (rc == MOSQ_ERR_ERRNO ? std::string(std::strerror(errno))
                                          : std::string(mosquitto_strerror(rc))));
    }
    while (!r.connack_received) {
        if (r.link_lost) return fail("cannot connect to " + r.read.address);
        if (r.options.clock->steady_ms() >= deadline_ms)
            return fail("no answer from " + r.read.address + " within the timeout");
        const int lrc = mosquitto_loop(mosq, static_cast<int>(slice_ms), 1);
        if (lrc != MOSQ_ERR_SUCCESS) {
            return fail("cannot connect to " + r.read.address + ": " +
                        (lrc == MOSQ_ERR_ERRNO ? std::string(std::strerror(errno))
                                               : std::string(mosquitto_strerror(lrc))));
        }
    }
    if (r.connack_rc != 0) {
        return fail(r.read.address + " refused the connection of client '" +
                    r.options.broker.client_id + "': " + mosquitto_connack_string(r.connack_rc));
    }
    return {};
}

Result<void> collect(Reader& r, mosquitto* mosq, int64_t deadline_ms) {
    std::vector<char*> filters;
    for (const std::string& f : r.options.filters)
        filters.push_back(const_cast<char*>(f.c_str()));
    filters.push_back(r.marker_topic.data());
    int rc = mosquitto_subscribe_multiple(mosq, &r.subscribe_mid, static_cast<int>(filters.size()),
                                          filters.data(), subscribe_qos, 0, nullptr);
    if (rc != MOSQ_ERR_SUCCESS)
        return fail("cannot subscribe on " + r.read.address + ": " + mosquitto_strerror(rc));
    bool marker_sent = false;
    while (!r.read.complete && !r.read.truncated) {
        const int64_t now_ms = r.options.clock->steady_ms();
        if (now_ms >= deadline_ms) break;
        if (r.subscribed && !r.refused_filter.empty())
            return fail(r.read.address + " refused the subscription to '" + r.refused_filter + "'");
        if (r.subscribed && !marker_sent) {
            marker_sent = true;
            // Refused by an ACL, this is dropped in silence: the quiet period then ends the read.
            mosquitto_publish(mosq, nullptr, r.marker_topic.c_str(), 3, "end", 0, false);
        }
        if (r.subscribed && now_ms - r.last_activity_ms >= r.options.quiet_ms) break;
        rc = mosquitto_loop(mosq, static_cast<int>(std::min(slice_ms, deadline_ms - now_ms)), 1);
        if (rc != MOSQ_ERR_SUCCESS || r.link_lost)
            return fail("lost the connection to " + r.read.address + " while reading");
    }
    if (!r.subscribed) return fail("no SUBACK from " + r.read.address + " within the timeout");
    return {};
}

}  // namespace

Result<RetainedRead> read_retained(const RetainedReadOptions& options) {
    if (auto ok = validate(options.broker); !ok) return std::unexpected(ok.error());
    if (options.clock == nullptr) return fail("read_retained: no clock given");
    if (options.filters.empty() || options.filters.size() > filters_max)
        return fail("read_retained: between 1 and 16 topic filters, not " +
                    std::to_string(options.filters.size()));
    for (const std::string& f : options.filters)
        if (f.empty()) return fail("read_retained: an empty topic filter");
    mosquitto_library_init();
    const int64_t deadline_ms = options.clock->steady_ms() + options.timeout_ms;
    std::string errors;
    for (const BrokerAddress& node : options.broker.addresses) {
        Reader r(options, "tidemark-status/" + options.broker.client_id + "/end");
        r.read.address = broker_address(node);
        std::unique_ptr<mosquitto, MosquittoDeleter> mosq(
            mosquitto_new(options.broker.client_id.c_str(), /*clean_session=*/true, &r));
        if (!mosq)
            return fail(std::string("cannot create an MQTT client: ") + std::strerror(errno));
        auto ok = connect(r, mosq.get(), node, deadline_ms);
        if (ok) ok = collect(r, mosq.get(), deadline_ms);
        if (ok) {
            mosquitto_disconnect(mosq.get());
            mosquitto_loop(mosq.get(), 0, 1);  // the DISCONNECT goes out; nothing waits on it
            return std::move(r.read);
        }
        errors += (errors.empty() ? "" : "; ") + ok.error().message;
        if (options.clock->steady_ms() >= deadline_ms) break;
    }
    return fail(options.broker.config_name + ": " + errors);
}

}  // namespace tidemark::mqtt
