// Placeholder until the command lands.
#include <iostream>

#include "firmware/commands.h"

namespace tidemark::firmware {
int inspect_command(const InspectOptions&) {
    std::cerr << "tidemark inspect: not implemented yet\n";
    return 3;
}
}  // namespace tidemark::firmware
