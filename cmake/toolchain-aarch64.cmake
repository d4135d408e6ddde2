# 64-bit ARM gateways (Debian arm64). See toolchain-common.cmake.
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(TIDEMARK_TARGET_TRIPLE aarch64-linux-gnu)
set(TIDEMARK_DEB_ARCH arm64)
set(TIDEMARK_QEMU qemu-aarch64)
include(${CMAKE_CURRENT_LIST_DIR}/toolchain-common.cmake)
