#!/usr/bin/env bash
# tests/fuzz/run.sh -- build the libFuzzer harnesses with clang (ASan + UBSan) and run each for a given time.
#
#   tests/fuzz/run.sh [--seconds N] [--jobs J] [--build DIR] [--only NAME[,NAME...]] [--build-only]
#
# Each harness tests/fuzz/fuzz_NAME.c (readers: IDX, CSV, config, override, model spec, safetensors, checkpoint
# JSON, npy/npz, PNG / JPEG images) starts from its committed seed corpus tests/fuzz/corpus/NAME/ (read-only:
# new inputs go to DIR/corpus/NAME/) with the dictionary tests/fuzz/NAME.dict, and runs N seconds (default 60),
# J at a time (default 1), nice'd. A crash, leak or sanitizer report fails the run: the input is saved as
# DIR/crash-NAME-* and the script exits 1. Each harness's last line says its executions and coverage
# ("NAME: 123456 execs in 60 s, cov 812 edges, ft 2310 features, corpus 95 inputs").
# Regression inputs for fixed findings live in tests/fuzz/corpus/NAME/ too, so every run replays them first.
# Exit 77 (skipped) when clang or its libFuzzer runtime is missing: scripts/setup.sh installs clang.
set -u
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
seconds=60 jobs=1 build="$src/build-fuzz" only="" build_only=0
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    --build-only) build_only=1; shift ;;
    *) echo "usage: $0 [--seconds N] [--jobs J] [--build DIR] [--only NAME,...] [--build-only]" >&2; exit 2 ;;
  esac
done
CC=${FUZZ_CC:-clang}
if ! command -v "$CC" >/dev/null 2>&1; then
  echo "fuzz: SKIPPED: $CC not found (scripts/setup.sh installs clang)"; exit 77
fi
mkdir -p "$build/obj" "$build/corpus"
probe="$build/probe.c"
echo 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }' > "$probe"
if [ ! -x "$build/probe" ] && ! "$CC" -fsanitize=fuzzer "$probe" -o "$build/probe" 2>"$build/probe.log"; then
  echo "fuzz: SKIPPED: $CC has no libFuzzer runtime ($(head -c 300 "$build/probe.log"))"; exit 77
fi

# The readers under test and what they need: pure C, no libtorch (the harnesses never link the shim).
# Each is runtime/src/LAYER/NAME.c (README, "Layout"): the lower layers only, util/, config/ and io/.
readers="util/error util/sys util/hash util/suggest config/yaml_util config/yaml_schema config/config config/config_schema config/model_spec config/device config/monitor io/csv
         io/data io/text io/safetensors io/checkpoint_meta io/checkpoint_validate io/io io/npy io/image"
rt="$src/runtime/src"
cflags="-g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all
        -std=c11 -D_GNU_SOURCE -I$rt/util -I$rt/config -I$rt/io -I$src/runtime/include -I$src/shim/include -I$here"
libs="$(pkg-config --libs yaml-0.1 libcjson libxxhash zlib libcrypto libpng libturbojpeg 2>/dev/null || echo -lyaml -lcjson -lxxhash -lz -lcrypto -lpng16 -lturbojpeg) -lm -lpthread"
# Objects and harnesses are rebuilt only when out of date (a source, a header, the flags or the readers changed), so a second
# run, e.g. the fuzz_smoke test of an unchanged tree, starts fuzzing at once.
stamp="$build/obj/flags"
if [ "$(cat "$stamp" 2>/dev/null)" != "$CC $cflags $libs $readers" ]; then
  rm -f "$build"/obj/*.o
  find "$build" -maxdepth 1 -type f -name 'fuzz_*' ! -name '*.log' -delete
  printf '%s' "$CC $cflags $libs $readers" > "$stamp"
fi
# stale TARGET NEWER...: TARGET is missing or older than one of the files NEWER
stale() {
  local t=$1 f; shift
  [ -f "$t" ] || return 0
  for f in "$@"; do [ "$f" -nt "$t" ] && return 0; done
  return 1
}
objs=""
for r in $readers; do
  o="$build/obj/${r//\//_}.o"
  if [ ! -f "$o" ] || [ "$rt/$r.c" -nt "$o" ] || [ -n "$(find "$rt" "$src/shim/include" -name '*.h' -newer "$o" | head -1)" ]; then
    # shellcheck disable=SC2086
    nice "$CC" $cflags -c "$rt/$r.c" -o "$o" || { echo "fuzz: cannot compile $r.c"; exit 1; }
  fi
  objs="$objs $o"
done
if stale "$build/obj/shim_stubs.o" "$here/shim_stubs.c" "$src"/shim/include/*.h; then
  # shellcheck disable=SC2086
  nice "$CC" $cflags -c "$here/shim_stubs.c" -o "$build/obj/shim_stubs.o" || { echo "fuzz: cannot compile shim_stubs.c"; exit 1; }
fi
objs="$objs $build/obj/shim_stubs.o"
harnesses=""
for h in "$here"/fuzz_*.c; do
  name=$(basename "$h" .c); name=${name#fuzz_}
  if [ -n "$only" ] && ! echo ",$only," | grep -q ",$name,"; then continue; fi
  # shellcheck disable=SC2086
  if stale "$build/fuzz_$name" "$h" "$here"/*.h $objs; then
    # shellcheck disable=SC2086
    nice "$CC" $cflags -fsanitize=fuzzer "$h" $objs $libs -o "$build/fuzz_$name" || { echo "fuzz: cannot build $name"; exit 1; }
  fi
  harnesses="$harnesses $name"
done
[ "$build_only" = 1 ] && { echo "fuzz: built$harnesses in $build"; exit 0; }

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
run_one() {
  local name=$1 log="$build/fuzz_$name.log"
  mkdir -p "$build/corpus/$name"
  local dict=""
  [ -f "$here/$name.dict" ] && dict="-dict=$here/$name.dict"
  # shellcheck disable=SC2086
  nice "$build/fuzz_$name" "$build/corpus/$name" "$here/corpus/$name" $dict -max_total_time="$seconds" \
    -max_len=65536 -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix="$build/crash-$name-" \
    >"$log" 2>&1
  local rc=$?
  local execs cov ft corp
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$')
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*')
  ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*')
  corp=$(grep -o 'corp: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*')
  if [ $rc -ne 0 ]; then
    echo "$name: FAILED (exit $rc): $(grep -m1 -E 'ERROR|runtime error|SUMMARY' "$log")  -- see $log"
    return 1
  fi
  echo "$name: ${execs:-?} execs in $seconds s, cov ${cov:-?} edges, ft ${ft:-?} features, corpus ${corp:-?} inputs"
}
fail=0 running=0
for name in $harnesses; do
  run_one "$name" > "$build/result_$name.txt" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then wait -n || fail=1; running=$((running - 1)); fi
done
while [ "$running" -gt 0 ]; do wait -n || fail=1; running=$((running - 1)); done
for name in $harnesses; do cat "$build/result_$name.txt"; done
exit $fail
