#!/usr/bin/env bash
# The layout rules of DESIGN.md section 2, checked on the source tree (a fast test):
#  1. core/ includes only core/ headers and the C++ standard library;
#  2. an adapter (adapters/NAME/) includes only core/, its own folder and its own libraries,
#     never another adapter;
#  3. no header outside adapters/ names an LMDB, Paho, libpq or nlohmann type;
#  4. docs/ARCHITECTURE.md names every source file of core/, adapters/ and firmware/.
# Prints every breach and exits 1 when there is one.
set -uo pipefail
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$root" || exit 2
fail=0
breach() { echo "layout: $*"; fail=1; }

# 1. core: quoted includes must be core/, angle includes must be standard headers (no dot, no
# slash, as <vector>; C headers <cstdint> style).
while IFS=: read -r file line text; do
  inc=$(sed -E 's/.*#include *[<"]([^>"]+)[>"].*/\1/' <<<"$text")
  case "$text" in
    *'"core/'*) ;;
    *'<'*) [[ "$inc" == */* || "$inc" == *.* ]] && breach "$file:$line: core includes <$inc>" ;;
    *) breach "$file:$line: core includes \"$inc\"" ;;
  esac
done < <(grep -nE '^\s*#\s*include' core/*.h core/*.cpp core/*/*.h core/*/*.cpp 2>/dev/null)

# 2. adapters: "adapters/OTHER/..." is a breach.
for dir in adapters/*/; do
  name=$(basename "$dir")
  while IFS=: read -r file line text; do
    other=$(sed -E 's|.*"adapters/([^/]+)/.*|\1|' <<<"$text")
    [ "$other" != "$name" ] && breach "$file:$line: adapters/$name includes adapters/$other"
  done < <(grep -nE '^\s*#\s*include\s*"adapters/' "$dir" -r --include='*.h' --include='*.cpp')
done

# 3. third-party types in headers outside adapters/ (no exception).
while IFS= read -r hit; do
  breach "$hit: a third-party type in a header outside adapters/"
done < <(grep -nE '\bMDB_[a-z]|\bnlohmann::|\bmqtt::async_client|\bMQTTAsync|\bPG(conn|result)\b' \
           core/*.h firmware/*.h firmware/*/*.h 2>/dev/null)

# 4. every source file is named in docs/ARCHITECTURE.md.
doc=docs/ARCHITECTURE.md
if [ ! -f "$doc" ]; then
  breach "$doc is missing"
else
  for f in core/*.h core/*.cpp core/*/*.h core/*/*.cpp adapters/*/*.h adapters/*/*.cpp \
           firmware/*.h firmware/*.cpp firmware/*/*.h firmware/*/*.cpp; do
    [ -f "$f" ] || continue
    grep -qF "\`$f\`" "$doc" || breach "$f is not named in $doc"
  done
  # ... and names no file that is gone.
  while IFS= read -r named; do
    [ -f "$named" ] || breach "$doc names $named, which does not exist"
  done < <(grep -oE '`(core|adapters|firmware)/[A-Za-z0-9_/]+\.(h|cpp)`' "$doc" | tr -d '`' | sort -u)
fi

[ "$fail" -eq 0 ] && echo "layout: ok"
exit "$fail"
