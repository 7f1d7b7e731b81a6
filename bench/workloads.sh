# Sourced by the bench/ scripts (bash): the workloads of bench/configs/ and how trainrun's rate on one is read.
#   WARM[w]   warm-up steps before the timed window      BATCH[w]  the batch size of bench/configs/w.yaml
#   STEPS[w]  timed steps (x BENCH_SCALE, default 1)
# mlp_256: MLP 784-256-10; convnet: models/convnet.yaml; data_bound: linear 784-10 (bench/run.sh says more).
declare -A WARM=([mlp_256]=50 [convnet]=10 [data_bound]=50)
declare -A STEPS=([mlp_256]=$((2000 * ${BENCH_SCALE:-1})) [convnet]=$((120 * ${BENCH_SCALE:-1}))
                  [data_bound]=$((2000 * ${BENCH_SCALE:-1})))
declare -A BATCH=([mlp_256]=64 [convnet]=128 [data_bound]=1024)

# trainrun_rate BIN WORKLOAD RUNS_DIR NAME [OVERRIDE...] -> prints the steps/s of the timed window: WARM warm-up
# steps, then STEPS timed ones, read off metrics.jsonl by bench/report.py (the window bench/run.sh times). The run
# directory is removed afterwards; a failed run prints its stderr and exits the calling script with 1.
trainrun_rate() {
  local bin=$1 w=$2 dir=$3 name=$4
  shift 4
  "$bin" "bench/configs/$w.yaml" "train.max_steps=$((WARM[$w] + STEPS[$w]))" "log.every_steps=${WARM[$w]}" \
    "run.dir=$dir" "run.name=$name" "$@" >/dev/null 2>"$dir.err" ||
    { cat "$dir.err" >&2; echo "bench: $bin $w failed" >&2; exit 1; }
  /usr/bin/python3 bench/report.py trainrun "$dir/$name" "${WARM[$w]}" "${STEPS[$w]}" "${BATCH[$w]}" | cut -d' ' -f1
  rm -rf "${dir:?}/$name"
}
