#!/usr/bin/env bash
# trainrun vs a raw libtorch loop vs PyTorch eager, side by side (issue 8); writes bench/RESULTS.md.
#
#   bench/run.sh
#
# Workloads (the same loop in all forms; see bench/raw_libtorch.cpp, bench/eager.py, bench/embed_trainer.c (trainrun's
# embedding API, built against trainrun installed into a scratch prefix), bench/configs/):
#   mlp_256     MLP 784-256-10, batch 64            (harness overhead)
#   convnet     models/convnet.yaml, batch 128      (compute-bound)
#   data_bound  linear 784-10, batch 1024           (batch preparation dominates)
# Sections, each interleaved (raw, eager, trainrun, raw, eager, trainrun, ...) because the machine is noisy:
#   main        each workload, BENCH_REPS times per form, default threads; peak RSS, minor page faults and system
#               CPU time of every run (/usr/bin/time).
#               mlp_256 and data_bound also run two forms that split the harness overhead: raw_acc (the raw loop
#               also counting correct predictions, as trainrun's step does) and trainrun_nocount (trainrun with
#               TRAINRUN_COUNTING=0 and watchdog.enabled=false: libtorch's own allocator, no memory sampling)
#   malloc      raw, eager, trainrun on each workload again with glibc's malloc pinned (GLIBC_TUNABLES below),
#               BENCH_MALLOC_REPS times. With glibc's defaults the mmap threshold starts at 128 KiB and only rises
#               when a process happens to free a large mmap'd block, so whether every step's large tensors (the
#               convnet's 12.8 MB activations, eager's 3.2 MB batches) are mmap'd, page-faulted and unmapped again
#               depends on what the process did before training: pinning mmap_threshold (32 MiB, its maximum) and
#               trim_threshold (256 MiB; both are needed) gives all forms the same allocator behaviour
#   sweep       MLP with threads 1 and 2 in every form, with default and pinned malloc, BENCH_SWEEP_REPS times,
#               BENCH_SWEEP_STEPS (1000) timed steps, each run limited to BENCH_SWEEP_TIMEOUT (15) seconds
#   ckpt        trainrun convnet saving a checkpoint (AdamW state) every 8 steps, BENCH_CKPT_REPS runs of 5 saves,
#               each followed by 3 rewrites of the last checkpoint's files from Python (each file fsynced, then the
#               directory: the floor of this layout), SHA-256 of them, and 5 x
#               `dd if=/dev/zero bs=1M count=<same MiB> conv=fsync`, all in the same scratch directory
# Environment: BENCH_REPS (3), BENCH_MALLOC_REPS (3), BENCH_SWEEP_REPS (3), BENCH_CKPT_REPS (3), BENCH_SCALE (1:
# multiplies the timed steps), BENCH_WORKLOADS (the workloads of main and malloc), BENCH_RUN_TIMEOUT (300 s a
# run), BENCH_SWEEP_STEPS, BENCH_SWEEP_TIMEOUT, TRAINRUN (build/trainrun), BENCH_RESULTS (bench/RESULTS.md; the
# raw records go next to it as .tsv), BENCH_TMP (scratch parent: mktemp -d). GLIBC_TUNABLES and MALLOC_*_ from the
# caller are unset. The defaults take about 8 minutes on a 2-core machine; raise the repetitions on a quiet one.
# Needs: build/trainrun (scripts/setup.sh), cmake + libtorch-dev (bench/raw_libtorch.cpp is built into
# bench/.build), /usr/bin/python3 with python3-torch, /usr/bin/time (package `time`; installed with apt-get when
# missing and running as root). bench/RESULTS.md keeps its hand-written analysis section across runs.
set -euo pipefail
cd "$(dirname "$0")/.."

REPS=${BENCH_REPS:-3}
WORKLOADS=${BENCH_WORKLOADS:-mlp_256 convnet data_bound}
RUN_TIMEOUT=${BENCH_RUN_TIMEOUT:-300}
SWEEP_STEPS=${BENCH_SWEEP_STEPS:-1000}
SWEEP_TIMEOUT=${BENCH_SWEEP_TIMEOUT:-15}
MALLOC_REPS=${BENCH_MALLOC_REPS:-3}
SWEEP_REPS=${BENCH_SWEEP_REPS:-3}
CKPT_REPS=${BENCH_CKPT_REPS:-3}
TRAINRUN=${TRAINRUN:-build/trainrun}
RESULTS=${BENCH_RESULTS:-bench/RESULTS.md}
PY=/usr/bin/python3
RAW=bench/.build/raw_libtorch
PINNED_MALLOC=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=268435456
unset GLIBC_TUNABLES MALLOC_MMAP_THRESHOLD_ MALLOC_TRIM_THRESHOLD_ MALLOC_TOP_PAD_ MALLOC_MMAP_MAX_ MALLOC_ARENA_MAX

