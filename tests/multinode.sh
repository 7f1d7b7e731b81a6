#!/usr/bin/env bash
# multinode.sh TRAINRUN SOURCE_DIR CASE -- data-parallel training across two "machines": two network namespaces
# joined by a veth pair (node 0 at 10.213.0.1, node 1 at 10.213.0.2, each with only that link and its loopback),
# two ranks on each, GLOO_SOCKET_IFNAME set per node, the run directory on a path both see (one file system, as a
# shared one would be). CASE is one of:
#   launcher  trainrun's launcher on each node (--nnodes 2 --node-rank K --master-addr 10.213.0.1 --master-port P):
#             the 4-rank run's parameters after 40 steps equal a 1-process run with 4x the batch within the bounds
#             the README gives for 2 ranks (relative ||a-b||/||a|| <= 1e-6, largest element <= 1e-5)
#   torchrun  the same with Debian's torchrun (python3-torch) on each node: --no_python --nnodes 2
#             --nproc_per_node 2 --rdzv_backend c10d, the rendezvous at node 0
#   elastic   torchrun --max_restarts 1: one worker is SIGKILLed after step 25 of 40 (checkpoints every 10 steps);
#             torchrun restarts the group, the ranks resume from step 20, and the final parameters and optimizer
#             state equal an uninterrupted run's byte for byte (deterministic: true, Gloo); prints the time from
#             the kill to every other old worker's exit and from the restart to the first step
#   linkcut   node 1's link is cut (ip link set ... down) mid-run: node 0's ranks exit with code 9 within
#             dist.timeout_seconds (10 s) naming ranks 2 and 3 as lost, node 1's name the store; every checkpoint
#             taken before the cut stays, and with the link back the next start resumes from the newest one
# Needs root (ip netns); exits 77 (ctest: skipped), saying why, where namespaces cannot be made or torchrun or the
# data is missing. Everything it makes (namespaces, /etc/netns/NAME, the temporary directory) is removed on exit.
set -uo pipefail
trainrun=$(readlink -f "$1")
src=$(cd "$2" && pwd)
case_=$3
skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }
data=/usr/share/datasets/fashion-mnist

[ "$(id -u)" -eq 0 ] || skip "network namespaces need root (ip netns add); run as root to test two nodes"
command -v ip >/dev/null || skip "no ip command (iproute2)"
[ -d "$data" ] || skip "no Fashion-MNIST at $data (Debian's dataset-fashion-mnist)"
torchrun=/usr/bin/torchrun
if [ "$case_" = torchrun ] || [ "$case_" = elastic ]; then
  [ -x "$torchrun" ] || skip "no $torchrun (Debian's python3-torch)"
  command -v unshare >/dev/null || skip "no unshare (util-linux): torchrun needs a host name per node"
fi

id_=$$
ns=("trn${id_}n0" "trn${id_}n1")
veth=("trv${id_}a" "trv${id_}b")
addr=(10.213.0.1 10.213.0.2)
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  for n in "${ns[@]}"; do
    for p in $(ip netns pids "$n" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
    ip netns del "$n" 2>/dev/null
    rm -rf "/etc/netns/$n"
  done
  rm -rf "$tmp"
}
trap cleanup EXIT

ip netns add "${ns[0]}" 2>"$tmp/err" || skip "cannot create a network namespace: $(cat "$tmp/err")"
ip netns add "${ns[1]}" || fail "second namespace"
ip link add "${veth[0]}" netns "${ns[0]}" type veth peer name "${veth[1]}" netns "${ns[1]}" 2>"$tmp/err" ||
  skip "cannot create a veth pair: $(cat "$tmp/err")"
