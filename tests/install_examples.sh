#!/usr/bin/env bash
# install_examples.sh BUILD_DIR SOURCE_DIR -- `cmake --install` into a temporary prefix, then build every example in
# examples/ against it twice (pkg-config + cc, and CMake find_package(trainrun)), run them and check their output:
# the loss falls, a resumed custom loop repeats the uninterrupted one bit for bit, the config runner prints events,
# a TorchScript module trained from arrays predicts the test arrays (issue 13).
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

prefix=$tmp/prefix
cmake --install "$build" --prefix "$prefix" >"$tmp/install.log"
pc=$(find "$prefix" -name trainrun.pc)
[ -n "$pc" ] || fail "no trainrun.pc installed"
libdir=$(dirname "$(dirname "$pc")")
for f in "$prefix/include/trainrun/trainrun.h" "$prefix/include/trainrun/trainrun_version.h" "$libdir/libtrainrun.so" "$libdir/libtrainrun.a" \
         "$libdir/libtrainrun_shim.a" "$libdir/cmake/trainrun/trainrunConfig.cmake" \
         "$libdir/cmake/trainrun/trainrunConfigVersion.cmake" "$libdir/pkgconfig/trainrun-static.pc" \
         "$prefix/bin/trainrun"; do
  [ -e "$f" ] || fail "not installed: ${f#"$prefix"/}"
done
echo "installed: $(cd "$prefix" && find . -type f -o -type l | sort | tr '\n' ' ')"

# the installed command line runs from the prefix (libtorch found without LD_LIBRARY_PATH) and trains
(cd "$tmp" && env -u LD_LIBRARY_PATH "$prefix/bin/trainrun" "$src/configs/fashion_mnist_mlp.yaml" train.max_steps=3 \
   data.train_subset=600 data.val_size=100 eval.every_epoch=false eval.test_at_end=false log.progress=never \
   run.dir="$tmp/bin-runs" run.name=r >"$tmp/bin.out" 2>&1) || { cat "$tmp/bin.out"; fail "installed bin/trainrun"; }
grep -q '^steps           3' "$tmp/bin.out" || { cat "$tmp/bin.out"; fail "installed bin/trainrun: no 3 steps"; }
echo "bin/trainrun: $("$prefix/bin/trainrun" --version), trained 3 steps"

# libtrainrun.so exports the API and nothing else
bad=$(nm -D --defined-only "$libdir/libtrainrun.so" | awk '$2 ~ /^[TDBRV]$/ {print $3}' | grep -v '^trainrun_' || true)
[ -z "$bad" ] || fail "libtrainrun.so exports more than trainrun_*: $(echo "$bad" | head -5)"

# 1. pkg-config: consumers need no libtorch flags
export PKG_CONFIG_PATH=$libdir/pkgconfig
flags=$(pkg-config --cflags --libs trainrun)
echo "pkg-config --cflags --libs trainrun: $flags"
# (word by word: the prefix's own path may hold "torch", e.g. a build folder named build-torch2.11)
for f in $flags; do
  case "$f" in -ltorch*|-lc10*|*/libtorch*|*/libc10*|*/torch/include*|*/torch/lib*) fail "pkg-config flags mention libtorch: $flags" ;; esac
done
mkdir -p "$tmp/pc" "$tmp/cm"
for ex in minimal custom_loop run_config torchscript_predict; do
  # no -Wl,-rpath of our own: trainrun.pc's run path must find libtrainrun.so.0 in this prefix (issue 18)
  # shellcheck disable=SC2086
  cc -std=c99 -Wall -Wextra -pedantic -Werror "$src/examples/$ex.c" $flags -o "$tmp/pc/$ex"
done
# 1b. static archives, as the README says: the program needs no libtrainrun.so
mkdir -p "$tmp/st"
static_flags=$(pkg-config --cflags --libs trainrun-static)
echo "pkg-config --cflags --libs trainrun-static: $static_flags"
# shellcheck disable=SC2086
cc -std=c99 -Wall -Wextra -pedantic -Werror "$src/examples/minimal.c" $static_flags -o "$tmp/st/minimal" \
  || fail "static link of minimal with trainrun-static.pc"
