// The tidemark binary the soak runs, chosen at run time (--tidemark PATH). Force-included into
// tests/integration/daemon.cpp, whose tidemark_binary() returns TIDEMARK_BINARY, defined as this
// variable for the soak's build only (the integration tests keep their compile-time path).
#pragma once

#include <string>

extern std::string tidemark_soak_binary;
