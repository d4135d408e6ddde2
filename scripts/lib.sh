# Shared by scripts/test, scripts/demo and scripts/bench: Debian packages, then a CMake build.
# Sourced, not run.

TIDEMARK_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# Everything the build, the tests and the demo use, from Debian 12's archive only.
TIDEMARK_PACKAGES=(
  build-essential cmake pkg-config
  liblmdb-dev lmdb-utils
  libpaho-mqttpp-dev libpaho-mqtt-dev libmosquitto-dev
  nlohmann-json3-dev libspdlog-dev libfmt-dev catch2 libcli11-dev libsimdjson-dev
  libsystemd-dev systemd
  mosquitto mosquitto-clients
  libssl-dev openssl
  dpkg-dev
  libpq-dev postgresql-15
  libzstd-dev liblz4-dev
  prometheus prometheus-node-exporter
  nats-server
)

# Installs what is missing; quick when everything is there already.
install_packages() {
  local missing=()
  for p in "${TIDEMARK_PACKAGES[@]}" "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "installing: ${missing[*]}"
    if [ "$(id -u)" -ne 0 ]; then
      echo "error: installing packages needs root (run as root, or install: ${missing[*]})" >&2
      exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # The mosquitto package would start a system broker on port 1883; tests and the demo start
    # their own on free ports, so a policy-rc.d that refuses service starts is fine either way.
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

# build DIR [cmake args...]: configure once, then build with both cores. Warnings are errors
# in the project's own builds (TIDEMARK_WERROR is off by default, for packagers).
build_tree() {
  local dir=$1
  shift
  cmake -S "$TIDEMARK_ROOT" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTIDEMARK_WERROR=ON "$@" \
    >/dev/null
  cmake --build "$dir" -j"$(nproc)"
}

# build_clang_tree TARGET...: the one clang tree, build-clang: AddressSanitizer + UBSan with
# libFuzzer's coverage, optimised (-O2), where CI runs the fast tests under the sanitizers and
# scripts/fuzz its targets. One tree for both (issue 26's CI time): GCC's -O0 sanitizer tree and
# clang's fuzz tree were two sanitizer builds of the same code, about 620 + 400 s of CI's 45
# minutes, and the fast tests ran about three times as long at -O0 (309 s against ~100 s).
#
# Why clang 16 and not Debian's default clang 14: the code uses C++23's std::expected, which
# libstdc++ 12 enables only for compilers that report P0848 (conditionally trivial special
# members, __cpp_concepts >= 202002). Clang 16 implements P0848 but still reports 201907, so
# the build states it (-D__cpp_concepts=202002L); clang 14 does not implement it at all.
# Debug information as in build/: none in CI (CI=true), kept for a developer's crash reports.
build_clang_tree() {
  install_packages clang-16 libclang-rt-16-dev
  local debug_info=ON
  [ "${CI:-}" = true ] && debug_info=OFF
  CC=clang-16 CXX=clang++-16 cmake -S "$TIDEMARK_ROOT" -B "$TIDEMARK_ROOT/build-clang" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTIDEMARK_WERROR=ON -DTIDEMARK_DEBUG_INFO=$debug_info \
    -DTIDEMARK_SANITIZE=ON -DTIDEMARK_FUZZ=ON -DTIDEMARK_BENCH=OFF \
    "-DCMAKE_CXX_FLAGS=-D__cpp_concepts=202002L -Wno-builtin-macro-redefined -Wno-macro-redefined -fsanitize=fuzzer-no-link" \
    >/dev/null
  cmake --build "$TIDEMARK_ROOT/build-clang" -j"$(nproc)" --target "$@"
}

# What the sanitizers do on a finding, for every run in build-clang: stop, with the stack.
TIDEMARK_SANITIZER_ENV=(ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
                        UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1)

# --- Cross builds for the ARM gateways (scripts/cross-test, scripts/package) ---
# Debian's cross compilers and qemu-user on the build machine; the target's libraries in a root
# extracted by mmdebstrap (not multiarch :arm64/:armhf packages on the host, which conflict:
# libsimdjson-dev cannot be installed for two architectures at once).
TIDEMARK_CROSS_PACKAGES=(g++-aarch64-linux-gnu g++-arm-linux-gnueabihf qemu-user mmdebstrap)
TIDEMARK_TARGET_PACKAGES=(
  libc6-dev libstdc++-12-dev
  liblmdb-dev libpaho-mqttpp-dev libpaho-mqtt-dev libmosquitto-dev
  nlohmann-json3-dev libspdlog-dev libfmt-dev catch2 libcli11-dev libsimdjson-dev
  libsystemd-dev libssl-dev libpq-dev
  libzstd-dev liblz4-dev
)
TIDEMARK_TARGET_SOURCES=(
  "deb http://deb.debian.org/debian bookworm main"
  "deb http://deb.debian.org/debian bookworm-updates main"
)

# cross_arch ARCH: checks ARCH (arm64|armhf) and sets CROSS_TRIPLE, CROSS_TOOLCHAIN, CROSS_QEMU
# and CROSS_ROOT.
cross_arch() {
  case "$1" in
    arm64) CROSS_TRIPLE=aarch64-linux-gnu CROSS_QEMU=qemu-aarch64
           CROSS_TOOLCHAIN=cmake/toolchain-aarch64.cmake ;;
    armhf) CROSS_TRIPLE=arm-linux-gnueabihf CROSS_QEMU=qemu-arm
           CROSS_TOOLCHAIN=cmake/toolchain-armhf.cmake ;;
    *) echo "error: unknown architecture '$1' (arm64 or armhf)" >&2; return 2 ;;
  esac
  CROSS_TOOLCHAIN=$TIDEMARK_ROOT/$CROSS_TOOLCHAIN
  CROSS_ROOT=${TIDEMARK_SYSROOT:-$TIDEMARK_ROOT/build-sysroot-$1}
}