. bench/workloads.sh   # WARM, STEPS (x BENCH_SCALE), BATCH

die() { echo "bench/run.sh: $*" >&2; exit 1; }

# ---- prerequisites -------------------------------------------------------------------------------------------
[ -x "$TRAINRUN" ] || die "$TRAINRUN not found: build trainrun first (./scripts/setup.sh)"
$PY -c 'import torch, numpy' 2>/dev/null || die "$PY cannot import torch: apt-get install python3-torch"
if [ ! -x /usr/bin/time ]; then
  [ "$(id -u)" = 0 ] || die "/usr/bin/time missing: apt-get install time"
  apt-get install -y -qq time >/dev/null || { apt-get update -qq && apt-get install -y -qq time >/dev/null; }
fi
echo "building $RAW" >&2
cmake -S bench -B bench/.build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build bench/.build >/dev/null

tmp=$(mktemp -d -p "${BENCH_TMP:-${TMPDIR:-/tmp}}" trainrun-bench.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# The embedding-API form is built the way an application is: trainrun installed into a prefix, found by pkg-config.
echo "installing trainrun into $tmp/prefix and building bench/embed_trainer.c against it" >&2
cmake --install "$(dirname "$TRAINRUN")" --prefix "$tmp/prefix" >/dev/null
EMBED=$tmp/embed_trainer
pcdir=$(dirname "$(find "$tmp/prefix" -name trainrun.pc | head -1)")
# shellcheck disable=SC2046
cc -O2 -std=c11 bench/embed_trainer.c $(PKG_CONFIG_PATH=$pcdir pkg-config --cflags --libs trainrun) -lz \
  -Wl,-rpath,"$(PKG_CONFIG_PATH=$pcdir pkg-config --variable=libdir trainrun)" -o "$EMBED"
# A private copy: others may rebuild build/ while the benchmark runs.
cp "$TRAINRUN" "$tmp/trainrun"
tr_info="$TRAINRUN built $(date -u -r "$TRAINRUN" '+%Y-%m-%d %H:%M UTC'), git HEAD $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- runtime shim 2>/dev/null || echo ' + uncommitted changes in runtime/ or shim/')"
TRAINRUN=$tmp/trainrun
records=$tmp/records.tsv
: >"$records"
t_start=$(date +%s)
load_start=$(cut -d' ' -f1-3 /proc/loadavg)

# record SECTION FORM WORKLOAD THREADS REP STEPS_PER_S SAMPLES_PER_S SHARE RSS_KB EXTRA [MINOR_FAULTS SYS_S]
record() {
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" "$6" "$7" "$8" "$9" \
    "${10}" "${11:-nan}" "${12:-nan}" >>"$records"
}

# The RESULT line of raw_libtorch / eager.py -> "steps_per_s samples_per_s data_share"
parse_result() {
  sed -n 's/^RESULT .*steps_per_s=\([0-9.]*\) samples_per_s=\([0-9.]*\) data_share=\([0-9.]*\).*/\1 \2 \3/p' "$1"
}

# run_form SECTION FORM WORKLOAD THREADS REP [ALLOC [STEPS [LIMIT_S]]]
#   THREADS "auto" = each form's default (1); ALLOC pinned = under GLIBC_TUNABLES=$PINNED_MALLOC; STEPS: timed steps
#   (default STEPS[WORKLOAD]). A run still going after LIMIT_S seconds (default BENCH_RUN_TIMEOUT) is killed and
#   recorded as timed out, with the bound (warm-up + steps) / LIMIT_S as its rate; returns 1 then.
run_form() {
  local section=$1 form=$2 w=$3 th=$4 rep=$5 alloc=${6:-default}
  local steps=${7:-${STEPS[$w]}} limit=${8:-$RUN_TIMEOUT}
  local n=$((WARM[$w] + steps)) name=$section-$form-$w-$th-$rep
  local rss=$tmp/rss out=$tmp/out err=$tmp/err envs=(env) cmd=() res rc=0
  [ "$alloc" = default ] || envs+=("GLIBC_TUNABLES=$PINNED_MALLOC")
  case $form in
    embed)
      cmd=("$EMBED" "$w" --warmup "${WARM[$w]}" --steps "$steps") ;;
    raw|raw_acc)
      cmd=("$RAW" "$w" --warmup "${WARM[$w]}" --steps "$steps" --threads "${th/auto/1}")
      [ "$form" = raw ] || cmd+=(--count-correct) ;;
    eager)
      cmd=("$PY" bench/eager.py "$w" --warmup "${WARM[$w]}" --steps "$steps" --threads "${th/auto/1}") ;;
    trainrun|trainrun_nocount)
      cmd=("$TRAINRUN" "bench/configs/$w.yaml" "train.max_steps=$n" "log.every_steps=${WARM[$w]}"
           "run.dir=$tmp/runs" "run.name=$name")
      [ "$th" = auto ] || cmd+=("threads=$th")
      if [ "$form" = trainrun ]; then envs+=(TRAINRUN_COUNTING=1); else
        envs+=(TRAINRUN_COUNTING=0); cmd+=(watchdog.enabled=false); fi ;;
  esac
  rm -f "$rss"
  # timeout signals its whole process group, so /usr/bin/time's child goes too.
  timeout -s KILL "$limit" "${envs[@]}" /usr/bin/time -f '%M %R %S' -o "$rss" "${cmd[@]}" >"$out" 2>"$err" || rc=$?
  if [ "$rc" = 137 ]; then
    local bound
    bound=$(awk -v n="$n" -v l="$limit" 'BEGIN {printf "%.2f", n / l}')
    record "$section" "$form" "$w" "$th" "$rep" "$bound" "$(awk -v r="$bound" -v b="${BATCH[$w]}" 'BEGIN {print r * b}')" \
      nan nan timeout
    printf '%-13s %-16s %-10s threads=%-4s malloc %-7s rep %d: TIMED OUT after %s s (< %s steps/s)\n' \
      "$section" "$form" "$w" "$th" "$alloc" "$rep" "$limit" "$bound" >&2
    rm -rf "${tmp:?}/runs/$name"
    return 1
  fi
  [ "$rc" = 0 ] || { cat "$err" >&2; die "$name failed (exit $rc)"; }
  case $form in
    trainrun*)
      res=$($PY bench/report.py trainrun "$tmp/runs/$name" "${WARM[$w]}" "$steps" "${BATCH[$w]}")
      res=${res% *}   # drop the step-only rate
      rm -rf "${tmp:?}/runs/$name" ;;
    *) res=$(parse_result "$out") ;;
  esac
  [ -n "$res" ] || { cat "$out" "$err" >&2; die "$name: no result"; }
  local sps samples share maxrss minflt sys
  read -r sps samples share <<<"$res"
  read -r maxrss minflt sys < <(tail -1 "$rss")
  record "$section" "$form" "$w" "$th" "$rep" "$sps" "$samples" "$share" "$maxrss" "-" "$minflt" "$sys"
  printf '%-13s %-16s %-10s threads=%-4s malloc %-7s rep %d: %8s steps/s %6s%% batch prep/outside step, %s KB, %s minor faults, sys %s s\n' \
    "$section" "$form" "$w" "$th" "$alloc" "$rep" "$sps" "$(awk -v s="$share" 'BEGIN{printf "%.2f", 100*s}')" \
    "$maxrss" "$minflt" "$sys" >&2
}

