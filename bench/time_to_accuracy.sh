#!/usr/bin/env bash
# Time to 0.90 test accuracy on Fashion-MNIST with the convnet (issue 8): trainrun (bench/configs/convnet_tta.yaml)
# vs PyTorch eager (bench/time_to_accuracy.py), same model, hyper-parameters, schedule and evaluation cadence (test
# set every 100 steps, 3 epochs), run alternately BENCH_TTA_REPS times (default 2), each under /usr/bin/time for its
# peak RSS. Training time excludes evaluation in both. Writes a Markdown table to bench/time_to_accuracy.md
# (BENCH_TTA_OUT), which bench/RESULTS.md quotes (bench/report.py).
# Needs build/trainrun (scripts/setup.sh) and /usr/bin/python3 with python3-torch.
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${BENCH_TTA_REPS:-2}; target=0.90; out=${BENCH_TTA_OUT:-bench/time_to_accuracy.md}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cp build/trainrun "$tmp/trainrun"
rows=()
for ((i = 1; i <= reps; i++)); do
  /usr/bin/time -f '%M %e' -o "$tmp/rss" "$tmp/trainrun" bench/configs/convnet_tta.yaml "run.dir=$tmp" \
    "run.name=t$i" >"$tmp/out" 2>&1 || { cat "$tmp/out" >&2; exit 1; }
  read -r rss wall <"$tmp/rss"
  # first eval record at or above the target; the train record of the same step carries the training time
  res=$(/usr/bin/python3 - "$tmp/t$i/metrics.jsonl" "$target" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
ev = [r for r in recs if r["type"] == "eval"]
# time_s is the run's elapsed training time, evaluations included: take out the evaluations logged before it
t = {r["step"]: r["time_s"] - sum(e["seconds"] for e in ev if e["step"] < r["step"])
     for r in recs if r["type"] == "train"}
hit = next((r for r in ev if r["accuracy"] >= float(sys.argv[2])), None)
print(f"{hit['step']} {t[hit['step']]:.1f}" if hit else "none nan", f"{ev[-1]['accuracy']:.4f}", f"{max(t.values()):.1f}")
PY
)
  read -r step secs final total <<<"$res"
  rows+=("| trainrun | $i | $step | $secs | $final | $total | $((rss / 1024)) | $wall |")
  echo "trainrun rep $i: $res, $rss KB" >&2
  /usr/bin/time -f '%M %e' -o "$tmp/rss" /usr/bin/python3 bench/time_to_accuracy.py --target "$target" >"$tmp/out" 2>&1 ||
    { cat "$tmp/out" >&2; exit 1; }
  read -r rss wall <"$tmp/rss"
  step=$(sed -n 's/^RESULT .* step=\([0-9a-z]*\) .*/\1/p' "$tmp/out")
  secs=$(sed -n 's/^RESULT .* train_s=\([0-9.na]*\) .*/\1/p' "$tmp/out")
  total=$(sed -n 's/^RESULT .*total_train_s=\([0-9.]*\).*/\1/p' "$tmp/out")
  final=$(grep '^EVAL' "$tmp/out" | tail -1 | sed 's/.*accuracy=\([0-9.]*\).*/\1/')
  rows+=("| PyTorch eager | $i | $step | $(printf '%.1f' "$secs") | $final | $(printf '%.1f' "$total") | $((rss / 1024)) | $wall |")
  echo "eager rep $i: step $step $secs s, final $final, $rss KB" >&2
done
{
echo "Time to $target test accuracy, convnet, 3 epochs, $(date -u '+%Y-%m-%d %H:%M UTC'), git HEAD $(git rev-parse --short HEAD), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| form | rep | first step >= $target | training s to it | final test acc | training s, 3 epochs | peak RSS MiB | process wall s |"
echo "|---|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
} >"$out"
cat "$out"
