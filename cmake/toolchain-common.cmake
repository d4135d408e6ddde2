# Shared by toolchain-aarch64.cmake and toolchain-armhf.cmake, which set TIDEMARK_TARGET_TRIPLE,
# TIDEMARK_QEMU and TIDEMARK_DEB_ARCH first. Cross builds use Debian's cross compilers and a
# target root holding the target's -dev packages (made by scripts/cross-test with mmdebstrap
# --variant=extract; see scripts/lib.sh, make_target_root). A root rather than multiarch :arm64
# packages on the host: some -dev packages cannot be co-installed for two architectures.
#
#   cmake -S . -B build-arm64 --toolchain cmake/toolchain-aarch64.cmake [-DTIDEMARK_SYSROOT=DIR]
#
# The root defaults to build-sysroot-<deb arch> in the source tree (git-ignored); ctest runs
# the tests under qemu-user with -L at that same root: qemu pointed at a different C library
# than the one linked hangs on the first thread it creates.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_C_COMPILER ${TIDEMARK_TARGET_TRIPLE}-gcc)
set(CMAKE_CXX_COMPILER ${TIDEMARK_TARGET_TRIPLE}-g++)

if(NOT TIDEMARK_SYSROOT)
  if(DEFINED ENV{TIDEMARK_SYSROOT})
    set(TIDEMARK_SYSROOT "$ENV{TIDEMARK_SYSROOT}")
  else()
    set(TIDEMARK_SYSROOT "${CMAKE_CURRENT_LIST_DIR}/../build-sysroot-${TIDEMARK_DEB_ARCH}")
  endif()
endif()
cmake_path(ABSOLUTE_PATH TIDEMARK_SYSROOT NORMALIZE)
if(NOT EXISTS "${TIDEMARK_SYSROOT}/usr/include")
  message(FATAL_ERROR "target root ${TIDEMARK_SYSROOT} is missing or empty: "
                      "run scripts/cross-test ${TIDEMARK_DEB_ARCH} (it makes the root), "
                      "or pass -DTIDEMARK_SYSROOT=DIR")
endif()
set(TIDEMARK_SYSROOT "${TIDEMARK_SYSROOT}" CACHE PATH "Target root with the target's libraries")
# try_compile projects re-read this file without the cache; hand them the root.
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES TIDEMARK_SYSROOT TIDEMARK_DEB_ARCH)

set(CMAKE_SYSROOT "${TIDEMARK_SYSROOT}")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# pkg-config must read the target's .pc files only, and prefix what they name with the root.
set(ENV{PKG_CONFIG_SYSROOT_DIR} "${CMAKE_SYSROOT}")
set(ENV{PKG_CONFIG_LIBDIR}
    "${CMAKE_SYSROOT}/usr/lib/${TIDEMARK_TARGET_TRIPLE}/pkgconfig:${CMAKE_SYSROOT}/usr/share/pkgconfig")
unset(ENV{PKG_CONFIG_PATH})

# binfmt_misc may not be mounted (containers, CI): run target programs through qemu explicitly.
find_program(TIDEMARK_QEMU_PROGRAM ${TIDEMARK_QEMU} REQUIRED)
set(CMAKE_CROSSCOMPILING_EMULATOR "${TIDEMARK_QEMU_PROGRAM};-L;${CMAKE_SYSROOT}")