# ---- main: three workloads, three forms, interleaved ------------------------------------------------------------
for w in $WORKLOADS; do
  forms=(raw eager trainrun embed)
  [ "$w" = convnet ] || forms=(raw raw_acc eager trainrun embed trainrun_nocount)
  for ((i = 1; i <= REPS; i++)); do
    for form in "${forms[@]}"; do run_form main "$form" "$w" auto "$i" || true; done
  done
done

# ---- the same with glibc's malloc pinned -------------------------------------------------------------------------
for w in $WORKLOADS; do
  for ((i = 1; i <= MALLOC_REPS; i++)); do
    for form in raw eager trainrun; do run_form malloc "$form" "$w" auto "$i" pinned || true; done
  done
done

# ---- thread sweep on the MLP ---------------------------------------------------------------------------------
# Shorter runs, and a time limit: with 2 OpenMP threads on 2 cores, a step waits for both threads, and a core that
# is busy with anything else stalls every step (measured: 70x slower while another process kept one core busy).
# A setting that timed out is not run again in later repetitions.
declare -A TIMED_OUT=()
for ((i = 1; i <= SWEEP_REPS; i++)); do
  for form in raw eager trainrun; do
    for alloc in default pinned; do
      for th in 1 2; do
        [ -z "${TIMED_OUT[$form-$alloc-$th]:-}" ] || continue
        run_form "sweep-$alloc" "$form" mlp_256 "$th" "$i" "$alloc" "$SWEEP_STEPS" "$SWEEP_TIMEOUT" ||
          TIMED_OUT[$form-$alloc-$th]=1
      done
    done
  done
