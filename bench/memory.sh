#!/usr/bin/env bash
# The caching CPU allocator against the trainrun before it and against libtorch / PyTorch (issue 15); prints a
# table per section and writes the raw records to $BENCH_MEMORY_TSV (default bench/MEMORY.tsv).
#
#   bench/memory.sh [BASE_TRAINRUN]
#
# BASE_TRAINRUN (optional): a trainrun binary built before the caching allocator (e.g. main's build/trainrun
# copied aside), run as the "base" form; without it the base form is this build with memory.cache=false, which
# keeps the new accounting but allocates and frees as libtorch does.
# The machine these ran on is shared by several jobs (load 10-12 on 2 cores), where wall-clock rates say more
# about the neighbours than about the program; so every figure is also taken in CPU seconds (user + system, from
# /usr/bin/time), which count the page faults and the work but not the waiting for a core.
# Sections, each interleaved (base, cache, [raw, eager]) BENCH_REPS times:
#   evalpass  the convnet's 10,000-image test pass at eval.batch_size 1000: 1 training step and test_at_end, minus
#             the same run without the test pass, in CPU seconds; the pass's wall seconds (metrics.jsonl), minor
#             page faults and peak RSS (/usr/bin/time %M) beside
#   step      convnet (train.max_steps 10 and 40) and mlp_256 (200 and 3200): training steps per CPU second, from
#             the difference between the two run lengths (start-up cancels); raw = bench/raw_libtorch.cpp
#             (libtorch's default allocator, glibc's default malloc), eager = bench/eager.py (/usr/bin/python3);
#             peak RSS of the longer run
#   backtrace mlp_256 with watchdog.backtrace=true vs false, as `step`
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${BENCH_REPS:-3}
SECTIONS=${BENCH_SECTIONS:-evalpass step backtrace}
TRAINRUN=${TRAINRUN:-build/trainrun}
OUTTSV=${BENCH_MEMORY_TSV:-bench/MEMORY.tsv}
PY=/usr/bin/python3
RAW=bench/.build/raw_libtorch
BASE=${1:-}
unset GLIBC_TUNABLES MALLOC_MMAP_THRESHOLD_ MALLOC_TRIM_THRESHOLD_ MALLOC_TOP_PAD_ MALLOC_MMAP_MAX_ MALLOC_ARENA_MAX
declare -A SHORT=([mlp_256]=200 [convnet]=10)
declare -A LONG=([mlp_256]=3200 [convnet]=40)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/trainrun-memory.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cp "$TRAINRUN" "$tmp/trainrun"
TR=$tmp/trainrun
if [ -n "$BASE" ]; then cp "$BASE" "$tmp/base"; fi
if [[ " $SECTIONS " == *" step "* ]]; then
  cmake -S bench -B bench/.build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build bench/.build >/dev/null
fi
: >"$OUTTSV"
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, load at start $(cut -d' ' -f1-3 /proc/loadavg); shared machine" >>"$OUTTSV"
printf 'section\tform\tworkload\trep\tvalue\tunit\tpeak_rss_kb\n' >>"$OUTTSV"

# form_bin FORM / form_args FORM -> the binary and the overrides (after the config) that select the form
form_bin() { if [ "$1" = base ] && [ -n "$BASE" ]; then echo "$tmp/base"; else echo "$TR"; fi; }
form_args() {
  case $1 in
    base) [ -n "$BASE" ] || echo "memory.cache=false" ;;
    cache) echo "memory.cache=true" ;;
    nocache) echo "memory.cache=false" ;;
    bt) echo "memory.cache=true watchdog.backtrace=true" ;;
  esac
}

timed() { # timed CMD... : run under /usr/bin/time; sets RSS (KB), CPU (user + system s), FAULTS (minor)
  /usr/bin/time -f '%M %U %S %R' -o "$tmp/time" "$@" >"$tmp/out" 2>"$tmp/err" || { cat "$tmp/err" >&2; return 1; }
  read -r RSS u sy FAULTS < <(tail -1 "$tmp/time")
  CPU=$(awk -v u="$u" -v s="$sy" 'BEGIN {printf "%.3f", u + s}')
}
rec() { printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >>"$OUTTSV"; echo "$*" >&2; }

# run_steps FORM WORKLOAD STEPS: one run of STEPS training steps in total
run_steps() {
  local form=$1 w=$2 n=$3
  case $form in
    raw) timed "$RAW" "$w" --warmup 5 --steps $((n - 5)) --threads 1 ;;
    eager) timed "$PY" bench/eager.py "$w" --warmup 5 --steps $((n - 5)) --threads 1 ;;
    *) # shellcheck disable=SC2046
       timed "$(form_bin "$form")" "bench/configs/$w.yaml" $(form_args "$form") "train.max_steps=$n" \
         "log.every_steps=$n" "run.dir=$tmp/runs" "run.name=r" && rm -rf "${tmp:?}/runs/r" ;;
  esac
}

for section in $SECTIONS; do
  case $section in
  evalpass)
    for ((i = 1; i <= REPS; i++)); do
      for form in base cache; do
        # shellcheck disable=SC2046
        timed "$(form_bin $form)" bench/configs/convnet.yaml $(form_args $form) train.max_steps=1 \
          eval.test_at_end=false "run.dir=$tmp/runs" "run.name=e0"
        cpu0=$CPU faults0=$FAULTS
        # shellcheck disable=SC2046
        timed "$(form_bin $form)" bench/configs/convnet.yaml $(form_args $form) train.max_steps=1 \
          eval.test_at_end=true eval.batch_size=1000 "run.dir=$tmp/runs" "run.name=e1"
        secs=$($PY -c 'import json,sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r.get("type") == "eval" and r.get("split") == "test": print(r["seconds"])' "$tmp/runs/e1/metrics.jsonl")
        rec evalpass "$form" convnet "$i" "$(awk -v a="$CPU" -v b="$cpu0" 'BEGIN {printf "%.3f", a - b}')" cpu_s "$RSS"
        rec evalpass_wall "$form" convnet "$i" "$secs" s "$RSS"
        rec evalpass_faults "$form" convnet "$i" $((FAULTS - faults0)) faults "$RSS"
        rm -rf "${tmp:?}/runs"
      done
    done ;;
  step|backtrace)
    wls="convnet mlp_256"
    forms="raw eager base cache"
    [ "$section" = backtrace ] && wls=mlp_256 && forms="cache bt"
    for w in $wls; do
      for ((i = 1; i <= REPS; i++)); do
        for form in $forms; do
          run_steps "$form" "$w" "${SHORT[$w]}"
          c1=$CPU
          run_steps "$form" "$w" "${LONG[$w]}"
          rec "$section" "$form" "$w" "$i" "$(awk -v n=$((LONG[$w] - SHORT[$w])) -v a="$CPU" -v b="$c1" \
            'BEGIN {printf "%.2f", n / (a - b)}')" steps/cpu_s "$RSS"
        done
      done
    done ;;
  esac
done
$PY bench/memory.py summary "$OUTTSV"
