#!/usr/bin/env bash
# memcheck-example.sh [BUILD_DIR] -- install libtrainrun into a temporary prefix, build examples/minimal.c against
# it with pkg-config, and run it under valgrind memcheck (apt-get install valgrind). Fails when memcheck reports
# an error or any definitely-lost byte. scripts/valgrind.supp holds the one suppression used (a glibc false
# positive); libtorch's process-lifetime allocations are "still reachable", not lost. Takes about a minute.
# On a CPU whose flags lack `rdtscp` (some VMs), libhwy -- loaded through libtorch_cpu -> libavcodec -> libjxl --
# executes RDTSCP in a static initializer, which valgrind refuses (SIGILL before main): there the run uses
# scripts/valgrind_hwy_stub.c in place of libhwy.so.1 (the five symbols libjxl imports; trainrun never calls them).
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
vgenv=()
libs=$(ldd "$tmp/minimal")   # (not piped into grep -q: under pipefail ldd's SIGPIPE would fail the test)
if ! grep -qw rdtscp /proc/cpuinfo && [[ $libs == *libhwy.so.1* ]]; then
  mkdir -p "$tmp/hwy"
  echo 'HWY_0 { global: *; };' >"$tmp/hwy/hwy.map"
  cc -shared -fPIC -O1 scripts/valgrind_hwy_stub.c -Wl,--version-script="$tmp/hwy/hwy.map" -Wl,-soname,libhwy.so.1 \
    -o "$tmp/hwy/libhwy.so.1"
  vgenv=(env "LD_LIBRARY_PATH=$tmp/hwy${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
  echo "memcheck-example: this CPU hides rdtscp: libhwy.so.1 replaced by scripts/valgrind_hwy_stub.c"
fi
set +e
"${vgenv[@]}" valgrind --leak-check=full --show-leak-kinds=definite --errors-for-leak-kinds=definite --num-callers=40 \
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
