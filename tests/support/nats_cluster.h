// Test fixture: a three-node nats-server cluster with JetStream and MQTT on loopback (the
// clustered upstream of a fleet, DESIGN.md section 11). Failures throw std::runtime_error.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace tidemark::test {

/// Operation: start() runs three /usr/sbin/nats-server processes (children of the test, killed
/// with it), each with its server_name, a client port, a cluster route to the other two, a
/// monitoring port and an MQTT listener with stream_replicas 3 (MQTT's JetStream streams on
/// every node, so a dead node loses nothing), its JetStream store in the cluster's directory.
/// It returns once every node names the same JetStream meta leader (/jsz on the monitoring
/// port): /healthz says ok before the cluster has formed, and an MQTT CONNECT before that is
/// refused. kill(i) SIGKILLs node i (the others keep quorum); restart(i) starts it again on the
/// same ports and store and waits until it is back in the cluster.
/// Limits: three nodes; ports picked free once, reused by restart().
class NatsCluster {
  public:
    static constexpr int nodes = 3;

    static NatsCluster start();
    ~NatsCluster();
    NatsCluster(NatsCluster&& other) noexcept;
    NatsCluster& operator=(NatsCluster&&) = delete;
    NatsCluster(const NatsCluster&) = delete;
    NatsCluster& operator=(const NatsCluster&) = delete;

    int mqtt_port(int node) const { return node_[node].mqtt_port; }
    std::string mqtt_uri(int node) const;        ///< tcp://127.0.0.1:MQTT_PORT
    std::vector<std::string> mqtt_uris() const;  ///< every node's, node 0 first
    /// The node whose MQTT port is `port` (from a health record's node), -1 if none.
    int node_of_port(int port) const;
    bool running(int node) const { return node_[node].pid > 0; }

    void kill(int node);     ///< SIGKILL and reap
    void restart(int node);  ///< after kill(): same ports and store; waits for the cluster
    /// Waits until every running node names the same JetStream meta leader.
    void wait_formed(std::chrono::milliseconds timeout) const;
    std::string log(int node) const;

  private:
    struct Node {
        std::string name, conf, log;
        int client_port = 0, route_port = 0, http_port = 0, mqtt_port = 0;
        pid_t pid = -1;
    };
    NatsCluster() = default;
    void launch(int node);
    std::string dir_;
    Node node_[nodes];
};

}  // namespace tidemark::test