for k in 0 1; do
  ip -n "${ns[$k]}" addr add "${addr[$k]}/24" dev "${veth[$k]}" || fail "address on node $k"
  ip -n "${ns[$k]}" link set "${veth[$k]}" up || fail "link up on node $k"
  ip -n "${ns[$k]}" link set lo up || fail "loopback on node $k"
  # torchrun's c10d rendezvous tells the workers group rank 0's host name: one per node (unshare --uts below),
  # resolved on both (ip netns exec binds /etc/netns/NAME/hosts over /etc/hosts)
  mkdir -p "/etc/netns/${ns[$k]}"
  printf '127.0.0.1 localhost\n%s trnode0\n%s trnode1\n' "${addr[0]}" "${addr[1]}" >"/etc/netns/${ns[$k]}/hosts"
done
# node 1 reaches node 0: a TCP connect to a port nobody serves is refused (not timed out)
reach() {
  local o
  o=$(ip netns exec "${ns[1]}" timeout 2 bash -c "exec 3<>/dev/tcp/${addr[0]}/9" 2>&1)
  [[ $o == *refused* ]]
}
for _ in $(seq 1 50); do reach && break; sleep 0.1; done # the veth's carrier comes up within a moment
reach || fail "node 1 cannot reach node 0 over the veth pair"

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }

# The config: a 3200-sample subset (50 steps of 64 a global epoch), the MLP of tests/test_dist.c, SGD with momentum.
cat >"$tmp/mlp.yaml" <<'EOF'
input: [1, 28, 28]
layers:
  - flatten
  - linear: {in: 784, out: 64}
  - relu
  - linear: {in: 64, out: 10}
EOF
cat >"$tmp/run.yaml" <<EOF
seed: 3
deterministic: true
data: {root: $data, train_subset: 3200, val_size: 0}
model: {spec: mlp.yaml}
optim: {name: sgd, lr: 0.02, momentum: 0.9}
train: {max_steps: 40, batch_size: 16}
eval: {test_at_end: false}
log: {every_steps: 1, progress: never}
checkpoint: {every_seconds: 0, every_steps: 10, keep_last: 10}
watchdog: {enabled: false}
dist: {timeout_seconds: 30}
run: {dir: $tmp}
EOF
cfg=$tmp/run.yaml
ckpt() { echo "$tmp/$1/checkpoints/step-$(printf %010d "$2")"; }

# node K runs "$@" in its namespace, GLOO_SOCKET_IFNAME its link, host name trnodeK, output in LOG; its pid: $last
on_node() {
  local k=$1 log=$2
  shift 2
  ip netns exec "${ns[$k]}" unshare --uts env GLOO_SOCKET_IFNAME="${veth[$k]}" NODE_NAME="trnode$k" \
    sh -c 'hostname "$NODE_NAME" && exec "$@"' sh "$@" >"$log" 2>&1 &
  pids+=($!)
  last=$!
}
launcher_node() { # k run_name extra...
  local k=$1 name=$2
  shift 2
  on_node "$k" "$tmp/$name.node$k.log" "$trainrun" --nproc 2 --nnodes 2 --node-rank "$k" --master-addr "${addr[0]}" \
    --master-port 29511 "$cfg" run.name="$name" train.batch_size=16 "$@"
}
# torchrun on node K; the worker is $tmp/worker.sh (it records its pid, then runs trainrun). Debian's torchrun
# (1.13 under Python 3.11) fails on its own defaults --redirects 0 --tee 0: Std.from_str("0") is None there, since
# Python 3.11 iterates an IntFlag without its zero and multi-bit members; 1 (stdout) works, so stdout is tee'd into
# --log_dir and to the console, stderr goes to the console as it would.
cat >"$tmp/worker.sh" <<EOF
#!/bin/sh
echo \$\$ >"$tmp/pid.attempt\${TORCHELASTIC_RESTART_COUNT:-0}.rank\$RANK"
if [ "\${KILL_RANK:-}" = "\$RANK" ] && [ "\${TORCHELASTIC_RESTART_COUNT:-0}" = 0 ]; then
  export TRAINRUN_KILL_AT_STEP=\$KILL_STEP
