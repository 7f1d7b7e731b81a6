#!/usr/bin/env bash
# memcheck-example.sh [BUILD_DIR] -- install libtrainrun into a temporary prefix, build examples/minimal.c against
# it with pkg-config, and run it under valgrind memcheck (apt-get install valgrind). Fails when memcheck reports
# an error or any definitely-lost byte. scripts/valgrind.supp holds the one suppression used (a glibc false
# positive); libtorch's process-lifetime allocations are "still reachable", not lost. Takes about a minute.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
command -v valgrind >/dev/null || { echo "memcheck-example: valgrind is not installed (apt-get install valgrind)"; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
pc=$(find "$tmp/prefix" -name trainrun.pc)
libdir=$(dirname "$(dirname "$pc")")
export PKG_CONFIG_PATH=$libdir/pkgconfig
# shellcheck disable=SC2046
cc -std=c99 -g -O1 examples/minimal.c $(pkg-config --cflags --libs trainrun) -Wl,-rpath,"$libdir" -o "$tmp/minimal"
set +e
valgrind --leak-check=full --show-leak-kinds=definite --errors-for-leak-kinds=definite --num-callers=40 \
  --suppressions=scripts/valgrind.supp --error-exitcode=3 "$tmp/minimal" "$tmp" >"$tmp/out" 2>"$tmp/vg"
rc=$?
set -e
grep -E "definitely lost|indirectly lost|possibly lost|still reachable|ERROR SUMMARY|total heap usage" "$tmp/vg"
tail -1 "$tmp/out"
if [ $rc -ne 0 ]; then
  cat "$tmp/vg"
  echo "memcheck-example: FAILED (exit $rc)"
  exit 1
fi
echo "memcheck-example: OK"
