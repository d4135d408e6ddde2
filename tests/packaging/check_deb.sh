#!/usr/bin/env bash
# check_deb.sh DEB...: what an operator's dpkg relies on in a tidemark .deb of any architecture:
# exactly the expected files, the right Architecture, Depends from dpkg-shlibdeps (the target's
# runtime packages, never a host package), a stripped binary for that architecture; and for
# arm64 and armhf, the packaged `tidemark --version` and `check-config` of the packaged config
# (and of one with a 2GiB map, which only arm64 can address) run under qemu-user in a copy of
# the target root the package is unpacked into.
# With no argument: every .deb in build-pkg/debs (scripts/package makes them); exit 77 (skip) if
# there are none.
set -euo pipefail
source "$(dirname "$0")/../../scripts/lib.sh"

debs=("$@")
if [ ${#debs[@]} -eq 0 ]; then
  shopt -s nullglob
  debs=("$TIDEMARK_ROOT"/build-pkg/debs/tidemark_*.deb)
  if [ ${#debs[@]} -eq 0 ]; then
    echo "no packages in build-pkg/debs: run scripts/package ARCH first"
    exit 77
  fi
fi

failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

expected_files='./etc/tidemark/tidemark.json
./usr/bin/tidemark
./usr/lib/systemd/system/tidemark-sink.service
./usr/lib/systemd/system/tidemark.service
./usr/lib/sysusers.d/tidemark.conf
./usr/lib/tmpfiles.d/tidemark.conf
./usr/share/doc/tidemark/OPERATIONS.md
./usr/share/doc/tidemark/SINK.md
./usr/share/doc/tidemark/sink.json'

for deb in "${debs[@]}"; do
  arch=${deb##*_}
  arch=${arch%.deb}
  echo "== $deb ($arch)"
  [ "$(dpkg-deb -f "$deb" Architecture)" = "$arch" ] || fail "$deb: Architecture is not $arch"
  files=$(dpkg-deb -c "$deb" | awk '$1 !~ /^d/ { print $6 }' | LC_ALL=C sort)
  [ "$files" = "$expected_files" ] || fail "$deb: files differ:"$'\n'"$files"
  depends=$(dpkg-deb -f "$deb" Depends)
  echo "Depends: $depends"
  # Package names alone, one a line: compared as fixed strings ("libstdc++6" is no regex).
  names=$(sed -e 's/ *([^)]*)//g' -e 's/ *| */\n/g' -e 's/ *, */\n/g' <<<"$depends")
  for p in systemd libc6 libstdc++6 liblmdb0 libpaho-mqtt1.3 libsystemd0 \
           libspdlog1.10-fmt9 libsimdjson14 libmosquitto1 libpq5; do
    grep -qxF "$p" <<<"$names" || fail "$deb: Depends lacks $p"
  done
  grep -q ':' <<<"$depends" && fail "$deb: Depends names an architecture-qualified package"
  work=$(mktemp -d)
  dpkg-deb -x "$deb" "$work/pkg"
  machine=$(LC_ALL=C readelf -h "$work/pkg/usr/bin/tidemark" | sed -n 's/^ *Machine: *//p')
  case "$arch" in
    amd64) want='Advanced Micro Devices X86-64' ;;
    arm64) want='AArch64' ;;
    armhf) want='ARM' ;;
  esac
  [ "$machine" = "$want" ] || fail "$deb: binary is for '$machine', not '$want'"
  LC_ALL=C readelf -S "$work/pkg/usr/bin/tidemark" | grep -qF ' .symtab ' &&
    fail "$deb: /usr/bin/tidemark is not stripped (it keeps its symbol table)"
  if [ "$arch" != amd64 ]; then
    cross_arch "$arch"
    if [ ! -f "$CROSS_ROOT/.tidemark-root" ]; then
      fail "$deb: no target root at $CROSS_ROOT (scripts/cross-test $arch makes it)"
    else
      # A hard-linked copy of the cached root, so the package does not stay in it. qemu -L
      # looks up every path the program opens in the root first: /etc/tidemark/tidemark.json
      # is the packaged one.
      cp -al "$CROSS_ROOT" "$work/root"
      dpkg-deb -x "$deb" "$work/root"
      # The secrets the packaged config names are the operator's, not in the package.
      mkdir -p "$work/root/etc/tidemark/tls"
      for f in source.pass upstream.pass tls/ca.pem tls/gw-01.pem tls/gw-01.key; do
        echo placeholder >"$work/root/etc/tidemark/$f"
      done
      version=$("$CROSS_QEMU" -L "$work/root" "$work/root/usr/bin/tidemark" --version 2>&1) ||
        fail "$deb: tidemark --version failed: $version"
      echo "$version"
      check=$("$CROSS_QEMU" -L "$work/root" "$work/root/usr/bin/tidemark" check-config \
        /etc/tidemark/tidemark.json 2>&1) || fail "$deb: check-config failed: $check"
      echo "$check"
      # The address space: a 2GiB map opens on arm64 and is refused on armhf, with the limit.
      sed 's/"map_size": "[^"]*"/"map_size": "2GiB"/' "$work/root/etc/tidemark/tidemark.json" \
        >"$work/root/etc/tidemark/map-2gib.json"
      big=$("$CROSS_QEMU" -L "$work/root" "$work/root/usr/bin/tidemark" check-config \
        /etc/tidemark/map-2gib.json 2>&1) && big_rc=0 || big_rc=$?
      if [ "$arch" = armhf ]; then
        [ "$big_rc" -ne 0 ] && grep -qF 'storage.map_size 2GiB > 1GiB' <<<"$big" ||
          fail "$deb: check-config did not refuse a 2GiB map on armhf: $big"
      else
        [ "$big_rc" -eq 0 ] || fail "$deb: check-config refused a 2GiB map on $arch: $big"
      fi
    fi
  fi
  rm -rf "$work"
done
[ "$failures" -eq 0 ] && echo "all packages pass" || exit 1