fi
exec "$trainrun" "\$@"
EOF
chmod +x "$tmp/worker.sh"
torchrun_node() { # k run_name max_restarts extra...
  local k=$1 name=$2 restarts=$3
  shift 3
  on_node "$k" "$tmp/$name.node$k.log" "$torchrun" --nnodes 2 --nproc_per_node 2 --rdzv_backend c10d \
    --rdzv_endpoint "${addr[0]}:29400" --rdzv_conf "is_host=$((k == 0))" --rdzv_id "trainrun-$id_-$name" \
    --max_restarts "$restarts" \
    --monitor_interval 1 --redirects 1 --tee 1 --log_dir "$tmp/torchrun-logs/$name.node$k" \
    --no_python "$tmp/worker.sh" "$cfg" run.name="$name" train.batch_size=16 "$@"
}
wait_ok() { # name pid...: every pid exits 0
  local name=$1 p code
  shift
  for p in "$@"; do
    wait "$p"
    code=$?
    [ "$code" -eq 0 ] || { tail -n 40 "$tmp/$name".node*.log >&2; fail "$name: pid $p exited $code"; }
  done
}
reference() { # the one process with the global batch (4 x 16), on the host
  "$trainrun" "$cfg" run.name=one train.batch_size=64 >"$tmp/one.log" 2>&1 || { cat "$tmp/one.log" >&2; fail "1-process run"; }
}
expect_equal_to_one() { # name
  local out
  out=$(python3 "$src/tests/multinode_params.py" "$(ckpt one 40)/model.safetensors" "$(ckpt "$1" 40)/model.safetensors" \
    --rtol-l2 1e-6 --rtol-max 1e-5) || fail "$1: 4 ranks on 2 nodes vs 1 x batch 64 after 40 steps: $out"
  grep -q '"world_size":4' "$tmp/$1/summary.json" || fail "$1: summary.json does not say world_size 4"
  echo "$1: 2 nodes x 2 ranks x batch 16 vs 1 process x batch 64, parameters after 40 steps: $out"
}

case "$case_" in
launcher)
  reference
  t0=$(now)
  launcher_node 0 four; a=$last
  launcher_node 1 four; b=$last
  wait_ok four "$a" "$b"
  echo "launcher: 2 nodes x 2 ranks, 40 steps: $(elapsed "$t0" "$(now)") s wall (rendezvous, data, training, checkpoints)"
  grep -q "rank 0 of 4: joining the process group at ${addr[0]}:29511" "$tmp/four.node0.log" ||
    fail "node 0 did not say it joined at ${addr[0]}: $(head -5 "$tmp/four.node0.log")"
  expect_equal_to_one four
  ;;
torchrun)
  reference
  t0=$(now)
  torchrun_node 0 tr 0; a=$last
  torchrun_node 1 tr 0; b=$last
  wait_ok tr "$a" "$b"
  echo "torchrun: 2 nodes x 2 ranks, 40 steps: $(elapsed "$t0" "$(now)") s wall (python start-up, rendezvous, training)"
  grep -q "of 4: joining the process group at trnode[01]:" "$tmp"/tr.node*.log ||
    fail "torchrun's workers did not join at a node's name: $(grep -h joining "$tmp"/tr.node*.log)"
  expect_equal_to_one tr
  ;;
