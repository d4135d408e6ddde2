// Placeholder until the command lands.
#include <iostream>

#include "firmware/commands.h"

namespace tidemark::firmware {
int advise_command(const AdviseOptions&) {
    std::cerr << "tidemark advise: not implemented yet\n";
    return 3;
}
}  // namespace tidemark::firmware