done

# ---- checkpoint save vs dd --------------------------------------------------------------------------------------
for ((i = 1; i <= CKPT_REPS; i++)); do
  name=ckpt-$i
  "$TRAINRUN" bench/configs/convnet.yaml train.max_steps=40 log.every_steps=8 checkpoint.every_steps=8 \
    checkpoint.keep_last=2 "run.dir=$tmp/runs" "run.name=$name" >"$tmp/out" 2>"$tmp/err" ||
    { cat "$tmp/err" >&2; die "$name failed"; }
  while read -r bytes secs; do
    mib=$(((bytes + 1048575) / 1048576))
    record ckpt trainrun convnet auto "$i" "$secs" "$bytes" 0 0 "$mib"
    echo "ckpt   trainrun checkpoint $bytes bytes: $secs s" >&2
  done < <($PY bench/report.py checkpoints "$tmp/runs/$name")
  saved=("$tmp/runs/$name"/checkpoints/step-*)
  last=${saved[-1]}
  for ((k = 0; k < 3; k++)); do
    read -r fsecs hsecs < <($PY bench/report.py ckpt-floor "$last" "$tmp/floor")
    rm -rf "${tmp:?}/floor"
    record ckpt files_fsync convnet - "$i" "$fsecs" 0 0 0 -
    record ckpt sha256 convnet - "$i" "$hsecs" 0 0 0 -
    echo "ckpt   same files, write + fsync: $fsecs s; sha256: $hsecs s" >&2
  done
  rm -rf "${tmp:?}/runs/$name"
  for ((k = 0; k < 5; k++)); do
    # dd's own report ("... copied, S s, ...") is taken after the fsync of conv=fsync.
    dsecs=$(dd if=/dev/zero of="$tmp/dd.bin" bs=1M count="$mib" conv=fsync 2>&1 |
            sed -n 's/.* copied, \([0-9.e-]*\) s,.*/\1/p')
    rm -f "$tmp/dd.bin"
    record ckpt dd convnet - "$i" "$dsecs" "$((mib * 1048576))" 0 0 "$mib"
    echo "ckpt   dd $mib MiB conv=fsync: $dsecs s" >&2
  done
done

# ---- RESULTS.md ---------------------------------------------------------------------------------------------------
machine=$tmp/machine.txt
{
  echo "date            $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "nproc           $(nproc)"
  echo "cpu             $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)"
  echo "memory          $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
  echo "kernel          $(uname -r)"
  echo "libtorch        $(dpkg-query -W -f='${Package} ${Version}' libtorch1.13 2>/dev/null || echo '?') (trainrun: $("$TRAINRUN" --version)); python3-torch $($PY -c 'import torch; print(torch.__version__)')"
  echo "trainrun build  $tr_info"
  echo "scratch fs      $(df -T "$tmp" | awk 'NR==2 {print $2" ("$1")"}')"
  echo "load average    $load_start at the start, $(cut -d' ' -f1-3 /proc/loadavg) at the end"
  echo "environment     $(env | grep -E '^(OPENBLAS|OMP|MKL|ATEN|ONEDNN|DNNL)_' | sort | tr '\n' ' ')"
  echo "pinned malloc   GLIBC_TUNABLES=$PINNED_MALLOC"
  echo "repetitions     main $REPS, pinned malloc $MALLOC_REPS, thread sweep $SWEEP_REPS ($SWEEP_STEPS steps, limit ${SWEEP_TIMEOUT} s a run), checkpoint $CKPT_REPS x 5 saves; timed steps: mlp_256 ${STEPS[mlp_256]} (warm-up ${WARM[mlp_256]}), convnet ${STEPS[convnet]} (${WARM[convnet]}), data_bound ${STEPS[data_bound]} (${WARM[data_bound]})"
  echo "script time     $(( $(date +%s) - t_start )) s"
} >"$machine"
$PY bench/report.py write "$records" "$machine" "$RESULTS"
cp "$records" "${RESULTS%.md}.tsv"
echo "wrote $RESULTS (raw records: ${RESULTS%.md}.tsv)" >&2
