// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), computed in software with
// slice-by-8 tables: portable to the ARM gateways without relying on CPU extensions.
#pragma once

#include <cstdint>
#include <string_view>

namespace tidemark::log {

/// Extends `crc` (0 for a fresh computation) over `bytes`. crc32c(crc32c(0, a), b) ==
/// crc32c(0, a + b), so a frame's CRC is computed over its pieces without copying them.
uint32_t crc32c(uint32_t crc, std::string_view bytes);

/// The table-driven version crc32c() falls back to where the CPU has no CRC-32C instruction.
uint32_t crc32c_portable(uint32_t crc, std::string_view bytes);

}  // namespace tidemark::log
