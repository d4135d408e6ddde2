// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78). Uses the CPU's CRC-32C instruction
// where it has one, chosen once at run time (SSE4.2 on x86-64, the ARMv8 CRC32 extension on
// aarch64 and on armhf kernels that report it), and slice-by-8 tables everywhere else. Every
// path gives the same value on every architecture: the checksums are part of the stored log.
#pragma once

#include <cstdint>
#include <string_view>

namespace tidemark::log {

/// Extends `crc` (0 for a fresh computation) over `bytes`. crc32c(crc32c(0, a), b) ==
/// crc32c(0, a + b), so a frame's CRC is computed over its pieces without copying them.
uint32_t crc32c(uint32_t crc, std::string_view bytes);

/// The table-driven version crc32c() falls back to where the CPU has no CRC-32C instruction.
uint32_t crc32c_portable(uint32_t crc, std::string_view bytes);

/// The path crc32c() uses on this CPU: "sse4.2", "armv8" or "software". For `--version` and
/// health, and for the test that the hardware path agrees with the tables.
std::string_view crc32c_implementation();

}  // namespace tidemark::log
