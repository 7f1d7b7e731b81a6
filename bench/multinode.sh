#!/usr/bin/env bash
# Two nodes on c10d (network namespaces joined by a veth pair; root): runs tests/multinode.sh's four cases REPEAT
# times each (default 3) and writes bench/MULTINODE.md with every figure they print -- the 4-rank vs 1-process
# parameter differences, wall times, the elastic restart's kill -> survivors gone -> restart -> first step times, and
# the cut link's time to the survivors' exit.
# Usage: bench/multinode.sh [BUILD_DIR] [REPEAT]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
repeat=${2:-3}
out=bench/MULTINODE.md
log=$(mktemp)
trap 'rm -f "$log"' EXIT
{
  echo "# Two nodes on c10d: figures from tests/multinode.sh"
  echo
  echo "Written by \`bench/multinode.sh $build $repeat\` on $(nproc) cores, $(date -u +%Y-%m-%d)."
  echo "Two network namespaces joined by a veth pair, two ranks each; Debian's libtorch $(dpkg-query -W -f='${Version}' libtorch-dev 2>/dev/null || echo '?'),"
  echo "torchrun from python3-torch $(dpkg-query -W -f='${Version}' python3-torch 2>/dev/null || echo '?'). Each case ran $repeat times."
  for c in launcher torchrun elastic linkcut; do
    echo
    echo "## $c"
    echo
    echo '```'
    for i in $(seq 1 "$repeat"); do
      t0=$(date +%s.%N)
      if bash tests/multinode.sh "$build/trainrun" . "$c" >"$log" 2>&1; then status=pass; else status="FAIL ($?)"; fi
      t1=$(date +%s.%N)
      echo "run $i: $status, $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s for the whole case"
      grep -v '^PASS' "$log" | sed 's/^/  /'
    done
    echo '```'
  done
} >"$out"
echo "wrote $out"
