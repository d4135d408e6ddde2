#include "firmware/build_info.h"

#include "adapters/codec/decoder.h"
#include "adapters/log/crc32c.h"

namespace tidemark::firmware {

BuildInfo build_info() {
    BuildInfo info;
    info.crc32c = log::crc32c_implementation();
    info.json_kernel = codec::json_kernel();
    return info;
}

std::string version_text(std::string_view version) {
    const BuildInfo info = build_info();
    std::string text = "tidemark " + std::string(version);
    text += "\ncrc32c: " + std::string(info.crc32c);
    if (!info.json_kernel.empty()) text += "\njson: " + std::string(info.json_kernel);
    return text;
}

}  // namespace tidemark::firmware
