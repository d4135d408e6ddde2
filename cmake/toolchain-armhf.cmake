# 32-bit ARM gateways (Debian armhf: ARMv7, hard float). See toolchain-common.cmake.
set(CMAKE_SYSTEM_PROCESSOR armv7l)
set(TIDEMARK_TARGET_TRIPLE arm-linux-gnueabihf)
set(TIDEMARK_DEB_ARCH armhf)
set(TIDEMARK_QEMU qemu-arm)
include(${CMAKE_CURRENT_LIST_DIR}/toolchain-common.cmake)
