// `tidemark status`: the retained health of one gateway (its config) or of every gateway and
// sink on a broker, for a person (tables) or a script (--json), once or redrawn (--watch).
#pragma once

#include <cstdint>
#include <string>

#include "core/clock.h"
#include "firmware/service/runtime.h"

namespace tidemark::firmware {

struct StatusOptions {
    std::string config_path;    ///< either this: the gateway's own source broker and health.topic
    std::string broker;         ///< or this: a uri, or a cluster's uris ", "-separated
    std::string node;           ///< with broker: only this node (or sink client id)
    std::string username;       ///< with broker
    std::string password_file;  ///< with broker: the password, trailing newlines removed
    std::string ca_file;        ///< with broker, ssl://: the CA bundle (else the system's)
    bool json = false;
    bool watch = false;
    std::string timeout = "3s";  ///< one read of the broker, connect included
    std::string interval;        ///< --watch: empty = health.interval (--config), else 2s
};

/// 0: shown; 1: the broker could not be read, or held no health record for what was asked
/// (a message says which, on stderr); 2: bad options or config. --watch runs until
/// `signals.stop` (SIGINT, SIGTERM), shows read failures on screen and goes on, and returns 0.
int status_command(const StatusOptions& options, const Signals& signals, const core::Clock& clock);

}  // namespace tidemark::firmware
