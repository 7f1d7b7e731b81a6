#!/usr/bin/env bash
# The caching CPU allocator against the trainrun before it and against libtorch / PyTorch (issue 15); prints a
# table per section and writes the raw records to $BENCH_MEMORY_TSV (default bench/MEMORY.tsv).
#
#   bench/memory.sh [BASE_TRAINRUN]
#
# BASE_TRAINRUN (optional): a trainrun binary built before the caching allocator (e.g. main's build/trainrun
# copied aside), run as the "base" form; without it the base form is this build with memory.cache=false, which
# keeps the new accounting but allocates and frees as libtorch does.
# Sections, each interleaved (base, cache, [raw, eager]) BENCH_REPS times because the machine is shared:
#   evalpass  the convnet's 10,000-image test pass at eval.batch_size 1000 (1 training step, then test_at_end),
#             seconds of the pass from metrics.jsonl, peak RSS (/usr/bin/time %M)
#   step      convnet (120 timed steps after 10) and mlp_256 (2000 after 50): steps/s of the training loop, the
#             same window as bench/run.sh (bench/report.py), and peak RSS; raw = bench/raw_libtorch.cpp (libtorch's
#             default allocator), eager = bench/eager.py (/usr/bin/python3)
#   backtrace mlp_256 with watchdog.backtrace=true vs false (every allocation records its call stack)
# Environment: BENCH_REPS (3), BENCH_SECTIONS ("evalpass step backtrace"), TRAINRUN (build/trainrun).
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
declare -A WARM=([mlp_256]=50 [convnet]=10)
declare -A STEPS=([mlp_256]=2000 [convnet]=120)
declare -A BATCH=([mlp_256]=64 [convnet]=128)

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

timed() { # timed RSS_FILE CMD... : run under /usr/bin/time, peak RSS into RSS_FILE
  local rss=$1
  shift
  /usr/bin/time -f '%M' -o "$rss" "$@" >"$tmp/out" 2>"$tmp/err" || { cat "$tmp/err" >&2; return 1; }
}

for section in $SECTIONS; do
  case $section in
  evalpass)
    for ((i = 1; i <= REPS; i++)); do
      for form in base cache; do
        name=eval-$form-$i
        # shellcheck disable=SC2046
        timed "$tmp/rss" "$(form_bin $form)" bench/configs/convnet.yaml $(form_args $form) train.max_steps=1 \
          eval.test_at_end=true eval.batch_size=1000 "run.dir=$tmp/runs" "run.name=$name"
        secs=$($PY -c 'import json,sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r.get("type") == "eval" and r.get("split") == "test": print(r["seconds"])' "$tmp/runs/$name/metrics.jsonl")
        printf 'evalpass\t%s\tconvnet\t%d\t%s\ts\t%s\n' "$form" "$i" "$secs" "$(cat "$tmp/rss")" >>"$OUTTSV"
        echo "evalpass $form rep $i: $secs s, peak RSS $(cat "$tmp/rss") KB" >&2
        rm -rf "${tmp:?}/runs/$name"
      done
    done ;;
  step|backtrace)
    wls="convnet mlp_256"
    forms="raw eager base cache"
    [ "$section" = backtrace ] && wls=mlp_256 && forms="cache bt"
    for w in $wls; do
      for ((i = 1; i <= REPS; i++)); do
        for form in $forms; do
          n=$((WARM[$w] + STEPS[$w]))
          name=$section-$form-$w-$i
          case $form in
            raw) timed "$tmp/rss" "$RAW" "$w" --warmup "${WARM[$w]}" --steps "${STEPS[$w]}" --threads 1
                 sps=$(sed -n 's/^RESULT .*steps_per_s=\([0-9.]*\).*/\1/p' "$tmp/out") ;;
            eager) timed "$tmp/rss" "$PY" bench/eager.py "$w" --warmup "${WARM[$w]}" --steps "${STEPS[$w]}" --threads 1
                 sps=$(sed -n 's/^RESULT .*steps_per_s=\([0-9.]*\).*/\1/p' "$tmp/out") ;;
            *)   # shellcheck disable=SC2046
                 timed "$tmp/rss" "$(form_bin "$form")" "bench/configs/$w.yaml" $(form_args "$form") "train.max_steps=$n" \
                   "log.every_steps=${WARM[$w]}" "run.dir=$tmp/runs" "run.name=$name"
                 sps=$($PY bench/report.py trainrun "$tmp/runs/$name" "${WARM[$w]}" "${STEPS[$w]}" "${BATCH[$w]}" | cut -d' ' -f1)
                 rm -rf "${tmp:?}/runs/$name" ;;
          esac
          printf '%s\t%s\t%s\t%d\t%s\tsteps/s\t%s\n' "$section" "$form" "$w" "$i" "$sps" "$(cat "$tmp/rss")" >>"$OUTTSV"
          echo "$section $form $w rep $i: $sps steps/s, peak RSS $(cat "$tmp/rss") KB" >&2
        done
      done
    done ;;
  esac
done
$PY bench/memory.py summary "$OUTTSV"
