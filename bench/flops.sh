#!/usr/bin/env bash
# Achieved FLOP/s of training and evaluation as a fraction of the machine's measured sgemm peak (issue 20), 1 vs 2
# intra-op threads, and precision bf16-mixed vs 32 on the convnet, written to bench/flops.md.
#   FLOPs: bench/flops.py count (multiply-adds of the model's linear and conv2d layers; training = forward +
#          weight gradients + input gradients). Peak: bench/flops.py peak (a 2048 x 2048 float32 torch.mm through
#          Debian's python3-torch, i.e. the same libtorch, OpenBLAS pinned to 1 thread as trainrun pins it, at the
#          same intra-op thread count as the trainrun run it is compared with).
#   Train: steps/s of trainrun over the steps after a warm-up (metrics.jsonl's time_s), x batch x train FLOPs.
#   Eval:  the test evaluation at the end (eval.test_at_end, 5000 test samples at the config's eval.batch_size):
#          samples / seconds of its record, x forward FLOPs.
# Every (workload, threads) pair runs once per repetition, all interleaved; medians.
#   bench/flops.sh       (FLOPS_REPS=3, FLOPS_WORKLOADS="mlp_256 convnet", TRAINRUN=build/trainrun)
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${FLOPS_REPS:-3}
WORKLOADS=${FLOPS_WORKLOADS:-mlp_256 convnet}
TRAINRUN=${TRAINRUN:-build/trainrun}
OUT=${FLOPS_OUT:-bench/flops.md}
PY=/usr/bin/python3
. bench/workloads.sh   # WARM, BATCH; this script times half of run.sh's steps:
declare -A STEPS=([mlp_256]=1000 [convnet]=60 [data_bound]=1000)
declare -A MODEL=([mlp_256]=bench/models/mlp_256.yaml [convnet]=models/convnet.yaml [data_bound]=bench/models/linear.yaml)
tmp=$(mktemp -d -p "${BENCH_TMP:-$PWD}" .flops-bench.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
: >"$tmp/rows.tsv"
# (workload threads precision) forms; bf16-mixed on the convnet at 1 thread
FORMS=()
for w in $WORKLOADS; do FORMS+=("$w 1 32" "$w 2 32"); done
[[ " $WORKLOADS " == *" convnet "* ]] && FORMS+=("convnet 1 bf16-mixed")
for i in $(seq 1 "$REPS"); do
  for p in "1 fp32" "2 fp32" "1 bf16"; do
    read -r th dt <<<"$p"
    printf 'peak\t%s\t%s\t%s\n' "$th" "$dt" "$(OPENBLAS_NUM_THREADS=1 nice $PY bench/flops.py peak "$th" 2048 "$dt")" \
      >>"$tmp/rows.tsv"
  done
  for f in "${FORMS[@]}"; do
    read -r w th prec <<<"$f"
    name=$w-$th-$prec-$i
    nice "$TRAINRUN" "bench/configs/$w.yaml" "threads=$th" "precision=$prec" \
      "train.max_steps=$((WARM[$w] + STEPS[$w]))" "log.every_steps=${WARM[$w]}" eval.test_at_end=true \
      data.test_subset=5000 "run.dir=$tmp/runs" "run.name=$name" >"$tmp/out" 2>"$tmp/err" ||
      { cat "$tmp/err" >&2; exit 1; }
    $PY - "$tmp/runs/$name/metrics.jsonl" "$w" "$th" "$prec" "${WARM[$w]}" >>"$tmp/rows.tsv" <<'PYEOF'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
train = [r for r in recs if r.get("type") == "train"]
warm = int(sys.argv[5])
t0 = next(r for r in train if r["step"] == warm)
t1 = train[-1]
test = [r for r in recs if r.get("type") == "eval" and r.get("split") == "test"][-1]
print("run", sys.argv[2], sys.argv[3], sys.argv[4], (t1["step"] - t0["step"]) / (t1["time_s"] - t0["time_s"]),
      test["samples"] / test["seconds"], test["accuracy"], sep="\t")
PYEOF
  done
done
for w in $WORKLOADS; do
  read -r _ fwd _ train < <($PY bench/flops.py count "${MODEL[$w]}")
  printf 'flops\t%s\t%s\t%s\t%s\n' "$w" "$fwd" "$train" "${BATCH[$w]}" >>"$tmp/rows.tsv"
done
$PY - "$tmp/rows.tsv" "$(git rev-parse --short HEAD)" "$(cat /proc/loadavg)" "$REPS" >"$OUT" <<'PYEOF'
import statistics as st, sys, datetime
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
peak = {(r[1], r[2]): [] for r in rows if r[0] == "peak"}
for r in rows:
    if r[0] == "peak":
        peak[(r[1], r[2])].append(float(r[3]))
peak = {k: st.median(v) for k, v in peak.items()}
flops = {r[1]: (int(r[2]), int(r[3]), int(r[4])) for r in rows if r[0] == "flops"}
runs = {}
for r in rows:
    if r[0] == "run":
        runs.setdefault((r[1], r[2], r[3]), []).append((float(r[4]), float(r[5]), float(r[6])))
print("# FLOP/s against the sgemm peak, bf16-mixed, and intra-op threads (bench/flops.sh)\n")
print(f"{datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC, git {sys.argv[2]}, load {sys.argv[3].split()[0:3]}, "
      f"{sys.argv[4]} repetitions -- **shared**: 2 cores with other jobs running; medians of interleaved runs; "
      "read the ratios.\n")
print(f"Peak, a 2048^3 torch.mm (OpenBLAS 1 thread, as trainrun pins it): float32 {peak[('1', 'fp32')] / 1e9:.1f} "
      f"GFLOP/s at 1 intra-op thread, {peak[('2', 'fp32')] / 1e9:.1f} at 2; under bf16 autocast (oneDNN) "
      f"{peak[('1', 'bf16')] / 1e9:.1f} at 1. Each form's fraction is of the peak of its own threads and precision.\n")
print("| workload | threads | precision | FLOPs/sample fwd, train | train steps/s | train GFLOP/s | of peak | "
      "eval samples/s | eval GFLOP/s | of peak | test acc. (5000) |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for (w, th, prec), v in runs.items():
    fwd, train, batch = flops[w]
    sps = st.median(x[0] for x in v)
    eps = st.median(x[1] for x in v)
    acc = st.median(x[2] for x in v)
    pk = peak[(th, "bf16" if prec == "bf16-mixed" else "fp32")]
    tf, ef = sps * batch * train, eps * fwd
    print(f"| {w} | {th} | {prec} | {fwd:,}, {train:,} | {sps:,.1f} | {tf / 1e9:.2f} | **{tf / pk:.3f}** | "
          f"{eps:,.0f} | {ef / 1e9:.2f} | **{ef / pk:.3f}** | {acc:.4f} |")
print()
for w in flops:
    a = st.median(x[0] for x in runs[(w, "1", "32")])
    b = st.median(x[0] for x in runs[(w, "2", "32")])
    print(f"- {w}: 2 threads / 1 thread = **{b / a:.2f}x** train steps/s")
if ("convnet", "1", "bf16-mixed") in runs:
    a = st.median(x[0] for x in runs[("convnet", "1", "32")])
    b = st.median(x[0] for x in runs[("convnet", "1", "bf16-mixed")])
    ea = st.median(x[1] for x in runs[("convnet", "1", "32")])
    eb = st.median(x[1] for x in runs[("convnet", "1", "bf16-mixed")])
    print(f"- convnet: bf16-mixed / float32 = **{b / a:.2f}x** train steps/s, **{eb / ea:.2f}x** eval samples/s")
PYEOF
cat "$OUT"
