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

# build DIR [cmake args...]: configure once, then build with both cores.
build_tree() {
  local dir=$1
  shift
  cmake -S "$TIDEMARK_ROOT" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
  cmake --build "$dir" -j"$(nproc)"
}