elastic)
  # the uninterrupted run: trainrun's launcher, the same 4 ranks (numerics do not depend on the launcher)
  launcher_node 0 whole; a=$last
  launcher_node 1 whole; b=$last
  wait_ok whole "$a" "$b"
  export KILL_RANK=3 KILL_STEP=25
  torchrun_node 0 el 1; a=$last
  torchrun_node 1 el 1; b=$last
  unset KILL_RANK KILL_STEP
  # watch: rank 3's first worker disappearing (the kill), every other first worker gone, the restarted workers
  # starting, and the first step after the resume in metrics.jsonl (rank 0 logs every step)
  t_kill="" t_gone="" t_restart="" t_first=""
  for _ in $(seq 1 3000); do
    t=$(now)
    if [ -z "$t_kill" ] && [ -f "$tmp/pid.attempt0.rank3" ] && ! kill -0 "$(cat "$tmp/pid.attempt0.rank3")" 2>/dev/null; then
      t_kill=$t
    fi
    if [ -n "$t_kill" ] && [ -z "$t_gone" ]; then
      alive=0
      for r in 0 1 2; do kill -0 "$(cat "$tmp/pid.attempt0.rank$r" 2>/dev/null || echo 0)" 2>/dev/null && alive=1; done
      [ "$alive" -eq 0 ] && t_gone=$t
    fi
    if [ -z "$t_restart" ] && ls "$tmp"/pid.attempt1.rank* >/dev/null 2>&1; then t_restart=$t; fi
    if [ -n "$t_restart" ] && [ -z "$t_first" ] &&
       awk '/"type":"resume"/ {r = 1; next} r && /"type":"train"/ {f = 1} END {exit !f}' "$tmp/el/metrics.jsonl" 2>/dev/null; then
      t_first=$t
    fi
    [ -n "$t_first" ] && break
    kill -0 "$a" 2>/dev/null || kill -0 "$b" 2>/dev/null || break
    sleep 0.02
  done
  wait_ok el "$a" "$b"
  [ -n "$t_kill" ] && [ -n "$t_gone" ] && [ -n "$t_restart" ] && [ -n "$t_first" ] ||
    fail "elastic: kill '$t_kill', others gone '$t_gone', restart '$t_restart', first step '$t_first'"
  grep -q '"type":"resume","step":20' "$tmp/el/metrics.jsonl" || fail "elastic: no resume from step 20 in metrics.jsonl"
  # the other node's ranks failed their collective at once, and name the killed rank
  lost=$(grep -h "failed on rank [0-9]*: rank 3 was lost\|failed on rank [0-9]*: ranks [0-9, ]*3 were lost" "$tmp"/el.node*.log)
  [ -n "$lost" ] || { grep -h "failed on rank" "$tmp"/el.node*.log >&2; fail "elastic: no rank named rank 3 as lost"; }
  for f in model optimizer; do
    out=$(python3 "$src/tests/multinode_params.py" "$(ckpt whole 40)/$f.safetensors" "$(ckpt el 40)/$f.safetensors" \
      --identical) || fail "elastic: $f.safetensors after the restart differs from the uninterrupted run's: $out"
  done
  cmp -s "$(ckpt whole 40)/model.safetensors" "$(ckpt el 40)/model.safetensors" || fail "elastic: model files differ"
  echo "elastic: rank 3 SIGKILLed after step 25; torchrun restarted the group once; resumed from step 20; step 40's"
  echo "  model.safetensors and optimizer.safetensors byte-identical to the uninterrupted run's"
  echo "  kill -> every other worker exited: $(elapsed "$t_kill" "$t_gone") s; kill -> restarted workers started:" \
    "$(elapsed "$t_kill" "$t_restart") s; restart -> first step: $(elapsed "$t_restart" "$t_first") s" \
    "(torchrun --monitor_interval 1)"
  echo "$lost" | head -n 2 | sed 's/^/  /'
  ;;