if ldd "$tmp/st/minimal" | grep -q libtrainrun; then fail "the static build links libtrainrun.so"; fi
# 2. CMake: find_package(trainrun) -> trainrun::trainrun
cmake -S "$src/examples" -B "$tmp/cm" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_C_FLAGS="-Wall -Wextra -pedantic -Werror" >"$tmp/cm.log" || { cat "$tmp/cm.log"; fail "cmake configure"; }
cmake --build "$tmp/cm" >>"$tmp/cm.log" 2>&1 || { cat "$tmp/cm.log"; fail "cmake build"; }

# value of field $2 on the line of $1 that starts with $3
field() { awk -v key="$3" -v f="$2" 'index($0, key) == 1 {print $f; exit}' "$1"; }

for kind in pc cm; do
  bin=$tmp/$kind
  # minimal: the loss falls and the model learns the blobs
  mkdir -p "$tmp/$kind-minimal"
  "$bin/minimal" "$tmp/$kind-minimal" >"$tmp/$kind-minimal.out" 2>"$tmp/$kind-minimal.err" \
    || { rc=$?; cat "$tmp/$kind-minimal.err"; fail "$kind minimal exited $rc"; }
  first=$(field "$tmp/$kind-minimal.out" 4 "step 1 loss")
  last=$(field "$tmp/$kind-minimal.out" 4 "step 150 loss")
  acc=$(field "$tmp/$kind-minimal.out" 3 "test accuracy")
  echo "$kind minimal: loss step 1 $first -> step 150 $last, test accuracy $acc"
  awk -v a="$first" -v b="$last" -v c="$acc" 'BEGIN {exit !(a > 1.0 && b < 0.5 * a && c > 0.9)}' \
    || fail "$kind minimal: loss $first -> $last, accuracy $acc"

  # custom_loop: uninterrupted, and stopped at 25 then resumed; steps 26..60 must be equal to the last digit
  "$bin/custom_loop" "$tmp/$kind-whole" >"$tmp/$kind-whole.out" || fail "$kind custom_loop"
  "$bin/custom_loop" "$tmp/$kind-parts" --stop-at 25 >"$tmp/$kind-part1.out" || fail "$kind custom_loop --stop-at"
  "$bin/custom_loop" "$tmp/$kind-parts" >"$tmp/$kind-part2.out" || fail "$kind custom_loop resume"
  grep -q '^resumed at step 25$' "$tmp/$kind-part2.out" || fail "$kind custom_loop did not resume at step 25"
  diff <(grep '^step' "$tmp/$kind-whole.out" | sed -n '26,60p') <(grep '^step' "$tmp/$kind-part2.out") \
    || fail "$kind custom_loop: the resumed loss trace differs from the uninterrupted one"
  # ... and killed by SIGKILL after step 25 (no clean-up), then started again: it resumes from its newest
  # checkpoint (step 20 of checkpoint.every_steps 10, or a later time-based one) and repeats the whole run's steps
  set +e
  "$bin/custom_loop" "$tmp/$kind-killed" --kill-at 25 >"$tmp/$kind-killed1.out"
  krc=$?
  set -e
  [ "$krc" = 137 ] || fail "$kind custom_loop --kill-at 25 exited $krc, not 137 (SIGKILL)"
  "$bin/custom_loop" "$tmp/$kind-killed" >"$tmp/$kind-killed2.out" || fail "$kind custom_loop resume after SIGKILL"
  at=$(sed -n 's/^resumed at step \([0-9]*\)$/\1/p' "$tmp/$kind-killed2.out")
  [ -n "$at" ] && [ "$at" -ge 20 ] && [ "$at" -le 25 ] || fail "$kind custom_loop after SIGKILL resumed at '$at', not 20..25"
  diff <(grep '^step' "$tmp/$kind-whole.out" | sed -n "$((at + 1)),60p") <(grep '^step' "$tmp/$kind-killed2.out") \
    || fail "$kind custom_loop: the loss trace after SIGKILL and resume differs from the uninterrupted one"
  # the validation passes (steps 15, 30, 45, 60) and their model selection resume too: the top-k set and the
  # early-stopping counters come back from the checkpoint, so the passes after each resume say what the whole
  # loop's said, "(best)" marks included
  [ "$(grep -c '^val step ' "$tmp/$kind-whole.out")" = 4 ] || fail "$kind custom_loop: not 4 validation passes"
  for out in part2 killed2; do
    diff <(grep '^val step \(30\|45\|60\) ' "$tmp/$kind-whole.out") <(grep '^val step ' "$tmp/$kind-$out.out") \
      || fail "$kind custom_loop: the validation passes after the resume ($out) differ from the uninterrupted ones"
  done
  grep -q '^val step 15 .* (best)$' "$tmp/$kind-whole.out" || fail "$kind custom_loop: the first validation pass is no best"
  grep -q '^saved .*/checkpoints/step-0000000015 (best, [1-9][0-9]* bytes)$' "$tmp/$kind-whole.out" \
    || fail "$kind custom_loop: no checkpoint event for step 15's save (reason best: it entered save_top_k's set)"
  # best.json names the two best by val_loss; keep_last 2 pruned the rest but not those
  beststeps=$(/usr/bin/python3 -c 'import json,sys; print(" ".join(str(e["step"]) for e in json.load(open(sys.argv[1]))["top_k"]))' "$tmp/$kind-whole/best.json") \
    || fail "$kind custom_loop: no readable best.json"
  bestwant=$(sed -n 's/^val step \([0-9]*\) loss \([^ ]*\) .*/\2 \1/p' "$tmp/$kind-whole.out" | sort -g | head -2 | cut -d' ' -f2 | tr '\n' ' ' | sed 's/ $//')
  [ "$beststeps" = "$bestwant" ] || fail "$kind custom_loop: best.json's top_k is '$beststeps', the two lowest val_loss are at '$bestwant'"
  for s in $beststeps; do
    [ -d "$tmp/$kind-whole/checkpoints/step-$(printf %010d "$s")" ] || fail "$kind custom_loop: best step $s was pruned"
  done
  echo "$kind custom_loop: validation passes $(sed -n 's/^val step \([0-9]*\) loss \([^ ]*\) .*/\1:\2/p' "$tmp/$kind-whole.out" | tr '\n' ' ')top_k steps $beststeps"
  # the EMA, the schedule and the watchdog ran through the public calls
  grep -q '^watchdog baseline [0-9]* bytes at step 15$' "$tmp/$kind-whole.out" || fail "$kind custom_loop: no watchdog baseline at step 15 (the first sample after the first save)"
  grep -q '^step 1 loss .* lr 0.002$' "$tmp/$kind-whole.out" || fail "$kind custom_loop: step 1 lr is not warm-up's 0.01 * 1/5"
  grep -q '^eval loss .*; EMA weights loss ' "$tmp/$kind-whole.out" || fail "$kind custom_loop: no EMA evaluation"
  # the trainer's checkpoint events: the policy's saves name their reason, the --stop-at save is a stop request's
  grep -q '^saved .*/checkpoints/step-0000000010 (steps, [1-9][0-9]* bytes)$' "$tmp/$kind-whole.out" \
    || fail "$kind custom_loop: no checkpoint event for step 10's save (reason steps)"
  grep -q '^saved .*/checkpoints/step-0000000025 (signal, [1-9][0-9]* bytes)$' "$tmp/$kind-part1.out" \
    || fail "$kind custom_loop: no checkpoint event for the --stop-at save (a stop request: reason signal)"
  # the loop's log is a run's: a train record every 10 steps, and after each resume metrics.csv (which applies
  # the resume rule) holds what the uninterrupted loop's holds
  [ "$(grep -c '"type":"train"' "$tmp/$kind-whole/metrics.jsonl")" = 6 ] || fail "$kind custom_loop: not 6 train records"
  csvcol() { awk -F, -v c="$2" 'NR == 1 {for (i = 1; i <= NF; i++) if ($i == c) k = i; next} {print $1 ":" $k}' "$1"; }
  for out in parts killed; do
    diff <(csvcol "$tmp/$kind-whole/metrics.csv" train_loss) <(csvcol "$tmp/$kind-$out/metrics.csv" train_loss) \
      || fail "$kind custom_loop: metrics.csv after the resume ($out) differs from the uninterrupted loop's"
  done
  # data-parallel under torchrun (--standalone: a free port on this host): two ranks of 16 samples a step, rank 0
  # writing the directory and printing.
  # --redirects 1 --tee 1: Debian's torchrun (1.13 under Python 3.11) fails on its own defaults (multinode.sh)
  if [ -x /usr/bin/torchrun ]; then
    /usr/bin/torchrun --no_python --standalone --nproc_per_node 2 --redirects 1 --tee 1 \
      --log_dir "$tmp/$kind-ddp-logs" "$bin/custom_loop" "$tmp/$kind-ddp" >/dev/null 2>"$tmp/$kind-ddp.err" \
      || { cat "$tmp/$kind-ddp.err"; fail "$kind custom_loop under torchrun --nproc_per_node 2"; }
    find "$tmp/$kind-ddp-logs" -path '*/0/stdout.log' -exec cat {} + >"$tmp/$kind-ddp.out"
    [ "$(grep -c '^step ' "$tmp/$kind-ddp.out")" = 60 ] || fail "$kind custom_loop under torchrun: not 60 steps from rank 0"
    [ -d "$tmp/$kind-ddp/checkpoints/step-0000000060" ] || fail "$kind custom_loop under torchrun: no checkpoint of step 60"
    ddp_first=$(field "$tmp/$kind-ddp.out" 4 "step 1 loss")
    ddp_last=$(field "$tmp/$kind-ddp.out" 4 "step 60 loss")
    awk -v a="$ddp_first" -v b="$ddp_last" 'BEGIN {exit !(b < 0.5 * a)}' \
      || fail "$kind custom_loop under torchrun: loss $ddp_first -> $ddp_last"
    echo "$kind custom_loop under torchrun, 2 ranks: loss step 1 $ddp_first -> step 60 $ddp_last"
  fi
  first=$(field "$tmp/$kind-whole.out" 4 "step 1 loss")
  last=$(field "$tmp/$kind-whole.out" 4 "step 60 loss")
  echo "$kind custom_loop: loss step 1 $first -> step 60 $last; resumed at 25 (stopped) and at $at (SIGKILL after 25), the steps after each identical"
  grep '^eval loss\|^memory ' "$tmp/$kind-whole.out"
  awk -v a="$first" -v b="$last" 'BEGIN {exit !(b < 0.5 * a)}' || fail "$kind custom_loop: loss $first -> $last"

  # run_config: a config file on Fashion-MNIST, its events printed
  "$bin/run_config" "$src/configs/fashion_mnist_mlp.yaml" data.train_subset=2000 data.val_size=500 \
    data.test_subset=500 train.max_steps=40 eval.every_steps=20 run.dir="$tmp/$kind-runs" \
    checkpoint.every_steps=20 watchdog.warmup_steps=5 watchdog.every_steps=5 \
    >"$tmp/$kind-run.out" 2>"$tmp/$kind-run.err" || { cat "$tmp/$kind-run.err"; fail "$kind run_config"; }
  for want in "event step 40 " "event eval val step 20" "event eval test step 40" \
              "event checkpoint step 20 reason steps" "event checkpoint step 40 reason steps" \
              "event watchdog baseline" "summary status success steps 40"; do
    grep -q "^$want" "$tmp/$kind-run.out" || { cat "$tmp/$kind-run.out"; fail "$kind run_config: no '$want'"; }
  done
  echo "$kind run_config: $(grep -c '^event step' "$tmp/$kind-run.out") step events, $(grep '^summary' "$tmp/$kind-run.out")"
  # the run's log lines go to the program's log function, not to its stderr (issue 18); --quiet drops them
  [ ! -s "$tmp/$kind-run.err" ] || { cat "$tmp/$kind-run.err"; fail "$kind run_config wrote to stderr"; }
  grep -q '^log message trainrun .*parameters' "$tmp/$kind-run.out" || fail "$kind run_config: no start-up log line"
  grep -q '^log progress .*step 40/40' "$tmp/$kind-run.out" || fail "$kind run_config: no progress log line"
  "$bin/run_config" --quiet "$src/configs/fashion_mnist_mlp.yaml" data.train_subset=600 data.val_size=100 \
    eval.test_at_end=false train.max_steps=3 run.dir="$tmp/$kind-quiet" >"$tmp/$kind-quiet.out" \
    2>"$tmp/$kind-quiet.err" || fail "$kind run_config --quiet"
  [ ! -s "$tmp/$kind-quiet.err" ] || { cat "$tmp/$kind-quiet.err"; fail "$kind run_config --quiet wrote to stderr"; }
  if grep -q '^log ' "$tmp/$kind-quiet.out"; then fail "$kind run_config --quiet printed log lines"; fi
  # torchscript_predict: the TorchScript MLP (models/mlp.pt.gz) learns the toy images and predicts them
  "$bin/torchscript_predict" "$src/models/mlp.pt.gz" >"$tmp/$kind-ts.out" 2>"$tmp/$kind-ts.err" \
    || { rc=$?; cat "$tmp/$kind-ts.err"; fail "$kind torchscript_predict exited $rc"; }
  first=$(field "$tmp/$kind-ts.out" 4 "step 1 loss")
  last=$(field "$tmp/$kind-ts.out" 4 "step 100 loss")
  acc=$(field "$tmp/$kind-ts.out" 3 "test accuracy")
  [ "$(grep -c '^image [0-4]: predicted [0-9] (true [0-9])$' "$tmp/$kind-ts.out")" = 5 ] \
    || { cat "$tmp/$kind-ts.out"; fail "$kind torchscript_predict: no 5 prediction lines"; }
  echo "$kind torchscript_predict: loss step 1 $first -> step 100 $last, test accuracy $acc"
  awk -v a="$first" -v b="$last" -v c="$acc" 'BEGIN {exit !(a > 1.5 && b < 0.25 * a && c > 0.9)}' \
    || fail "$kind torchscript_predict: loss $first -> $last, accuracy $acc"
done
# the static build trains the same: same losses as the shared one
mkdir -p "$tmp/st-minimal"
env -u LD_LIBRARY_PATH "$tmp/st/minimal" "$tmp/st-minimal" >"$tmp/st-minimal.out" 2>"$tmp/st-minimal.err" \
  || { rc=$?; cat "$tmp/st-minimal.err"; fail "static minimal exited $rc"; }
diff <(grep '^step' "$tmp/pc-minimal.out") <(grep '^step' "$tmp/st-minimal.out") \
  || fail "the static and shared builds of minimal print different losses"
echo "static minimal: $(grep -c '^step' "$tmp/st-minimal.out") steps, losses equal to the shared build's"
# the two builds are the same program: same losses
diff <(grep '^step' "$tmp/pc-minimal.out") <(grep '^step' "$tmp/cm-minimal.out") \
  || fail "the pkg-config and CMake builds of minimal print different losses"
diff "$tmp/pc-ts.out" "$tmp/cm-ts.out" \
  || fail "the pkg-config and CMake builds of torchscript_predict print different losses or predictions"
echo "install_examples: OK"
