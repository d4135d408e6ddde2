// The socket Paho C uses for a client, so that ingest can cut a connection from inside a
// callback (internal to adapters/mqtt).
//
// Why: Paho C (1.3.12, MQTTProtocol_handlePublishes) sends a QoS1 PUBACK as soon as the
// message callback returns, whatever it returns (0 only keeps the message in Paho's memory, and
// acknowledges it all the same), and it runs every callback of the process under one mutex.
// So a message the log cannot take now must neither be held in the callback (that holds every
// Paho call in the process) nor returned (that acknowledges it). Shutting the connection's
// socket down before returning does neither: the PUBACK's write then fails, Paho sees the
// connection lost, and the broker keeps the message for the next connection (DUP).
//
// Paho has no call that names a client's socket; its protocol trace does: every CONNECT is
// traced as "SOCKET CLIENT_ID -> CONNECT version ...". The trace is turned on (at protocol
// level) only while a connect is under way, and off (errors only) otherwise, which also spares
// Paho the formatting of its default minimum-level trace for every message.
#pragma once

#include <string>

namespace tidemark::mqtt::paho_socket {

/// Brackets a connect: from connect_starting() until the matching connect_finished(), Paho's
/// protocol trace is on and its CONNECT lines are remembered. Any thread; nests.
void connect_starting();
void connect_finished();

/// The socket of `client_id`'s newest CONNECT that Paho traced, if it is still a TCP socket
/// connected to `port` (and to `host`, when that is a numeric address); -1 otherwise.
int find(const std::string& client_id, const std::string& host, int port);

/// Whether `fd` is a TCP socket connected to `port` (and `host`, when numeric).
bool connected_to(int fd, const std::string& host, int port);

/// Every socket of this process connected to `port` (and `host`, when numeric): the fallback
/// when find() had no answer (a Paho whose trace reads differently). Bounded by the process's
/// open files (LimitNOFILE).
int shutdown_all_connected_to(const std::string& host, int port);

}  // namespace tidemark::mqtt::paho_socket
