#!/usr/bin/env bash
# tests/fuzz/torchscript.sh -- fuzz the TorchScript archive loading path for N seconds (nice'd): mutated archives
# from the committed seeds (tests/torchscript/*.pt, tests/data/lm/tiny_gpt.pt, and tests/fuzz/corpus/torchscript/*.pt,
# the regression inputs of findings), each loaded in a child process by BUILD/torchscript_archive_fuzz.
#
#   tests/fuzz/torchscript.sh [--seconds N] [--build DIR] [--out DIR] [--seed S]
#
# Defaults: 600 s, build/, findings into DIR/fuzz-torchscript/. The last line gives the executions and outcomes;
# exit 1 when an input crashed or hung a child (kept as OUT/{crash,hang}-SIG-N.pt with its last message).
set -u
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
seconds=600 build="$src/build" out="" seed=""
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    *) echo "usage: $0 [--seconds N] [--build DIR] [--out DIR] [--seed S]" >&2; exit 2 ;;
  esac
done
out=${out:-$build/fuzz-torchscript}
bin="$build/torchscript_archive_fuzz"
[ -x "$bin" ] || { echo "fuzz: $bin missing: build the project first (scripts/setup.sh)"; exit 2; }
mkdir -p "$out"
seeds=("$src"/tests/torchscript/*.pt "$src"/tests/data/lm/tiny_gpt.pt)
for f in "$here"/corpus/torchscript/*.pt; do [ -f "$f" ] && seeds+=("$f"); done
args=(--seconds "$seconds" --out "$out")
[ -n "$seed" ] && args+=(--seed "$seed")
exec nice "$bin" "${args[@]}" "${seeds[@]}"
