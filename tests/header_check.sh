#!/usr/bin/env bash
# header_check.sh CC CXX INCLUDE_DIR GENERATED_INCLUDE_DIR -- trainrun.h (with the trainrun_version.h CMake
# generates) compiles alone as C99, C11 and C++ (extern "C"), with -Wall -Wextra -pedantic -Werror, and a C++
# program can call it.
set -euo pipefail
cc=$1 cxx=$2 inc=$3 gen=$4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/use.c" <<'C'
#include <trainrun/trainrun.h>
#include <trainrun/trainrun.h> /* include guard */
int main(void)
{
    trainrun_batch b = {0, TRAINRUN_FLOAT32, 2, {1, 1, 0, 0}, 0, TRAINRUN_INT64};
    trainrun_event_fn fn = 0;
    (void)fn;
    return b.ndim == 2 && trainrun_errstr(TRAINRUN_OK) != 0 ? 0 : 1;
}
C
cp "$tmp/use.c" "$tmp/use.cpp"
for std in c99 c11; do
  "$cc" -std=$std -Wall -Wextra -pedantic -Werror -I"$inc" -I"$gen" -fsyntax-only "$tmp/use.c"
  echo "C $std: clean"
done
for std in c++11 c++17; do
  "$cxx" -std=$std -Wall -Wextra -pedantic -Werror -I"$inc" -I"$gen" -c "$tmp/use.cpp" -o "$tmp/use.o"
  # extern "C": the symbol is referenced unmangled
  nm "$tmp/use.o" | grep -q ' U trainrun_errstr$' || { echo "C++ $std: trainrun_errstr is mangled"; exit 1; }
  echo "C++ $std: clean, extern \"C\""
done
