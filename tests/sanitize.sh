#!/usr/bin/env bash
# tests/sanitize.sh -- the unit and integration tests under AddressSanitizer + UndefinedBehaviorSanitizer.
#
#   tests/sanitize.sh [BUILD_DIR] [ctest args...]     (default build-sanitize/)
#
# Configures trainrun with -DTRAINRUN_SANITIZE=ON into BUILD_DIR, builds it, and runs every Criterion test
# through CTest with the sanitizers fatal: a heap error, a leak (LeakSanitizer) or undefined behaviour in
# trainrun's code fails the run (a leak found at a test process's exit too, which Criterion itself lets pass).
# tests/lsan.supp suppresses leaks that belong to third-party libraries only (never a trainrun frame).
# Left out, each for a reason:
#   install_examples, readme_examples: they install this build and compile programs with plain `cc` against it;
#     an instrumented libtrainrun.so needs the ASan runtime loaded first, which a program built without
#     -fsanitize=address does not do ("ASan runtime does not come first in initial library list"), so they test
#     the installation, not our code, and do so in the normal build;
#   header_check: it only compiles trainrun.h (C99, C11, C++), nothing runs;
#   fuzz_smoke: tests/fuzz/run.sh builds its harnesses with ASan + UBSan (clang) on its own.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$src/build-sanitize}
[ $# -gt 0 ] && shift
launcher=()
command -v ccache >/dev/null 2>&1 && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTRAINRUN_SANITIZE=ON "${launcher[@]}" >/dev/null
nice cmake --build "$build" -j"${JOBS:-2}"
# abort_on_error: a finding kills the test process, so Criterion reports the test as crashed.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=0:allocator_may_return_null=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export LSAN_OPTIONS="suppressions=$src/tests/lsan.supp:print_suppressions=1${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
rc=0
ctest --test-dir "$build" --output-on-failure -j"${JOBS:-2}" -E '^(header_check|install_examples|readme_examples|fuzz_smoke)$' "$@" \
  || rc=$?
# Criterion counts a test whose process a sanitizer ends after the test body (LeakSanitizer runs at exit) as
# passing -- "Warning! The test `x` crashed during its setup or teardown" -- and exits 0, so ctest would too:
# such findings are looked for in the full log and fail the run.
log="$build/Testing/Temporary/LastTest.log"
pattern='ERROR: (LeakSanitizer|AddressSanitizer)|runtime error:|crashed during its setup or teardown'
if [ -f "$log" ] && grep -qE "$pattern" "$log"; then
  echo "sanitize: sanitizer findings in tests that ctest counted as passed (full output: $log):"
  grep -nE "$pattern" "$log" | head -40
  rc=1
fi
exit $rc