# make_target_root ARCH: the target root for CMAKE_SYSROOT and qemu -L, made once (~30 s,
# ~150 MB) and made again only when the package list or the sources change. Beside it, a dpkg
# database of what was extracted (var/lib/tidemark-dpkg), for dpkg-shlibdeps: extract mode
# installs nothing, so the root has no database of its own.
make_target_root() {
  local arch=$1
  cross_arch "$arch"
  local root=$CROSS_ROOT
  local want
  want=$(printf '%s\n' "$arch" "${TIDEMARK_TARGET_PACKAGES[@]}" "${TIDEMARK_TARGET_SOURCES[@]}")
  if [ -f "$root/.tidemark-root" ] && [ "$(cat "$root/.tidemark-root")" = "$want" ]; then
    return 0
  fi
  echo "making the $arch target root in $root"
  rm -rf "$root"
  local include
  include=$(IFS=,; echo "${TIDEMARK_TARGET_PACKAGES[*]}")
  mmdebstrap --quiet --variant=extract --architectures="$arch" --include="$include" \
    --skip=cleanup/apt/cache bookworm "$root" "${TIDEMARK_TARGET_SOURCES[@]}"
  local admin=$root/var/lib/tidemark-dpkg
  mkdir -p "$admin/info" "$admin/updates" "$admin/triggers"
  : >"$admin/status"
  echo 1 >"$admin/info/format"  # multiarch names (pkg:arch.list) for Multi-Arch: same packages
  local deb name ma ctl
  ctl=$(mktemp -d)
  for deb in "$root"/var/cache/apt/archives/*.deb; do
    name=$(dpkg-deb -f "$deb" Package)
    ma=$(dpkg-deb -f "$deb" Multi-Arch)
    [ "$ma" = same ] && name="$name:$(dpkg-deb -f "$deb" Architecture)"
    { dpkg-deb -f "$deb"; echo "Status: install ok installed"; echo; } >>"$admin/status"
    # Paths as they are on this machine, under the root: what dpkg-shlibdeps looks up.
    dpkg-deb --fsys-tarfile "$deb" | tar -t | sed -e 's|^\./*||' -e 's|/$||' -e "s|^|$root/|" \
      >"$admin/info/$name.list"
    rm -rf "$ctl"/*
    dpkg-deb -e "$deb" "$ctl"
    for f in symbols shlibs; do
      [ -f "$ctl/$f" ] && cp "$ctl/$f" "$admin/info/$name.$f"
    done
  done
  rm -rf "$ctl" "$root"/var/cache/apt/archives/*.deb
  printf '%s\n' "$want" >"$root/.tidemark-root"
}