linkcut)
  timeout=10
  launcher_node 0 cut train.max_steps=1000000 dist.timeout_seconds=$timeout checkpoint.every_steps=20; a=$last
  launcher_node 1 cut train.max_steps=1000000 dist.timeout_seconds=$timeout checkpoint.every_steps=20; b=$last
  for _ in $(seq 1 3000); do [ -d "$(ckpt cut 40)" ] && break; sleep 0.02; done
  [ -d "$(ckpt cut 40)" ] || { tail "$tmp"/cut.node*.log >&2; fail "linkcut: no checkpoint at step 40"; }
  t_cut=$(now)
  ip -n "${ns[1]}" link set "${veth[1]}" down || fail "cutting node 1's link"
  t_a="" t_b=""
  for _ in $(seq 1 3000); do
    [ -z "$t_a" ] && ! kill -0 "$a" 2>/dev/null && t_a=$(now)
    [ -z "$t_b" ] && ! kill -0 "$b" 2>/dev/null && t_b=$(now)
    [ -n "$t_a" ] && [ -n "$t_b" ] && break
    sleep 0.02
  done
  wait "$a"; code_a=$?
  wait "$b"; code_b=$?
  before=$(ls "$tmp/cut/checkpoints" | grep '^step-' | sort | tail -n 1)
  echo "linkcut: node 1's link cut after step 40+ (dist.timeout_seconds $timeout):"
  echo "  node 0's ranks (the survivors) exited $code_a after $(elapsed "$t_cut" "$t_a") s;" \
    "node 1's exited $code_b after $(elapsed "$t_cut" "$t_b") s; newest checkpoint $before"
  grep -h "were lost\|was lost\|has not answered" "$tmp"/cut.node*.log | sed 's/^/  /' | head -n 4
  [ "$code_a" -eq 9 ] || { cat "$tmp/cut.node0.log" >&2; fail "linkcut: node 0 exited $code_a, not 9"; }
  [ "$code_b" -eq 9 ] || { cat "$tmp/cut.node1.log" >&2; fail "linkcut: node 1 exited $code_b, not 9"; }
  awk -v a="$t_cut" -v b="$t_a" -v t="$timeout" 'BEGIN { exit !(b - a <= t) }' ||
    fail "linkcut: node 0's ranks took $(elapsed "$t_cut" "$t_a") s, more than dist.timeout_seconds ($timeout s)"
  for r in 0 1; do
    grep -q "failed on rank $r: ranks 2, 3 were lost (no heartbeat for" "$tmp/cut.node0.log" ||
      { cat "$tmp/cut.node0.log" >&2; fail "linkcut: rank $r did not name ranks 2 and 3 as lost"; }
  done
  grep -q "has not answered this rank for" "$tmp/cut.node1.log" ||
    { cat "$tmp/cut.node1.log" >&2; fail "linkcut: node 1's ranks did not say the store stopped answering"; }
  # the link back, the same command again: it resumes from the newest checkpoint; SIGTERM once it has stepped
  ip -n "${ns[1]}" link set "${veth[1]}" up || fail "link up again"
  launcher_node 0 cut train.max_steps=1000000 dist.timeout_seconds=$timeout checkpoint.every_steps=20; a=$last
  launcher_node 1 cut train.max_steps=1000000 dist.timeout_seconds=$timeout checkpoint.every_steps=20; b=$last
  step=${before#step-}
  step=$((10#$step))
  for _ in $(seq 1 3000); do
    awk '/"type":"resume"/ {r = 1; next} r && /"type":"train"/ {f = 1} END {exit !f}' "$tmp/cut/metrics.jsonl" && break
    sleep 0.02
  done
  kill -TERM "$a" "$b"
  wait "$a"; code_a=$?
  wait "$b"; code_b=$?
  [ "$code_a" -eq 4 ] && [ "$code_b" -eq 4 ] || { tail "$tmp"/cut.node*.log >&2; fail "linkcut: restart exited $code_a/$code_b"; }
  grep -q "\"type\":\"resume\",\"step\":$step," "$tmp/cut/metrics.jsonl" ||
    fail "linkcut: the restart did not resume from step $step: $(grep resume "$tmp/cut/metrics.jsonl")"
  echo "  with the link back, the next start resumed from step $step"
  ;;
*) fail "unknown case '$case_' (launcher, torchrun, elastic, linkcut)" ;;
esac
echo "PASS: $case_"
